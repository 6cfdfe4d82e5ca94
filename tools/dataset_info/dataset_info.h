// dataset_info: what is inside a Megatron .bin/.idx dataset.
//
// Summary (to stdout, as JSON-like "key: value" lines): dtype, sequences,
// documents, empty documents, tokens, sequence-length min/mean/max, token id
// min/max, and the integrity check (the reader's validation plus, with
// --vocab-size, every id below the vocabulary size). With --doc N it prints
// document N's token ids instead, one sequence per line (its text, decoded with
// the GPT-2 vocab, when --vocab-file/--merge-file are given). With --sample I
// it prints the GPT samples pretrain_gpt would feed from I on (one line of
// seq_length + 1 ids each) for the given split, sample count, sequence length
// and seed, over one dataset or a blend "W1 PREFIX1 W2 PREFIX2 ..."; the index
// caches are loaded, or built and written, as pretrain_gpt does.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/core/stats.h"

namespace zlm::dataset_info {

struct InfoOptions {
  std::vector<std::string> data;  // PREFIX, or (with --sample) W1 PREFIX1 W2 PREFIX2 ...
  int64_t doc = -1;          // --doc N: dump document N
  uint64_t vocab_size = 0;   // --vocab-size: also check ids < vocab_size
  std::string vocab_file, merge_file;  // with --doc: print the text (GPT-2 BPE decode)
  // --sample I: samples I .. I + sample_count - 1 of the split, as pretrain_gpt reads them.
  int64_t sample = -1, sample_count = 1;
  int64_t num_samples = 0, seq_length = 0;  // the split's target sample count; tokens per sample
  std::string split = "969, 30, 1", split_name = "train", data_cache_path;
  uint32_t seed = 1234;
};

// Returns the exit code: 0 when the dataset is intact, 1 when an id is out of
// range. Throws zlm::Error(Format) for a damaged index.
int run(const InfoOptions& options, std::ostream& out, Stats& stats);

}  // namespace zlm::dataset_info
