// group_dups: groups of similar documents from find_duplicates' output
// (Megatron's group_duplicate_url.py, docs/compatibility.md).
//
// Each input line {"main": [{"other": sim}, ...]} links main with every other
// whose similarity is >= threshold (default 0.7, as Megatron's script; its
// README says 0.9). Groups are the connected components (union-find). Output,
// one line per group of two or more ids: {"<n>": ["id", ...]}, groups numbered
// 0, 1, ... in order of their first id's first appearance, and ids in order of
// first appearance — deterministic, where Megatron's order is Python set order.
// Malformed lines are counted, reported with file:line and skipped.
#pragma once

#include <string>

#include "common/io/cli.h"
#include "common/core/stats.h"

namespace zlm::group_dups {

struct GroupOptions {
  std::string input, output;
  double threshold = 0.7;
  int64_t max_bad_records = -1;
};

void run(const GroupOptions& options, const CommonFlags& common, Stats& stats);

}  // namespace zlm::group_dups
