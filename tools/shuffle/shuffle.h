// shuffle: a reproducible shuffle of JSONL (or any line) files larger than
// memory, replacing `shuf` in the OpenWebText recipe.
//
// Line i of the input gets the key SplitMix64(seed, i); the output is the lines
// sorted by (key, i), i.e. a uniformly random permutation fixed by --seed.
// Two passes: the first writes each line to one of B temporary bucket files by
// the top bits of its key (B, a power of two, chosen so a bucket fits in
// --memory-mb), the second sorts each bucket and appends it to the output; a
// bucket larger than expected (a compressed input that expands more than 4x,
// standard input) is sorted in runs on disk and merged, so memory stays bounded. The result depends only on the input and the seed, not on B or the
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
  double memory_mb = 1024;
};

void run(const ShuffleOptions& options, const CommonFlags& common, Stats& stats);

// The same permutation as run() over the parts concatenated, in tasks that
// run anywhere (a Slurm array, or several at once here), for corpora that one
// machine should not hold: the output is `buckets` files whose concatenation
// (bucket 0, 1, ...) equals run()'s output on the parts concatenated, for any
// number of parts and buckets.
//   count    one task per part: its line count (--work/shuffle/counts/)
//   scatter  one task per part: each line, keyed by its index in the whole
//            corpus (the earlier parts' counts), into the bucket its key's top
//            bits choose (--work/shuffle/scatter/PART.BUCKET); in several passes
//            over the part when the buckets outnumber the files it may hold open
//            or the 4 KiB write buffers half of --memory-mb holds
//   gather   one task per bucket: every part's records of the bucket, sorted by
//            (key, index) within --memory-mb (runs on disk past it, merged;
//            tools/shuffle/bucket_sort.h), to --bucket-dir/bucket-NNNNN.jsonl
// Each task's files are written under temporary names and renamed when
// complete; a task whose output exists is done (a re-run skips it).
struct ShardedOptions {
  std::string stage;               // count, scatter, gather, all
  std::vector<std::string> parts;  // the input parts, in order
  std::string work, output_dir;
  uint64_t seed = 0;
  uint32_t buckets = 64;           // a power of two
  int64_t task = -1;               // one task, or -1 for every task of the stage
  double memory_mb = 1024;         // gather: a bucket past half of it is sorted in runs on disk, then merged
};
uint64_t sharded_task_count(const ShardedOptions& options);
void run_sharded(const ShardedOptions& options, const CommonFlags& common, Stats& stats);

// The sort key of line i (exposed for tests).
uint64_t line_key(uint64_t seed, uint64_t i);

}  // namespace zlm::shuffle
