// dedup <groups> <data.jsonl> <output.jsonl>
// Keeps one document per group of near-duplicates (Megatron's remove_group_duplicates.py).
#include "common/io/cli.h"
#include "tools/dedup/dedup.h"

int main(int argc, char** argv) {
  zlm::dedup::DedupOptions opt;
  zlm::CommonFlags common;
  CLI::App app{"Keep one document per group of near-duplicates; kept lines are byte-identical to the input "
               "(as Megatron's remove_group_duplicates.py)."};
  app.add_option("groups", opt.groups, "group_dups output")->required();
  app.add_option("input", opt.input, "JSONL data (plain, .gz, .xz or .zst)")->required();
  app.add_option("output", opt.output, "Deduplicated JSONL")->required();
  app.add_option("--key", opt.key, "JSON key of the document id")->capture_default_str();
  app.add_option("--text-key", opt.text_key, "JSON key of the text (for --keep longest and the char counter)")->capture_default_str();
  app.add_option("--keep", opt.keep, "Which member of a group survives: first (in input order) or longest")->capture_default_str()
      ->check(CLI::IsMember({"first", "longest"}));
  app.add_option("--removed-out", opt.removed_out, "Write removed and malformed lines here, byte-identical");
  app.add_option("--max-bad-records", opt.max_bad_records, "Fail when more than N data lines are malformed")->type_name("N");
  zlm::add_common_flags(app, common);
  return zlm::tool_main("dedup", app, common, argc, argv, [&] {
    return zlm::run_with_stats("dedup", common, [&](zlm::Stats& stats) {
      zlm::dedup::run(opt, common, stats);
      return 0;
    });
  });
}
