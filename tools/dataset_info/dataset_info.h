// dataset_info: what is inside a Megatron .bin/.idx dataset.
//
// Summary (to stdout, as JSON-like "key: value" lines): dtype, sequences,
// documents, empty documents, tokens, sequence-length min/mean/max, token id
// min/max, and the integrity check (the reader's validation plus, with
// --vocab-size, every id below the vocabulary size). With --doc N it prints
// document N's token ids instead, one sequence per line (its text, decoded with
// the GPT-2 vocab, when --vocab-file/--merge-file are given).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "common/core/stats.h"

namespace zlm::dataset_info {

struct InfoOptions {
  std::string prefix;
  int64_t doc = -1;          // --doc N: dump document N
  uint64_t vocab_size = 0;   // --vocab-size: also check ids < vocab_size
  std::string vocab_file, merge_file;  // with --doc: print the text (GPT-2 BPE decode)
};

// Returns the exit code: 0 when the dataset is intact, 1 when an id is out of
// range. Throws zlm::Error(Format) for a damaged index.
int run(const InfoOptions& options, std::ostream& out, Stats& stats);

}  // namespace zlm::dataset_info
