// near_dedup: find_duplicates -> group_dups -> dedup in stages that scale past
// one machine (docs/design.md, "Sharded near-duplicate removal"). Each stage
// is a set of independent tasks (a Slurm job array, or --local-tasks
// processes' worth of threads), chained through files in --work:
//
//   signatures  one task per shard: MinHash each document; write the shard's
//               document table (id hash, line, where its text is), its texts,
//               and per band the sorted (band hash, document, rows) records
//               (external sort past --memory-mb).
//   candidates  one task per band x hash range (ranges at the quantiles of the
//               band hashes): merge every shard's run of the band over the
//               range; each bucket's pairs to compare by find_duplicates' rule
//               (common/dedup/lsh.h: its first document with each other one).
//   verify      one task per part of the pairs (by a hash of the pair): each
//               distinct candidate pair checked once by exact character n-gram
//               Jaccard (a pair met in several bands is not checked again);
//               the similar ones out. With --heuristic-iter other than 1 a
//               bucket's later rounds depend on its first round's results, so
//               candidates verify their buckets whole and verify passes them on.
//   cluster     one task: union-find over the verified ids (group_dups'
//               threshold), the first document of each group kept (dedup's
//               --keep first); per-shard lists of the lines to remove.
//   filter      one task per shard: the shard's lines minus its removals,
//               byte-identical, to --output-dir/part-NNNNN.jsonl.
//
// For the same documents and settings the kept lines equal those of
// find_duplicates + group_dups + dedup on the shards concatenated, for any
// number of shards, ranges and tasks. A task's outputs are written under
// temporary names and its marker (--work/done/...) last: a re-run does only
// the tasks without a marker. Memory: signatures ~ --memory-mb; candidates
// ~ the largest bucket's texts; cluster ~ the similar documents, not the corpus.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/core/stats.h"
#include "common/io/cli.h"
#include "common/dedup/lsh.h"

namespace zlm::near_dedup {

enum class Stage { Signatures, Candidates, Verify, Cluster, Filter };
Stage parse_stage(const std::string& name);
const char* stage_name(Stage stage);

struct Settings : LshSettings {  // the same in every stage of one run (files record their fingerprint)
  double group_threshold = 0.7;
  std::string key = "url";
  std::string text_key = "text";
  uint32_t ranges = 1;  // hash ranges per band: candidates tasks = num_bands * ranges
  uint32_t verify_tasks = 8;  // parts of the candidate pairs, one verify task each
};

struct Options {
  Settings settings;
  std::vector<std::string> shards;  // as given: files, directories or globs
  std::string work;
  std::string output_dir, removed_dir;
  int64_t task = -1;       // one task of the stage, or -1 for all of them
  int local_tasks = 1;     // tasks run at once when task is -1
  int threads = 1;         // threads within a task
  double memory_mb = 1024;  // signatures: band records held before a sorted run is spilled; verify: candidate pairs per sweep
  int64_t max_bad_records = -1;
};

// The shards in order (each listed once) and the number of tasks of a stage.
std::vector<std::string> shard_files(const Options& options);
uint64_t task_count(Stage stage, const Options& options);

// Runs one task (options.task) or every task of the stage without a marker.
void run_stage(Stage stage, const Options& options, const CommonFlags& common, Stats& stats);

}  // namespace zlm::near_dedup
