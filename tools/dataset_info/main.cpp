// dataset_info PREFIX [--doc N] [--vocab-size V]
// Counts, dtype, token statistics and an integrity check of a Megatron dataset,
// or the token ids of one document.
#include <iostream>

#include "common/io/cli.h"
#include "common/core/output_file.h"
#include "tools/dataset_info/dataset_info.h"

int main(int argc, char** argv) {
  zlm::dataset_info::InfoOptions opt;
  zlm::CommonFlags common;
  CLI::App app{"Describe and check a Megatron .bin/.idx dataset, or print one document's token ids."};
  app.add_option("prefix", opt.prefix, "Dataset prefix (PREFIX.bin and PREFIX.idx)")->required()->type_name("PREFIX");
  app.add_option("--doc", opt.doc, "Print the token ids of document N (one sequence per line)")->type_name("N")
      ->check(zlm::whole_number(0, INT64_MAX));
  app.add_option("--vocab-file", opt.vocab_file, "With --doc: print the text, decoded with this GPT-2 vocab.json");
  app.add_option("--merge-file", opt.merge_file, "With --doc: the matching merges.txt");
  app.add_option("--vocab-size", opt.vocab_size, "Also check that every token id is below V")->type_name("V")
      ->check(zlm::whole_number(1, UINT32_MAX));
  zlm::add_common_flags(app, common);
  return zlm::tool_main("dataset_info", app, common, argc, argv, [&] {
    zlm::check_distinct_paths({{"--stats-out", common.stats_out}}, {{"<prefix>", opt.prefix + ".bin"}, {"<prefix>", opt.prefix + ".idx"}});
    zlm::Stats stats("dataset_info");
    int rc = zlm::dataset_info::run(opt, std::cout, stats);
    if (!common.stats_out.empty()) stats.write_json(common.stats_out);
    return rc;
  });
}
