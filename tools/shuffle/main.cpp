// shuffle --seed N in.jsonl out.jsonl      (or shuf's spelling: shuffle in.jsonl -o out.jsonl)
// Reproducible shuffle of line files larger than memory (replaces `shuf`).
#include "common/core/error.h"
#include <cstdio>

#include "common/io/cli.h"
#include "common/io/input_files.h"
#include "tools/shuffle/shuffle.h"

int main(int argc, char** argv) {
  zlm::shuffle::ShuffleOptions opt;
  zlm::CommonFlags common;
  common.allow_abbrev = true;  // shuf's getopt_long takes unambiguous prefixes of long options too
  CLI::App app{"Shuffle the lines of a file reproducibly (a seeded random permutation), also for files larger than memory."};
  app.add_option("input", opt.input, "Input lines (plain, .gz, .xz or .zst; - for stdin)");
  std::string output_flag;
  app.add_option("output", opt.output, "Shuffled output (or -o)");
  app.add_option("-o,--output", output_flag, "Shuffled output, as shuf's -o")->type_name("FILE");
  app.add_option("--seed", opt.seed, "Seed: the same seed and input give the same output")->capture_default_str()
      ->check(zlm::whole_number(0, UINT64_MAX));
  app.add_option("--memory-mb", opt.memory_mb, "Memory budget; larger inputs go through temporary buckets (the output does not change)")
      ->capture_default_str()->check(zlm::finite_range(0.01, 16777216.0));
  zlm::shuffle::ShardedOptions sharded;
  bool print_tasks = false;
  auto* sharded_flag = app.add_option("--sharded", sharded.stage, "Run a stage of the sharded form (count, scatter, gather, or all): the "
                                      "permutation of the --parts concatenated, as --bucket-dir's buckets in order");
  app.add_option("--parts", sharded.parts, "--sharded: the input parts, in order (files, directories or globs)")->expected(1, -1);
  app.add_option("--work", sharded.work, "--sharded: the directory of the counts and scattered buckets");
  app.add_option("--bucket-dir", sharded.output_dir, "--sharded gather: where bucket-NNNNN.jsonl go (a name that leaves --out to --output, as shuf)");
  app.add_option("--buckets", sharded.buckets, "--sharded: output buckets (a power of two; the permutation does not depend on it)")->capture_default_str();
  app.add_option("--task", sharded.task, "--sharded: run this task of the stage only (a Slurm array index)")->check(CLI::NonNegativeNumber);
  app.add_flag("--print-tasks", print_tasks, "--sharded: print the stage's number of tasks and exit");
  zlm::add_common_flags(app, common);
  return zlm::tool_main("shuffle", app, common, argc, argv, [&] {
    if (*sharded_flag) {
      if (!opt.input.empty() || !opt.output.empty() || !output_flag.empty())
        throw zlm::Error(zlm::ErrorKind::Usage, "--sharded reads --parts and writes --bucket-dir: no input or output argument");
      sharded.seed = opt.seed;
      sharded.memory_mb = opt.memory_mb;
      sharded.parts = zlm::expand_inputs(sharded.parts);
      if (print_tasks) {
        std::printf("%lu\n", (unsigned long)zlm::shuffle::sharded_task_count(sharded));
        return 0;
      }
      return zlm::run_with_stats("shuffle", common, [&](zlm::Stats& stats) {
        zlm::shuffle::run_sharded(sharded, common, stats);
        return 0;
      });
    }
    if (opt.input.empty()) throw zlm::Error(zlm::ErrorKind::Usage, "no input: give the file to shuffle (or --sharded with --parts)");
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
