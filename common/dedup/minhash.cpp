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

// Calls emit(hash) for the shingles of text, windows of n code points (N == n,
// or 0 when n is known only at run time): a ring of the last n code point start
// offsets, whose slot written next holds the oldest start once the ring is full.
// Inside a run of ASCII a window is N bytes: with N set, such a run goes through
// a loop of its own (a hash specialised for N bytes, no ring), and the ring is
// refilled with the run's last N starts when it ends.
template <uint32_t N, typename Emit>
void for_each_shingle(std::string_view text, uint32_t n, Emit&& emit) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  std::vector<size_t> ring(n);
  size_t offset = 0, next = 0, ascii_run = 0;  // ascii_run: ASCII code points just before offset
  uint64_t count = 0;
  while (p + offset < end) {
    if (N != 0 && ascii_run + 1 >= N && p[offset] < 0x80) {
      const size_t from = offset;
      do emit(XXH3_64bits(p + ++offset - N, N));
      while (p + offset < end && p[offset] < 0x80);
      count += offset - from;
      ascii_run += offset - from;
      next = (next + (offset - from)) % n;
      for (size_t j = 1; j <= n; ++j) ring[(next + n - j) % n] = offset - j;  // all ASCII: ascii_run >= N
      continue;
    }
    ring[next] = offset;
    next = next + 1 == n ? 0 : next + 1;
    ++count;
    if (p[offset] < 0x80) {
      ++offset;
      ++ascii_run;
    } else {
      offset += cp_len(p + offset, end);
      ascii_run = 0;
    }
    if (count >= n) emit(XXH3_64bits(p + ring[next], offset - ring[next]));
  }
}

template <typename Emit>
void for_each_shingle(std::string_view text, uint32_t n, Emit&& emit) {
  if (n == 5) return for_each_shingle<5>(text, 5, emit);  // the default of every tool
  if (n != 0) for_each_shingle<0>(text, n, emit);
}

// The low 32 bits of hashes, appended to `out` unless the value's slot of a
// direct-mapped table last held the same value (see low32_fewer_repeats).
class RepeatFilter {
 public:
  RepeatFilter(size_t max_values, std::vector<uint32_t>& slots, std::vector<uint32_t>& out) : out_(out) {
    size_t size = 64;
    while (size < max_values && size < kRepeatSlots) size *= 2;
    slots.assign(size, 0);
    slots_ = slots.data();
    mask_ = size - 1;
    out.resize(max_values);
  }
  void operator()(uint64_t hash) {  // branch-free: a repeat is rarely predictable
    const auto x = static_cast<uint32_t>(hash);
    uint32_t& slot = slots_[x & mask_];  // the bits of an XXH3 hash are uniform: no further mixing
    out_[kept_] = x;
    kept_ += (slot != x) | (x == 0);  // 0 is also the empty slot's value: always kept
    slot = x;
  }
  void finish() { out_.resize(kept_); }

 private:
  std::vector<uint32_t>& out_;
  uint32_t* slots_;
  size_t mask_, kept_ = 0;
};

}  // namespace

void shingle_hashes(std::string_view text, uint32_t char_ngram, std::vector<uint64_t>& out) {
  out.clear();
  out.reserve(text.size());
  for_each_shingle(text, char_ngram, [&](uint64_t h) { out.push_back(h); });
}

void low32_fewer_repeats(std::span<const uint64_t> hashes, std::vector<uint32_t>& slots, std::vector<uint32_t>& out) {
  RepeatFilter filter(hashes.size(), slots, out);
  for (uint64_t h : hashes) filter(h);
  filter.finish();
}

void sort_unique_hashes(std::vector<uint64_t>& h) {
  const size_t n = h.size();
  if (n < 256) {
    std::sort(h.begin(), h.end());
  } else {
    uint32_t bits = 1;  // about two values per bucket
    while ((size_t{1} << (bits + 1)) <= n / 2 && bits < 20) ++bits;
    const uint32_t shift = 64 - bits;
    std::vector<uint32_t> start((size_t{1} << bits) + 1, 0);
    for (uint64_t x : h) ++start[(x >> shift) + 1];
    for (size_t b = 1; b < start.size(); ++b) start[b] += start[b - 1];
    std::vector<uint64_t> out(n);
    std::vector<uint32_t> at(start.begin(), start.end() - 1);
    for (uint64_t x : h) out[at[x >> shift]++] = x;
    for (size_t b = 0; b + 1 < start.size(); ++b) {  // each bucket in order: a few values, or repeats
      uint64_t* first = out.data() + start[b];
      const size_t len = start[b + 1] - start[b];
      if (len > 16) {
        std::sort(first, first + len);
        continue;
      }
      for (size_t i = 1; i < len; ++i)
        for (size_t j = i; j > 0 && first[j] < first[j - 1]; --j) std::swap(first[j], first[j - 1]);
    }
    h.swap(out);
  }
  h.erase(std::unique(h.begin(), h.end()), h.end());
}

std::vector<uint64_t> shingle_set(std::string_view text, uint32_t char_ngram) {
  std::vector<uint64_t> h;
  shingle_hashes(text, char_ngram, h);
  sort_unique_hashes(h);
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

void MinHasher::signature(std::string_view text, uint32_t* out, MinHashScratch* scratch) const {
  MinHashScratch local;
  MinHashScratch& s = scratch ? *scratch : local;
  RepeatFilter filter(text.size(), s.slots, s.values);  // a shingle per code point at most
  for_each_shingle(text, params_.char_ngram, filter);
  filter.finish();
  min_permutations(s.values.data(), s.values.size(), table_, out);
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
