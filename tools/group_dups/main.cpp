// group_dups <find_duplicates output> <output> [threshold]
// Groups similar documents (Megatron's group_duplicate_url.py).
#include "common/io/cli.h"
#include "tools/group_dups/group_dups.h"

int main(int argc, char** argv) {
  zlm::group_dups::GroupOptions opt;
  zlm::CommonFlags common;
  CLI::App app{"Group similar documents from find_duplicates output: union-find over pairs at or above the threshold "
               "(as Megatron's group_duplicate_url.py; its default 0.7, while its README says 0.9)."};
  app.add_option("input", opt.input, "find_duplicates output (JSONL)")->required();
  app.add_option("output", opt.output, "Groups, one JSON line per group: {\"n\": [ids]}")->required();
  app.add_option("threshold", opt.threshold, "Minimum similarity linking two documents")->capture_default_str()
      ->check(zlm::finite_range(0.0, 1.0));
  app.add_option("--max-bad-records", opt.max_bad_records, "Fail when more than N lines are malformed")->type_name("N");
  zlm::add_common_flags(app, common);
  return zlm::tool_main("group_dups", app, common, argc, argv, [&] {
    return zlm::run_with_stats("group_dups", common, [&](zlm::Stats& stats) {
      zlm::group_dups::run(opt, common, stats);
      return 0;
    });
  });
}
