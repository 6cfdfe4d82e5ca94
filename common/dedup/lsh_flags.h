// The command-line flags of the MinHash LSH settings (common/dedup/lsh.h), for
// the tools that take them: find_duplicates and near_dedup, with one meaning
// and one default each.
//
//   zlm::LshSettings s;
//   zlm::add_lsh_flags(app, s);
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

#include "common/dedup/lsh.h"
#include "common/io/cli.h"

namespace zlm {

inline void add_lsh_flags(CLI::App& app, LshSettings& s) {
  app.add_option("--jaccard", s.jaccard, "Jaccard denominator: union, min or max")->capture_default_str();
  app.add_option("--heuristic-iter", s.heuristic_iter, "Verification rounds per bucket (-1: until exhausted)")->capture_default_str();
  app.add_option("--num-bands", s.num_bands,
                 "LSH bands (Megatron's default is 10; 20 bands x 5 rows find 99.9% of pairs at Jaccard 0.8, 10 x 10 only 68%)")
      ->capture_default_str();
  app.add_option("--num-seeds", s.num_seeds, "MinHash permutations (a multiple of --num-bands)")->capture_default_str();
  app.add_option("--seed", s.seed, "Seed of the permutations")->capture_default_str()->check(whole_number(0, UINT64_MAX));
  app.add_option("--char-ngram", s.char_ngram, "Characters per shingle")->capture_default_str();
  app.add_option("--jaccard-threshold", s.jaccard_threshold, "Report pairs with similarity above this")
      ->capture_default_str()->check(finite_range(0.0, 1.0));
}

}  // namespace zlm
