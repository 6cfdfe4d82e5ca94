#include "common/dedup/minhash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <limits>

#include "common/core/error.h"
#include "common/core/utf8.h"

namespace zlm {

namespace {
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Byte length of the code point starting at p (1 for a byte of an ill-formed
// sequence; JSONL input is always well-formed, simdjson checks it).
inline size_t cp_len(const unsigned char* p, const unsigned char* end) {
  if (*p < 0x80) return 1;
  const Utf8Step st = utf8_step(reinterpret_cast<const char*>(p), reinterpret_cast<const char*>(end));
  return st.ok ? st.len : 1;
}

// The minimum over all shingles for each permutation, in one pass over the
// hashes. (a*x + b) mod 2^64 >> 32 with a = a_hi*2^32 + a_lo and a 32-bit x is
// computed as hi32(a_lo*x + b) + a_hi*x (mod 2^32): two 32x32->64 multiplies
// per permutation. Portable version:
void min_permutations_scalar(const uint64_t* hashes, size_t n, const uint32_t* mul_lo, const uint32_t* mul_hi,
                             const uint64_t* add, uint32_t k, uint32_t* out) {
  for (uint32_t i = 0; i < k; ++i) out[i] = std::numeric_limits<uint32_t>::max();
  for (size_t s = 0; s < n; ++s) {
    const uint32_t x = static_cast<uint32_t>(hashes[s]);
    for (uint32_t i = 0; i < k; ++i) {
      uint64_t t = static_cast<uint64_t>(mul_lo[i]) * x + add[i];
      uint32_t v = static_cast<uint32_t>(t >> 32) + mul_hi[i] * x;
      out[i] = v < out[i] ? v : out[i];
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// AVX2: 16 permutations per pass over the shingles (four 4-lane groups of
// 64-bit lanes, minima kept in registers), so the hashes stream from L1 k/16
// times and four independent dependency chains keep the multipliers busy.
namespace avx2 {
struct Group {
  __m256i lo, hi, add, acc;
};
__attribute__((target("avx2"))) inline Group load_group(const uint32_t* mul_lo, const uint32_t* mul_hi, const uint64_t* add) {
  return {_mm256_cvtepu32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mul_lo))),
          _mm256_cvtepu32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mul_hi))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(add)), _mm256_set1_epi64x(0xFFFFFFFFLL)};
}
__attribute__((target("avx2"))) inline void step(Group& g, __m256i x, __m256i mask32) {
  __m256i t = _mm256_srli_epi64(_mm256_add_epi64(_mm256_mul_epu32(g.lo, x), g.add), 32);
  t = _mm256_and_si256(_mm256_add_epi64(t, _mm256_mul_epu32(g.hi, x)), mask32);
  g.acc = _mm256_min_epu32(g.acc, t);  // upper 32 bits of every lane are 0
}
__attribute__((target("avx2"))) inline void store(const Group& g, uint32_t* out) {
  alignas(32) uint64_t tmp[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), g.acc);
  for (int j = 0; j < 4; ++j) out[j] = static_cast<uint32_t>(tmp[j]);
}
}  // namespace avx2

__attribute__((target("avx2"))) void min_permutations_avx2(const uint64_t* hashes, size_t n, const uint32_t* mul_lo,
                                                           const uint32_t* mul_hi, const uint64_t* add, uint32_t k,
                                                           uint32_t* out) {
  const __m256i mask32 = _mm256_set1_epi64x(0xFFFFFFFFLL);
  uint32_t i = 0;
  for (; i + 16 <= k; i += 16) {
    avx2::Group g[4];
    for (int j = 0; j < 4; ++j) g[j] = avx2::load_group(mul_lo + i + 4 * j, mul_hi + i + 4 * j, add + i + 4 * j);
    for (size_t s = 0; s < n; ++s) {
      const __m256i x = _mm256_set1_epi64x(static_cast<int64_t>(hashes[s] & 0xFFFFFFFFULL));
      avx2::step(g[0], x, mask32);
      avx2::step(g[1], x, mask32);
      avx2::step(g[2], x, mask32);
      avx2::step(g[3], x, mask32);
    }
    for (int j = 0; j < 4; ++j) avx2::store(g[j], out + i + 4 * j);
  }
  for (; i + 4 <= k; i += 4) {
    avx2::Group g = avx2::load_group(mul_lo + i, mul_hi + i, add + i);
    for (size_t s = 0; s < n; ++s) avx2::step(g, _mm256_set1_epi64x(static_cast<int64_t>(hashes[s] & 0xFFFFFFFFULL)), mask32);
    avx2::store(g, out + i);
  }
  if (i < k) min_permutations_scalar(hashes, n, mul_lo + i, mul_hi + i, add + i, k - i, out + i);
}
#endif

