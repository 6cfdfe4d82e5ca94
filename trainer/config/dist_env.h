// Where this process sits in a distributed run, read from the environment that
// existing launchers set, so that pretrain_gpt runs unchanged under them:
//   torchrun / deepspeed / our --nproc-per-node: RANK, WORLD_SIZE, LOCAL_RANK,
//       LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE:
//       the agent already serves the store, every rank is a client)
//   Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the tasks on this
//       node from SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE at SLURM_NODEID
//       (else SLURM_NTASKS_PER_NODE, else SLURM_STEP_NUM_NODES / SLURM_NNODES);
//       MASTER_ADDR, else the first host of SLURM_JOB_NODELIST
//   Open MPI (mpirun): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
//       MPICH / Intel MPI: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
// Nothing set: one process (rank 0 of 1). MASTER_PORT defaults to 29500.
// Pure C++ (no LibTorch) so it is unit-tested in every build.
#pragma once

#include <functional>
#include <string>

namespace zlm::trainer {

struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // torchrun's agent owns the TCP store
  int restart_count = 0;     // TORCHELASTIC_RESTART_COUNT
  std::string launcher = "none";  // torchrun | slurm | openmpi | mpich | none
  // What names this job, the same on every rank (empty: nothing does): ZLM_JOB_ID
  // (set by pretrain_gpt's own launcher), Slurm's job and step, torchrun's
  // --rdzv-id, Open MPI's job id. Rank 0 puts it in the rendezvous store and
  // the others check it, so that a rank that reached another job's store (the
  // port was taken) says so instead of joining that job.
  std::string job_id;
  // Rank 0 under pretrain_gpt's own launcher: the store's listening socket,
  // already bound to the port (ZLM_STORE_LISTEN_FD; -1: none).
  int store_listen_fd = -1;
};

using GetEnv = std::function<const char*(const char*)>;

// Throws zlm::Error(Usage) naming the variable when a value is malformed or
// inconsistent (rank outside the world, a multi-process run without MASTER_ADDR).
DistEnv dist_env_from(const GetEnv& getenv);
DistEnv dist_env_from_process();

// "node[03-05,07],gpu1" -> "node03"; "a,b" -> "a". Throws on an empty list.
std::string slurm_first_host(const std::string& nodelist);
// Slurm's tasks-per-node list ("2(x3),1") at node index `node` (0-based).
int slurm_tasks_on_node(const std::string& list, int node);

}  // namespace zlm::trainer
