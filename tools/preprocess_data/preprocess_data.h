// preprocess_data: JSONL -> Megatron .bin/.idx, as Megatron-LM's
// tools/preprocess_data.py (docs/compatibility.md, "preprocess_data").
//
// Per input line (in input order, for any --workers): parse the JSON, take the
// string of each --json-keys key, optionally split it into sentences, tokenize
// each sentence, drop sentences with no tokens, append EOD to the last one with
// --append-eod, and write one sequence per sentence into
// {output_prefix}_{key}_{document|sentence}.bin/.idx.
//
// Differences from Megatron, on purpose:
//  * a malformed line, a missing key, a non-string value, invalid UTF-8 or a
//    lone surrogate is counted, reported with file:line and skipped (for every
//    key, so the outputs stay aligned); --max-bad-records N makes the run fail
//    past N such records. Megatron aborts on the first one.
//  * documents with no tokens are skipped (Megatron 2021-2023 and the
//    BigScience fork; the fixtures were made so); --keep-empty-documents writes
//    them as empty doc_idx entries like Megatron since mid-2023.
//  * --split-sentences uses ICU's sentence rules, not NLTK Punkt.
//  * --partitions P: round-robin (or, with --keep-sequential-samples, contiguous)
//    distribution as Megatron's, written directly into the partition outputs
//    {prefix}_{i}_{key}_{level} and merged in order; no partition input copies.
//  * outputs appear under their final names only when complete.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/io/cli.h"
#include "common/core/stats.h"

namespace zlm::preprocess {

struct PreprocessOptions {
  std::vector<std::string> inputs;  // files, globs or directories (--input)
  std::vector<std::string> json_keys{"text"};
  bool split_sentences = false;
  bool keep_newlines = false;
  std::string tokenizer_type;
  std::string vocab_file, merge_file;
  uint64_t vocab_size = 786;  // NullTokenizer
  bool append_eod = false;
  std::string lang = "english";
  std::string output_prefix;
  std::string dataset_impl = "mmap";
  int workers = 1;
  int partitions = 1;
  bool keep_sequential_samples = false;
  uint64_t log_interval = 1000;
  int64_t max_bad_records = -1;  // -1: unlimited
  bool keep_empty_documents = false;
  uint64_t make_vocab_size_divisible_by = 128;
};

// Runs the whole job; throws zlm::Error. Fills `stats`.
void run(const PreprocessOptions& options, const CommonFlags& common, Stats& stats);

// Output prefix of one key: {prefix}_{key}_{document|sentence}.
std::string output_name(const std::string& prefix, const std::string& key, bool split_sentences);

}  // namespace zlm::preprocess
