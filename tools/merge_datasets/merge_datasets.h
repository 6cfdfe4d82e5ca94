// merge_datasets: Megatron's tools/merge_datasets.py (docs/compatibility.md, "The indexed dataset").
//
// Every `<prefix>.bin`/`<prefix>.idx` pair in `input_dir` (non-recursive) is
// appended, in Python string order of the prefixes, into `output_prefix`, with
// Megatron's "add index" semantics; the output dtype is the first input's and
// all inputs must share it. Differences from Megatron: a stray file in the
// directory is a clear error naming it (Megatron fails an assertion), and the
// output never appears half-written (temporary names, renamed at the end).
#pragma once

#include <string>

#include "common/core/stats.h"

namespace zlm::merge_datasets {

struct MergeOptions {
  std::string input_dir;
  std::string output_prefix;
};

// Throws zlm::Error (Usage for bad paths, Format for bad or mismatched inputs).
void run(const MergeOptions& options, Stats& stats);

}  // namespace zlm::merge_datasets
