// shuffle --seed N in.jsonl out.jsonl
// Reproducible shuffle of line files larger than memory (replaces `shuf`).
#include "common/io/cli.h"
#include "tools/shuffle/shuffle.h"

int main(int argc, char** argv) {
  zlm::shuffle::ShuffleOptions opt;
  zlm::CommonFlags common;
  CLI::App app{"Shuffle the lines of a file reproducibly (a seeded random permutation), also for files larger than memory."};
  app.add_option("input", opt.input, "Input lines (plain, .gz, .xz or .zst; - for stdin)")->required();
  app.add_option("output", opt.output, "Shuffled output")->required();
  app.add_option("--seed", opt.seed, "Seed: the same seed and input give the same output")->capture_default_str()
      ->check(zlm::whole_number(0, UINT64_MAX));
  app.add_option("--memory-mb", opt.memory_mb, "Memory budget; larger inputs go through temporary buckets (the output does not change)")
      ->capture_default_str()->check(zlm::whole_number(1, uint64_t{1} << 30));
  zlm::add_common_flags(app, common);
  return zlm::tool_main("shuffle", app, common, argc, argv, [&] {
    return zlm::run_with_stats("shuffle", common, [&](zlm::Stats& stats) {
      zlm::shuffle::run(opt, common, stats);
      return 0;
    });
  });
}
