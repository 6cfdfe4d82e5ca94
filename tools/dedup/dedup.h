// dedup: keep one document per group of near-duplicates (Megatron's
// remove_group_duplicates.py, docs/compatibility.md).
//
// Groups come from group_dups ({"n": [ids]} lines). Streaming the data in input
// order, a document whose id (--key, default "url") is in a group is kept only
// if it is that group's chosen document: the first member met in the data
// (--keep first, default) or the one with the longest text (--keep longest;
// ties go to the first; needs a first pass over the data). Every other
// document of a group is removed. Kept lines are written byte-identical to the
// input; removed ones go byte-identical to --removed-out when given (so nothing
// disappears without a trace). A malformed data line is counted, reported with
// file:line and written to --removed-out. Megatron keeps the first id of a
// set-ordered list (arbitrary) and re-serialises kept lines.
#pragma once

#include <string>

#include "common/io/cli.h"
#include "common/core/stats.h"

namespace zlm::dedup {

struct DedupOptions {
  std::string groups, input, output;
  std::string key = "url";
  std::string text_key = "text";
  std::string keep = "first";  // first | longest
  std::string removed_out;
  int64_t max_bad_records = -1;
};

void run(const DedupOptions& options, const CommonFlags& common, Stats& stats);

}  // namespace zlm::dedup
