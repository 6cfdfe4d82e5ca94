// shuffle: a reproducible shuffle of JSONL (or any line) files larger than
// memory, replacing `shuf` in the OpenWebText recipe.
//
// Line i of the input gets the key SplitMix64(seed, i); the output is the lines
// sorted by (key, i), i.e. a uniformly random permutation fixed by --seed.
// Two passes: the first writes each line to one of B temporary bucket files by
// the top bits of its key (B, a power of two, chosen so a bucket fits in
// --memory-mb), the second sorts each bucket in memory and appends it to the
// output. The result depends only on the input and the seed, not on B or the
// machine. Temporary files sit next to the output and are removed, also on
// SIGINT/SIGTERM. Input: plain, .gz, .xz or .zst; "-" is standard input.
#pragma once

#include <cstdint>
#include <string>

#include "common/io/cli.h"
#include "common/core/stats.h"

namespace zlm::shuffle {

struct ShuffleOptions {
  std::string input, output;
  uint64_t seed = 0;
  uint64_t memory_mb = 1024;
};

void run(const ShuffleOptions& options, const CommonFlags& common, Stats& stats);

// The sort key of line i (exposed for tests).
uint64_t line_key(uint64_t seed, uint64_t i);

}  // namespace zlm::shuffle
