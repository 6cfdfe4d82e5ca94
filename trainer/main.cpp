// pretrain_gpt: GPT-2 pretraining with Megatron-LM's pretrain_gpt.py command line.
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/core/build_info.h"
#include "common/core/error.h"
#include "common/core/log.h"
#include "trainer/device_memory.h"
#include "trainer/launcher.h"
#include "trainer/megatron_args.h"
#include "trainer/trainer.h"

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
    if (!args.hostfile.empty()) {  // the deepspeed launcher's hostfile: this machine's slots
      const int slots = zlm::trainer::hostfile_local_slots(args.hostfile);
      if (args.nproc_per_node > slots)
        throw zlm::Error(zlm::ErrorKind::Usage, "--num_gpus %ld exceeds the %d slots of --hostfile %s", (long)args.nproc_per_node, slots,
                         args.hostfile.c_str());
      if (args.nproc_per_node == 0) args.nproc_per_node = slots;
    }
    if (args.nproc_per_node > 0) {  // be the launcher: start the local ranks and supervise them
      zlm::trainer::LaunchPlan plan{static_cast<int>(args.nproc_per_node), static_cast<int>(args.nnodes), static_cast<int>(args.node_rank),
                                    args.master_addr, static_cast<int>(args.master_port)};
      return zlm::trainer::launch_local_ranks(plan, zlm::trainer::strip_launcher_flags(argc, argv));
    }
    return zlm::trainer::train(args);
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
