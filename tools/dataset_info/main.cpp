// dataset_info PREFIX [--doc N] [--vocab-size V]
// dataset_info PREFIX | W1 PREFIX1 W2 PREFIX2 ... --sample I --num-samples N --seq-length S [--split ...]
// Counts, dtype, token statistics and an integrity check of a Megatron dataset,
// or the token ids of one document.
#include <iostream>

#include "common/io/cli.h"
#include "common/core/error.h"
#include "common/core/output_file.h"
#include "tools/dataset_info/dataset_info.h"

int main(int argc, char** argv) {
  zlm::dataset_info::InfoOptions opt;
  zlm::CommonFlags common;
  CLI::App app{"Describe and check a Megatron .bin/.idx dataset, or print one document's token ids."};
  app.add_option("prefix", opt.data, "Dataset prefix (PREFIX.bin and PREFIX.idx); with --sample also a blend W1 PREFIX1 W2 PREFIX2 ...")
      ->required()->type_name("PREFIX");
  app.add_option("--doc", opt.doc, "Print the token ids of document N (one sequence per line)")->type_name("N")
      ->check(zlm::whole_number(0, INT64_MAX));
  app.add_option("--vocab-file", opt.vocab_file, "With --doc: print the text, decoded with this GPT-2 vocab.json");
  app.add_option("--merge-file", opt.merge_file, "With --doc: the matching merges.txt");
  app.add_option("--vocab-size", opt.vocab_size, "Also check that every token id is below V")->type_name("V")
      ->check(zlm::whole_number(1, UINT32_MAX));
  auto* sample = app.add_option("--sample", opt.sample, "Print the GPT samples pretrain_gpt feeds from sample I on (seq-length + 1 ids a "
                                 "line); builds or loads the index caches as pretrain_gpt does")->type_name("I")
      ->check(zlm::whole_number(0, INT64_MAX));
  app.add_option("--sample-count", opt.sample_count, "With --sample: how many samples")->type_name("N")
      ->check(zlm::whole_number(1, INT64_MAX))->needs(sample);
  app.add_option("--num-samples", opt.num_samples, "With --sample: the split's target sample count (train: --train-iters x "
                 "--global-batch-size)")->type_name("N")->check(zlm::whole_number(1, INT64_MAX))->needs(sample);
  app.add_option("--seq-length", opt.seq_length, "With --sample: tokens per sample")->type_name("N")
      ->check(zlm::whole_number(1, INT64_MAX))->needs(sample);
  app.add_option("--split", opt.split, "With --sample: train/valid/test split weights")->capture_default_str()->needs(sample);
  app.add_option("--split-name", opt.split_name, "With --sample: train, valid or test")->capture_default_str()->needs(sample);
  app.add_option("--seed", opt.seed, "With --sample: Megatron's --seed")->capture_default_str()->needs(sample);
  app.add_option("--data-cache-path", opt.data_cache_path, "With --sample: directory of the index caches (default: next to the data)")
      ->needs(sample);
  zlm::add_common_flags(app, common);
  return zlm::tool_main("dataset_info", app, common, argc, argv, [&] {
    if (opt.sample >= 0 && (opt.num_samples == 0 || opt.seq_length == 0))
      throw zlm::Error(zlm::ErrorKind::Usage, "--sample needs --num-samples and --seq-length");
    for (const auto& p : opt.data)
      zlm::check_distinct_paths({{"--stats-out", common.stats_out}}, {{"<prefix>", p + ".bin"}, {"<prefix>", p + ".idx"}});
    zlm::Stats stats("dataset_info");
    int rc = zlm::dataset_info::run(opt, std::cout, stats);
    if (!common.stats_out.empty()) stats.write_json(common.stats_out);
    return rc;
  });
}
