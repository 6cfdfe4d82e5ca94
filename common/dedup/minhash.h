// MinHash signatures over character n-grams and exact Jaccard on the same
// n-gram sets (Broder 1997, "On the resemblance and containment of documents").
//
//   zlm::MinHasher hasher({.num_seeds = 100, .char_ngram = 5, .seed = 1234});
//   std::vector<uint32_t> sig(hasher.num_seeds());
//   hasher.signature(text, sig.data());
//   auto a = zlm::shingle_set(text, 5), b = zlm::shingle_set(other, 5);
//   double j = zlm::jaccard(a, b, zlm::JaccardMode::Union);
//
// Shingles are the windows of `char_ngram` consecutive code points (UTF-8
// decoded; an ill-formed byte counts as one character) — every window,
// including the last. Each shingle is hashed once with XXH3-64; permutation i
// is then the multiply-add-shift hash ((a_i * x + b_i) mod 2^64) >> 32 of the
// low 32 bits x of that hash, with (a_i, b_i) drawn from SplitMix64(seed).
// A signature is a minimum over the set of values x, so a repeated x need not go
// through the permutations again (web text repeats about a third of its
// 5-grams within a document; low32_fewer_repeats leaves out most repeats).
// This is a 2-universal family (Dietzfelbinger 1996), cheap enough to apply
// 100 times per shingle, so P[sig_i(A) = sig_i(B)] ~= J(A, B) for each i.
// A text with fewer than char_ngram characters has no shingles: its signature
// is all 0xFFFFFFFF and its Jaccard with anything is 0 (as Megatron's).
//
// Cost: signature O(chars * num_seeds), the permutations vectorised
// (common/dedup/minhash_kernel.h), no allocation once the scratch buffers have
// grown; shingle_set O(chars) expected (sort_unique_hashes). Thread-safe (const).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/dedup/minhash_kernel.h"

namespace zlm {

// Buffers a signature reuses between calls (one per thread).
struct MinHashScratch {
  std::vector<uint32_t> values, slots;
};

struct MinHashParams {
  uint32_t num_seeds = 100;
  uint32_t char_ngram = 5;
  uint64_t seed = 1234;
};

class MinHasher {
 public:
  explicit MinHasher(MinHashParams params);
  const MinHashParams& params() const { return params_; }
  uint32_t num_seeds() const { return params_.num_seeds; }
  // Writes num_seeds() values to out. `scratch` is reused between calls.
  void signature(std::string_view text, uint32_t* out, MinHashScratch* scratch = nullptr) const;
  // The slow obvious version: one permutation at a time over the shingle set (tests).
  std::vector<uint32_t> signature_reference(std::string_view text) const;

 private:
  MinHashParams params_;
  PermutationTable table_;  // the multipliers a_i and increments b_i, also laid out for the vectorised kernel
};

// Hashes (XXH3-64) of every char_ngram-code-point window, in text order (with repeats).
void shingle_hashes(std::string_view text, uint32_t char_ngram, std::vector<uint64_t>& out);
// The low 32 bits of `hashes` with most repeats left out: every value at least
// once, in order of first occurrence, so that a minimum over `out` is the minimum
// over the set. A value is left out when its slot of a direct-mapped table
// (`slots`, at most kRepeatSlots entries, cache-resident) last held the same value.
constexpr size_t kRepeatSlots = 8192;
void low32_fewer_repeats(std::span<const uint64_t> hashes, std::vector<uint32_t>& slots, std::vector<uint32_t>& out);
// Sorts h and removes repeats, in expected linear time for uniformly spread
// values such as hashes (a counting pass by the top bits into about one bucket per
// two values, then each bucket sorted); any input gives std::sort + std::unique's result.
void sort_unique_hashes(std::vector<uint64_t>& h);
// Sorted, de-duplicated shingle hashes.
std::vector<uint64_t> shingle_set(std::string_view text, uint32_t char_ngram);

enum class JaccardMode { Union, Min, Max };
// |A n B| / |A u B| (Union), / min(|A|,|B|) or / max(|A|,|B|); 0 when either is empty.
// Inputs sorted and unique. O(|A| + |B|).
double jaccard(std::span<const uint64_t> a, std::span<const uint64_t> b, JaccardMode mode);

// Fraction of equal positions of two signatures: the MinHash estimate of J.
double signature_similarity(std::span<const uint32_t> a, std::span<const uint32_t> b);

}  // namespace zlm
