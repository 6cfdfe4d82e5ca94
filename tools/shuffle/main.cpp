// shuffle --seed N in.jsonl out.jsonl      (or shuf's spelling: shuffle in.jsonl -o out.jsonl)
// Reproducible shuffle of line files larger than memory (replaces `shuf`).
#include "common/core/error.h"
#include "common/io/cli.h"
#include "tools/shuffle/shuffle.h"

int main(int argc, char** argv) {
  zlm::shuffle::ShuffleOptions opt;
  zlm::CommonFlags common;
  common.allow_abbrev = true;  // shuf's getopt_long takes unambiguous prefixes of long options too
  CLI::App app{"Shuffle the lines of a file reproducibly (a seeded random permutation), also for files larger than memory."};
  app.add_option("input", opt.input, "Input lines (plain, .gz, .xz or .zst; - for stdin)")->required();
  std::string output_flag;
  app.add_option("output", opt.output, "Shuffled output (or -o)");
  app.add_option("-o,--output", output_flag, "Shuffled output, as shuf's -o")->type_name("FILE");
  app.add_option("--seed", opt.seed, "Seed: the same seed and input give the same output")->capture_default_str()
      ->check(zlm::whole_number(0, UINT64_MAX));
  app.add_option("--memory-mb", opt.memory_mb, "Memory budget; larger inputs go through temporary buckets (the output does not change)")
      ->capture_default_str()->check(zlm::whole_number(1, uint64_t{1} << 30));
  zlm::add_common_flags(app, common);
  return zlm::tool_main("shuffle", app, common, argc, argv, [&] {
    if (opt.output.empty() && output_flag.empty())
      throw zlm::Error(zlm::ErrorKind::Usage, "no output: give it as the second argument or as -o FILE");
    if (!opt.output.empty() && !output_flag.empty())
      throw zlm::Error(zlm::ErrorKind::Usage, "the output is given twice ('%s' and -o '%s'): give it once", opt.output.c_str(), output_flag.c_str());
    if (opt.output.empty()) opt.output = output_flag;
    return zlm::run_with_stats("shuffle", common, [&](zlm::Stats& stats) {
      zlm::shuffle::run(opt, common, stats);
      return 0;
    });
  });
}