void min_permutations(const uint64_t* hashes, size_t n, const uint32_t* mul_lo, const uint32_t* mul_hi,
                      const uint64_t* add, uint32_t k, uint32_t* out) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
  if (has_avx2) return min_permutations_avx2(hashes, n, mul_lo, mul_hi, add, k, out);
#endif
  min_permutations_scalar(hashes, n, mul_lo, mul_hi, add, k, out);
}
}  // namespace

void shingle_hashes(std::string_view text, uint32_t char_ngram, std::vector<uint64_t>& out) {
  out.clear();
  if (char_ngram == 0) return;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  // Ring of the last char_ngram code point start offsets.
  size_t offset = 0;
  std::vector<size_t> ring(char_ngram);
  uint64_t count = 0;
  while (p + offset < end) {
    ring[count % char_ngram] = offset;
    offset += cp_len(p + offset, end);
    ++count;
    if (count >= char_ngram) {
      size_t first = ring[(count - char_ngram) % char_ngram];
      out.push_back(XXH3_64bits(p + first, offset - first));
    }
  }
}

std::vector<uint64_t> shingle_set(std::string_view text, uint32_t char_ngram) {
  std::vector<uint64_t> h;
  shingle_hashes(text, char_ngram, h);
  std::sort(h.begin(), h.end());
  h.erase(std::unique(h.begin(), h.end()), h.end());
  return h;
}

MinHasher::MinHasher(MinHashParams params)
    : params_(params), mul_(params.num_seeds), add_(params.num_seeds), mul_lo_(params.num_seeds), mul_hi_(params.num_seeds) {
  if (params.num_seeds == 0) throw Error(ErrorKind::Usage, "--num-seeds must be positive");
  if (params.char_ngram == 0) throw Error(ErrorKind::Usage, "--char-ngram must be positive");
  uint64_t state = params.seed;
  for (uint32_t i = 0; i < params.num_seeds; ++i) {
    mul_[i] = splitmix64(state) | 1;
    add_[i] = splitmix64(state);
    mul_lo_[i] = static_cast<uint32_t>(mul_[i]);
    mul_hi_[i] = static_cast<uint32_t>(mul_[i] >> 32);
  }
}

void MinHasher::signature(std::string_view text, uint32_t* out, std::vector<uint64_t>* scratch) const {
  std::vector<uint64_t> local;
  std::vector<uint64_t>& h = scratch ? *scratch : local;
  shingle_hashes(text, params_.char_ngram, h);
  min_permutations(h.data(), h.size(), mul_lo_.data(), mul_hi_.data(), add_.data(), params_.num_seeds, out);
}

std::vector<uint32_t> MinHasher::signature_reference(std::string_view text) const {
  std::vector<uint64_t> set = shingle_set(text, params_.char_ngram);
  std::vector<uint32_t> sig(params_.num_seeds, std::numeric_limits<uint32_t>::max());
  for (uint32_t i = 0; i < params_.num_seeds; ++i)
    for (uint64_t h : set) {
      __extension__ const unsigned __int128 prod = static_cast<unsigned __int128>(mul_[i]) * (h & 0xFFFFFFFFULL) + add_[i];
      sig[i] = std::min(sig[i], static_cast<uint32_t>(static_cast<uint64_t>(prod) >> 32));
    }
  return sig;
}

double jaccard(std::span<const uint64_t> a, std::span<const uint64_t> b, JaccardMode mode) {
  if (a.empty() || b.empty()) return 0.0;
  size_t i = 0, j = 0, inter = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] < b[j]) ++i;
    else if (b[j] < a[i]) ++j;
    else {
      ++inter;
      ++i;
      ++j;
    }
  }
  double denom;
  switch (mode) {
    case JaccardMode::Union: denom = static_cast<double>(a.size() + b.size() - inter); break;
    case JaccardMode::Min: denom = static_cast<double>(std::min(a.size(), b.size())); break;
    case JaccardMode::Max: denom = static_cast<double>(std::max(a.size(), b.size())); break;
    default: denom = 1;
  }
  return static_cast<double>(inter) / denom;
}

double signature_similarity(std::span<const uint32_t> a, std::span<const uint32_t> b) {
  if (a.size() != b.size() || a.empty()) return 0.0;
  size_t eq = 0;
  for (size_t i = 0; i < a.size(); ++i) eq += a[i] == b[i];
  return static_cast<double>(eq) / static_cast<double>(a.size());
}

}  // namespace zlm
