#include "common/dedup/minhash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <limits>

#include "common/core/error.h"
#include "common/core/utf8.h"
#include "common/dedup/minhash_kernel.h"

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

MinHasher::MinHasher(MinHashParams params) : params_(params) {
  if (params.num_seeds == 0) throw Error(ErrorKind::Usage, "--num-seeds must be positive");
  if (params.char_ngram == 0) throw Error(ErrorKind::Usage, "--char-ngram must be positive");
  std::vector<uint64_t> mul(params.num_seeds), add(params.num_seeds);
  uint64_t state = params.seed;
  for (uint32_t i = 0; i < params.num_seeds; ++i) {
    mul[i] = splitmix64(state) | 1;
    add[i] = splitmix64(state);
  }
  table_ = make_permutation_table(mul, add);
}

void MinHasher::signature(std::string_view text, uint32_t* out, std::vector<uint64_t>* scratch) const {
  std::vector<uint64_t> local;
  std::vector<uint64_t>& h = scratch ? *scratch : local;
  shingle_hashes(text, params_.char_ngram, h);
  min_permutations(h.data(), h.size(), table_, out);
}

std::vector<uint32_t> MinHasher::signature_reference(std::string_view text) const {
  std::vector<uint64_t> set = shingle_set(text, params_.char_ngram);
  std::vector<uint32_t> sig(params_.num_seeds, std::numeric_limits<uint32_t>::max());
  for (uint32_t i = 0; i < params_.num_seeds; ++i)
    for (uint64_t h : set) {
      const uint64_t a = (static_cast<uint64_t>(table_.mul_hi[i]) << 32) | table_.mul_lo[i];
      __extension__ const unsigned __int128 prod = static_cast<unsigned __int128>(a) * (h & 0xFFFFFFFFULL) + table_.add[i];
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
