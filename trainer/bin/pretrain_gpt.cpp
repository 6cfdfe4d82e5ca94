// pretrain_gpt: GPT-2 pretraining with Megatron-LM's pretrain_gpt.py command line.
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/core/build_info.h"
#include "common/core/error.h"
#include "common/core/log.h"
#include "trainer/run/device_memory.h"
#include "trainer/config/launcher.h"
#include "trainer/config/megatron_args.h"
#include "trainer/config/settings.h"
#include "trainer/run/trainer.h"

// " [rank N]" when this process is one of several ranks.
static std::string rank_prefix() {
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  if (!rank || !world || std::string(world) == "1") return "";
  return std::string(" [rank ") + rank + "]";
}

int main(int argc, char** argv) {
  zlm::log_init("pretrain_gpt");
  zlm::trainer::enable_huge_pages_for_cpu_tensors();
  try {
    std::string help;
    auto args = zlm::trainer::parse_megatron_args(argc, argv, &help);
    if (!help.empty()) {
      std::fputs(help.c_str(), stdout);
      return 0;
    }
    if (args.version) {
      std::printf("pretrain_gpt zerolm %s (git %s, %s, %s)\n", zlm::build_version(), zlm::build_git_describe(), zlm::build_type(),
                  zlm::build_compiler());
      return 0;
    }
    if (args.quiet) zlm::log_set_level(zlm::LogLevel::Wrn);
    if (args.verbose) zlm::log_set_level(zlm::LogLevel::Dbg);
    const zlm::trainer::LaunchPlan plan = zlm::trainer::launch_plan(args);
    if (plan.nproc_per_node > 0) {  // be the launcher: check the settings for the whole job, start the local ranks, supervise them
      zlm::trainer::make_train_config(args, plan.nproc_per_node * plan.nnodes);
      return zlm::trainer::launch_local_ranks(plan, zlm::trainer::strip_launcher_flags(argc, argv));
    }
    const zlm::trainer::DistEnv env = zlm::trainer::dist_env_from_process();
    return zlm::trainer::train(zlm::trainer::make_train_config(args, env.world_size), env);
  } catch (const zlm::Error& e) {
    std::fprintf(stderr, "pretrain_gpt: error:%s %s\n", rank_prefix().c_str(), e.what());
    return zlm::exit_code(e.kind());
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "pretrain_gpt: error (LibTorch):%s %s\n", rank_prefix().c_str(), e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pretrain_gpt: error:%s %s\n", rank_prefix().c_str(), e.what());
    return 1;
  }
}
