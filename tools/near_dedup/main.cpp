// near_dedup: near-duplicate removal in stages that scale past one machine
// (find_duplicates + group_dups + dedup, sharded). One stage, or one task of
// it (a Slurm array task), per call; `all` runs the stages in order here.
#include <cstdio>
#include <thread>

#include "common/core/error.h"
#include "common/dedup/lsh_flags.h"
#include "common/io/cli.h"
#include "tools/near_dedup/near_dedup.h"

int main(int argc, char** argv) {
  namespace nd = zlm::near_dedup;
  nd::Options opt;
  zlm::CommonFlags common;
  std::string stage;
  bool print_tasks = false;
  CLI::App app{"Near-duplicate removal in stages that scale past one machine: signatures (a task per shard), candidates (a task per "
               "band x hash range), verify (exact Jaccard, a task per part of the pairs), cluster (one task), filter (a task per shard). The "
               "documents kept equal find_duplicates + group_dups + dedup on the shards concatenated."};
  app.add_option("stage", stage, "signatures, candidates, verify, cluster, filter, or all (every stage here, in order)")->required();
  app.add_option("--shards", opt.shards, "The corpus's shards in order: JSONL files (plain, .gz, .xz, .zst), directories or globs")
      ->expected(1, -1)->required();
  app.add_option("--work", opt.work, "Directory of the stages' files and task markers (a shared file system on a cluster)")->required();
  app.add_option("--output-dir", opt.output_dir, "filter: where part-NNNNN.jsonl (shard N's kept lines) go");
  app.add_option("--removed-dir", opt.removed_dir, "filter: where each shard's removed and malformed lines go");
  app.add_option("--task", opt.task, "Run this task of the stage only (0-based; a Slurm array index)")->check(CLI::NonNegativeNumber);
  app.add_flag("--print-tasks", print_tasks, "Print the stage's number of tasks and exit");
  app.add_option("--local-tasks", opt.local_tasks, "Without --task: tasks run at once")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--threads", opt.threads, "Threads within a task")->capture_default_str()->check(zlm::thread_count());
  app.add_option("--memory-mb", opt.memory_mb, "signatures: band records held in memory before sorted runs are spilled; verify: candidate "
                 "pairs held at once (more are taken in several sweeps)")
      ->capture_default_str()->check(zlm::finite_range(0.01, 16777216.0));
  auto& s = opt.settings;
  app.add_option("--key", s.key, "JSON key of the document id (as find_duplicates --inputs FILE KEY and dedup --key)")->capture_default_str();
  app.add_option("--text-key", s.text_key, "JSON key of the text")->capture_default_str();
  zlm::add_lsh_flags(app, s);
  app.add_option("--group-threshold", s.group_threshold, "Documents at or above this similarity are grouped (group_dups' threshold)")
      ->capture_default_str()->check(zlm::finite_range(0.0, 1.0));
  app.add_option("--ranges", s.ranges, "Hash ranges per band (candidates tasks = bands x ranges)")->capture_default_str()->check(CLI::Range(1, 65536));
  app.add_option("--verify-tasks", s.verify_tasks, "Parts of the candidate pairs, one verify task each")->capture_default_str()->check(CLI::Range(1, 65536));
  app.add_option("--max-bad-records", opt.max_bad_records, "Fail when a task meets more than N malformed lines")->type_name("N");
  zlm::add_common_flags(app, common);
  return zlm::tool_main("near_dedup", app, common, argc, argv, [&] {
    std::vector<nd::Stage> stages;
    if (stage == "all") stages = {nd::Stage::Signatures, nd::Stage::Candidates, nd::Stage::Verify, nd::Stage::Cluster, nd::Stage::Filter};
    else stages = {nd::parse_stage(stage)};
    if (print_tasks) {
      if (stages.size() != 1) throw zlm::Error(zlm::ErrorKind::Usage, "--print-tasks needs one stage");
      std::printf("%lu\n", (unsigned long)nd::task_count(stages[0], opt));
      return 0;
    }
    if (opt.task >= 0 && stages.size() != 1) throw zlm::Error(zlm::ErrorKind::Usage, "--task needs one stage, not all");
    return zlm::run_with_stats("near_dedup", common, [&](zlm::Stats& stats) {
      for (nd::Stage st : stages) nd::run_stage(st, opt, common, stats);
      return 0;
    });
  });
}
