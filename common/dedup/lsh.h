// Verification of one LSH bucket, as Megatron's find_duplicates.py does it
// (docs/compatibility.md, "OpenWebText scripts"), shared by find_duplicates
// (one machine) and near_dedup (sharded), so that both report the same pairs.
//
//   zlm::verify_bucket(docs, rule, shingles_of, known, [&](uint32_t main, uint32_t other, double sim, bool fresh) {...});
//
// `docs` are the bucket's members in input order. Round k takes the first
// remaining member as the "main" document (Megatron picks one at random) and
// compares it by exact character n-gram Jaccard with every other remaining
// member; those above the threshold are reported with it and leave the bucket,
// the others form the next round; at most `heuristic_iter` rounds (-1: until
// fewer than two members remain). The outcome of a bucket depends on its
// members only. `known` may return a similarity computed earlier (in another
// band): it is then reused, and reported with fresh = false.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/dedup/minhash.h"

namespace zlm {

struct BucketRule {
  double threshold = 0.5;  // reported when similarity > threshold
  int heuristic_iter = 1;  // rounds; -1: until exhausted
  JaccardMode mode = JaccardMode::Union;
};

// The MinHash LSH settings find_duplicates and near_dedup share, with their
// defaults (20 bands of 5 rows: Megatron's 10 x 10 finds far fewer pairs at
// Jaccard 0.8; see the README), and the flags that set them
// (common/dedup/lsh_flags.h).
struct LshSettings {
  uint32_t num_bands = 20;
  uint32_t num_seeds = 100;
  uint32_t char_ngram = 5;
  uint64_t seed = 1234;
  double jaccard_threshold = 0.5;
  std::string jaccard = "union";
  int heuristic_iter = 1;
};

// The rule of --jaccard-threshold, --heuristic-iter and --jaccard (union, min,
// max) for bands of --num-seeds / --num-bands rows: the flags checked, each bad
// one a usage error naming it (find_duplicates and near_dedup take the same flags).
BucketRule lsh_rule(uint32_t num_seeds, uint32_t num_bands, double threshold, int heuristic_iter, const std::string& jaccard);

// shingles_of(doc) returns the sorted, unique shingle hashes of doc (the
// caller may cache them); known(main, other) a similarity computed before, if
// any; report(main, other, similarity, fresh) is called for each similar
// pair, rounds in order, members in order; computed(main, other, similarity)
// for each similarity newly computed (may be empty).
void verify_bucket(std::span<const uint32_t> docs, const BucketRule& rule,
                   const std::function<const std::vector<uint64_t>&(uint32_t)>& shingles_of,
                   const std::function<std::optional<double>(uint32_t, uint32_t)>& known,
                   const std::function<void(uint32_t, uint32_t, double, bool)>& report,
                   const std::function<void(uint32_t, uint32_t, double)>& computed = {});

}  // namespace zlm
