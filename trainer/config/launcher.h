// `pretrain_gpt --nproc-per-node N ...`: start N local ranks of this same
// program, as torchrun and the deepspeed launcher do, and supervise them.
// Each child gets the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, OMP_NUM_THREADS) and
// the command line without the launcher flags. When one rank fails the others
// are stopped (SIGTERM, then SIGKILL after a grace period) and the launcher
// exits with the failing rank's status, so a dead rank never leaves the job
// hanging. SIGINT/SIGTERM to the launcher are forwarded to every rank, also
// while ranks are still being started (no more are started then).
// Pure POSIX C++ (no LibTorch).
//
//   LaunchPlan plan = launch_plan(flags);             // --nproc-per-node, --nnodes, ..., or DeepSpeed's --hostfile
//   if (plan.nproc_per_node > 0) return launch_local_ranks(plan, strip_launcher_flags(argc, argv));
#pragma once

#include <string>
#include <vector>

#include "trainer/config/megatron_args.h"

namespace zlm::trainer {

struct LaunchPlan {
  int nproc_per_node = 0, nnodes = 1, node_rank = 0;  // nproc_per_node 0: no launcher (this process is a rank)
  std::string master_addr;  // empty: $MASTER_ADDR, else 127.0.0.1
  int master_port = 0;      // 0: $MASTER_PORT, else a free port (one node) or 29500
};

// The launcher flags of the command line (ours, torchrun's underscore
// spellings, the deepspeed launcher's), all of which strip_launcher_flags removes.
const std::vector<std::string>& launcher_flag_names();

// argv minus the launcher flags, in "--flag V" and "--flag=V" forms
// (--no_ssh, a switch, alone).
std::vector<std::string> strip_launcher_flags(int argc, const char* const* argv);

// A deepspeed launcher hostfile: its "HOSTNAME slots=N" lines (DeepSpeed's
// pattern, matched at the start of a line; '#' lines and blank ones skipped),
// in order. zlm::Error(Usage) naming file and line for another form or a host
// listed twice.
struct Host {
  std::string name;
  int slots = 0;
};
std::vector<Host> read_hostfile(const std::string& path);

// What this process starts, from the launcher flags, as the deepspeed launcher
// reads them where they are DeepSpeed's: a hostfile's first --num_nodes hosts
// (all without it); one host runs here with its slots (or --num_gpus); several
// need DeepSpeed's --no_ssh and --node_rank (this machine's index among them;
// rank 0's host is the first one's) since pretrain_gpt never ssh-es into
// hosts; a missing hostfile is warned about and ignored, as DeepSpeed does.
// Refuses more ranks than this machine can hold (its cores x 4, at least 64,
// and ~256 MiB of available memory each) with a clear error, before any starts.
LaunchPlan launch_plan(const TrainArgs& flags);

// Runs the ranks to completion; returns the exit status for main().
int launch_local_ranks(const LaunchPlan& plan, const std::vector<std::string>& child_argv);

}  // namespace zlm::trainer
