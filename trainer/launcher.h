// `pretrain_gpt --nproc-per-node N ...`: start N local ranks of this same
// program, as torchrun and the deepspeed launcher do, and supervise them.
// Each child gets the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, OMP_NUM_THREADS) and
// the command line without the launcher flags. When one rank fails the others
// are stopped (SIGTERM, then SIGKILL after a grace period) and the launcher
// exits with the failing rank's status, so a dead rank never leaves the job
// hanging. SIGINT/SIGTERM to the launcher are forwarded to every rank.
// Pure POSIX C++ (no LibTorch).
#pragma once

#include <string>
#include <vector>

namespace zlm::trainer {

struct LaunchPlan {
  int nproc_per_node = 1, nnodes = 1, node_rank = 0;
  std::string master_addr;  // empty: $MASTER_ADDR, else 127.0.0.1
  int master_port = 0;      // 0: $MASTER_PORT, else a free port (one node) or 29500
};

// argv minus the launcher's own flags (--nproc-per-node, --nnodes, --node-rank,
// --master-addr, --master-port, their torchrun underscore spellings, and the
// deepspeed launcher's --num_gpus, --num_nodes, --hostfile; in "--flag V" and
// "--flag=V" forms).
std::vector<std::string> strip_launcher_flags(int argc, const char* const* argv);

// The ranks a deepspeed launcher hostfile gives this machine: its lines are
// "HOSTNAME slots=N" ('#' starts a comment). One host, which must be this
// machine (localhost, a 127.x address, ::1 or gethostname()), gives N; several
// hosts are refused (pretrain_gpt never ssh-es into other machines), as is a
// line of another form (zlm::Error(Usage) naming file and line).
int hostfile_local_slots(const std::string& path);

// Runs the ranks to completion; returns the exit status for main().
int launch_local_ranks(const LaunchPlan& plan, const std::vector<std::string>& child_argv);

}  // namespace zlm::trainer
