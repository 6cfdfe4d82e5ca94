// preprocess_data: tokenize JSONL into Megatron's .bin/.idx, with the flags of
// Megatron-LM's tools/preprocess_data.py.
#include "common/io/cli.h"
#include "common/core/log.h"
#include "common/tokenizer/gpt2_files.h"
#include "tools/preprocess_data/preprocess_data.h"

int main(int argc, char** argv) {
  zlm::preprocess::PreprocessOptions opt;
  zlm::CommonFlags common;
  common.allow_abbrev = true;  // Megatron's tools/preprocess_data.py parses with argparse's default: abbreviations allowed
  int chunk_size = 0;
  CLI::App app{"Tokenize JSONL documents into Megatron .bin/.idx datasets (as Megatron-LM's tools/preprocess_data.py)."};
  auto* in = app.add_option_group("input data");
  in->add_option("--input", opt.inputs, "JSONL input: a file, a glob or a directory; plain, .gz, .xz or .zst")
      ->required()
      ->expected(1, -1);
  in->add_option("--json-keys", opt.json_keys, "Keys to extract from each JSON line")->capture_default_str()->expected(1, -1);
  in->add_flag("--split-sentences", opt.split_sentences,
               "Split documents into sentences (ICU sentence rules, NOT NLTK Punkt: boundaries differ from Megatron's)");
  in->add_flag("--keep-newlines", opt.keep_newlines, "Keep newlines between sentences when splitting");
  in->add_option("--lang", opt.lang, "Language for sentence splitting (NLTK name or BCP-47 tag)")->capture_default_str();
  in->add_option("--max-bad-records", opt.max_bad_records,
                 "Fail when more than N records are malformed (default: skip and count them all)")->type_name("N");
  in->add_flag("--keep-empty-documents", opt.keep_empty_documents,
               "Write documents with no tokens as empty doc_idx entries (Megatron since 2023-06) instead of skipping them");
  auto* tok = app.add_option_group("tokenizer");
  tok->add_option("--tokenizer-type", opt.tokenizer_type, "GPT2BPETokenizer or NullTokenizer")->required();
  // "--vocab": BigScience's Megatron-DeepSpeed README passes it, an abbreviation there (its only --vocab* flag); here
  // --vocab-size (current Megatron's NullTokenizer flag) would make the prefix ambiguous, so it is an alias.
  tok->add_option("--vocab-file,--vocab", opt.vocab_file, "GPT-2 vocab.json (default: GPT-2's own, installed with the tools)");
  tok->add_option("--merge-file", opt.merge_file, "GPT-2 merges.txt (default: GPT-2's own, with --vocab-file's default)");
  tok->add_option("--vocab-size", opt.vocab_size, "NullTokenizer vocabulary size (EOD = this value)")->capture_default_str();
  tok->add_flag("--append-eod", opt.append_eod, "Append an end-of-document token to each document");
  tok->add_option("--make-vocab-size-divisible-by", opt.make_vocab_size_divisible_by,
                  "Pad the vocab size to a multiple of this (reported only; does not change the files)")->capture_default_str();
  auto* out = app.add_option_group("output data");
  out->add_option("--output-prefix", opt.output_prefix, "Writes {prefix}_{key}_{document|sentence}.bin/.idx")->required();
  out->add_option("--dataset-impl", opt.dataset_impl, "Only mmap (Megatron's MMIDIDX)")->capture_default_str();
  auto* run = app.add_option_group("runtime");
  run->add_option("--workers", opt.workers, "Worker threads; output is identical for any number")->capture_default_str()->check(zlm::thread_count());
  run->add_option("--partitions", opt.partitions, "Megatron's partitions: documents distributed round-robin, outputs merged in order")
      ->capture_default_str();
  run->add_flag("--keep-sequential-samples", opt.keep_sequential_samples, "With --partitions: contiguous chunks instead of round-robin");
  run->add_option("--log-interval", opt.log_interval, "Megatron-style 'Processed N documents' line every N documents (rate-limited by --progress-sec)")
      ->capture_default_str();
  run->add_option("--chunk-size", chunk_size, "Accepted for Megatron 2022-2023 command lines; batching here is automatic");
  zlm::add_common_flags(app, common);
  return zlm::tool_main("preprocess_data", app, common, argc, argv, [&] {
    if (chunk_size) ZLM_LOG_INF("--chunk-size %d: not needed (batches are sized automatically); output is unaffected", chunk_size);
    if (opt.log_interval == 0) opt.log_interval = 1;
    if (opt.tokenizer_type == "GPT2BPETokenizer") {  // no files given: GPT-2's own, installed with the tools
      const zlm::Gpt2Files files = zlm::resolve_gpt2_files(opt.vocab_file, opt.merge_file);
      opt.vocab_file = files.vocab_file;
      opt.merge_file = files.merge_file;
      if (files.bundled) ZLM_LOG_INF("no --vocab-file/--merge-file given: GPT-2's own, %s and %s", files.vocab_file.c_str(), files.merge_file.c_str());
    }
    return zlm::run_with_stats("preprocess_data", common, [&](zlm::Stats& stats) {
      zlm::preprocess::run(opt, common, stats);
      return 0;
    });
  });
}
