// merge_datasets --input DIR --output-prefix PREFIX
// Merges every Megatron .bin/.idx pair of DIR into one dataset, as Megatron's
// tools/merge_datasets.py does (same output bytes).
#include "common/io/cli.h"
#include "common/core/output_file.h"
#include "common/core/log.h"
#include "tools/merge_datasets/merge_datasets.h"

int main(int argc, char** argv) {
  zlm::merge_datasets::MergeOptions opt;
  zlm::CommonFlags common;
  common.allow_abbrev = true;  // Megatron's tools/merge_datasets.py parses with argparse's default: abbreviations allowed
  CLI::App app{"Merge the Megatron .bin/.idx datasets in a directory into one (as Megatron's merge_datasets.py)."};
  app.add_option("--input", opt.input_dir, "Directory holding the <prefix>.bin/.idx pairs to merge (merged in sorted order)")
      ->required()
      ->type_name("DIR");
  app.add_option("--output-prefix", opt.output_prefix, "Output prefix: writes PREFIX.bin and PREFIX.idx")
      ->required()
      ->type_name("PREFIX");
  zlm::add_common_flags(app, common);
  return zlm::tool_main("merge_datasets", app, common, argc, argv, [&] {
    return zlm::run_with_stats("merge_datasets", common, [&](zlm::Stats& stats) {
      double start = zlm::log_elapsed_sec();
      zlm::check_distinct_paths({{"--output-prefix", opt.output_prefix + ".bin"}, {"--output-prefix", opt.output_prefix + ".idx"},
                                 {"--stats-out", common.stats_out}});
      zlm::merge_datasets::run(opt, stats);
      stats.set("elapsed_sec", zlm::log_elapsed_sec() - start);
      return 0;
    });
  });
}
