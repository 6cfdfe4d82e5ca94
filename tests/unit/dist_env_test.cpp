#include "trainer/dist_env.h"

#include <map>

#include "common/core/error.h"
#include "test_util.h"
#include "trainer/launcher.h"
#include "trainer/megatron_args.h"

namespace zlm::trainer {
namespace {

DistEnv from(std::map<std::string, std::string> vars) {
  return dist_env_from([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(DistEnv, NothingSetIsOneProcess) {
  DistEnv e = from({});
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.launcher, "none");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(DistEnv, Torchrun) {
  DistEnv e = from({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                    {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29400"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                    {"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "node7");
  EXPECT_EQ(e.master_port, 29400);
  EXPECT_TRUE(e.agent_store);
  EXPECT_EQ(e.restart_count, 2);
}

TEST(DistEnv, SlurmTakesTheFirstNodeAsMaster) {
  DistEnv e = from({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "3"}, {"SLURM_NTASKS_PER_NODE", "8"},
                    {"SLURM_JOB_NODELIST", "gpu[012-013,020],login1"}});
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 16);
  EXPECT_EQ(e.local_world_size, 8);
  EXPECT_EQ(e.master_addr, "gpu012");
  // MASTER_ADDR wins when the job script sets it.
  EXPECT_EQ(from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a,b"}, {"MASTER_ADDR", "10.0.0.1"}}).master_addr,
            "10.0.0.1");
}

TEST(DistEnv, SlurmNodelistForms) {
  EXPECT_EQ(slurm_first_host("node01"), "node01");
  EXPECT_EQ(slurm_first_host("a,b"), "a");
  EXPECT_EQ(slurm_first_host("rack[3-4]-n[1-2]"), "rack3-n1");
  EXPECT_EQ(slurm_first_host("n[7]"), "n7");
  EXPECT_ZLM_ERROR(slurm_first_host(""), ErrorKind::Usage, "names no host");
}

TEST(DistEnv, SlurmTasksOnThisNode) {
  // What srun sets for "-N 3 -n 5" (2+2+1 tasks): the step's list, indexed by the node.
  auto srun = [](const char* procid, const char* nodeid) {
    return from({{"SLURM_PROCID", procid}, {"SLURM_NTASKS", "5"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", nodeid},
                 {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"}, {"SLURM_TASKS_PER_NODE", "4(x3)"}, {"SLURM_STEP_NUM_NODES", "3"},
                 {"SLURM_JOB_NODELIST", "n[1-3]"}});
  };
  EXPECT_EQ(srun("0", "0").local_world_size, 2);
  EXPECT_EQ(srun("3", "1").local_world_size, 2);
  EXPECT_EQ(srun("4", "2").local_world_size, 1);
  // Without the lists: the node count says whether this is one host (the sbatch
  // environment before srun, or an old Slurm).
  DistEnv two = from({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}, {"SLURM_NNODES", "2"},
                      {"SLURM_JOB_NODELIST", "a,b"}});
  EXPECT_EQ(two.local_world_size, 2);
  EXPECT_EQ(from({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}}).local_world_size, 4);
  EXPECT_EQ(slurm_tasks_on_node("8", 0), 8);
  EXPECT_EQ(slurm_tasks_on_node("3(x2),1(x1)", 2), 1);
  EXPECT_ZLM_ERROR(slurm_tasks_on_node("2(x2)", 2), ErrorKind::Usage, "has no entry for node 2");
  EXPECT_ZLM_ERROR(slurm_tasks_on_node("2(y2)", 0), ErrorKind::Usage, "'2(y2)' is malformed");
  EXPECT_ZLM_ERROR(slurm_tasks_on_node("", 0), ErrorKind::Usage, "no entry for node 0");
}

TEST(DistEnv, OpenMpiOnOneHostNeedsNoMasterAddr) {
  DistEnv e = from({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(e.launcher, "openmpi");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_ZLM_ERROR(from({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
                   ErrorKind::Usage, "need MASTER_ADDR");
}

TEST(DistEnv, BadValuesAreNamed) {
  EXPECT_ZLM_ERROR(from({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), ErrorKind::Usage, "RANK='x' is not a non-negative integer");
  EXPECT_ZLM_ERROR(from({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), ErrorKind::Usage, "rank 2 is outside a world of 2 processes");
  EXPECT_ZLM_ERROR(from({{"MASTER_PORT", "70000"}}), ErrorKind::Usage, "MASTER_PORT=70000 is not a port number");
}

TEST(Launcher, StripsOnlyItsOwnFlags) {
  const char* argv[] = {"pretrain_gpt", "--nproc-per-node", "4", "--zero-stage", "2", "--master-port=1234", "--nnodes", "1",
                        "--lr", "0.1"};
  auto out = strip_launcher_flags(10, argv);
  EXPECT_EQ(out, (std::vector<std::string>{"pretrain_gpt", "--zero-stage", "2", "--lr", "0.1"}));
}

TEST(Launcher, StripsTheDeepSpeedAndTorchrunSpellingsToo) {
  const char* argv[] = {"pretrain_gpt", "--num_gpus", "4", "--num_nodes=1", "--hostfile", "hosts", "--master_addr", "h",
                        "--nproc_per_node", "2", "--lr", "0.1"};
  EXPECT_EQ(strip_launcher_flags(12, argv), (std::vector<std::string>{"pretrain_gpt", "--lr", "0.1"}));
}

TEST(Launcher, HostfileGivesThisMachinesSlots) {
  test::TempDir dir;
  const std::string p = dir.path("hostfile");
  test::spit(p, "# DeepSpeed's format\nlocalhost slots=4  # this machine\n\n");
  EXPECT_EQ(hostfile_local_slots(p), 4);
  test::spit(p, "worker-1 slots=8\nworker-2 slots=8\n");
  EXPECT_ZLM_ERROR(hostfile_local_slots(p), ErrorKind::Usage, "lists 2 hosts: pretrain_gpt starts ranks on this machine only");
  test::spit(p, "localhost 4\n");
  EXPECT_ZLM_ERROR(hostfile_local_slots(p), ErrorKind::Usage, "hostfile:1: 'localhost 4' is not 'HOSTNAME slots=N'");
  test::spit(p, "some-other-host-zlm slots=2\n");
  EXPECT_ZLM_ERROR(hostfile_local_slots(p), ErrorKind::Usage, "names host 'some-other-host-zlm', not this machine");
  test::spit(p, "# nothing\n");
  EXPECT_ZLM_ERROR(hostfile_local_slots(p), ErrorKind::Usage, "lists no host");
}

TEST(Launcher, ZeroFlagsParse) {
  std::vector<std::string> words = {"--num-layers", "2", "--hidden-size", "8", "--num-attention-heads", "2", "--seq-length", "8",
                                    "--micro-batch-size", "1", "--train-iters", "1", "--data-path", "d", "--lr", "0.1",
                                    "--vocab-file", "v"};
  auto parse = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = words;
    all.insert(all.end(), extra.begin(), extra.end());
    std::vector<const char*> argv{"pretrain_gpt"};
    for (auto& w : all) argv.push_back(w.c_str());
    return parse_megatron_args(static_cast<int>(argv.size()), argv.data());
  };
  EXPECT_EQ(parse({"--zero-stage", "3", "--cpu-offload", "--offload-params"}).zero_stage, 3);
  EXPECT_EQ(parse({"--use-distributed-optimizer"}).zero_stage, 1);  // Megatron's sharded optimizer = stage 1
  EXPECT_TRUE(parse({"--cpu-optimizer"}).cpu_offload);              // Megatron-DeepSpeed's name
  EXPECT_EQ(parse({"--nproc-per-node", "4"}).nproc_per_node, 4);
  EXPECT_EQ(parse({"--num_gpus", "4"}).nproc_per_node, 4);  // `deepspeed --num_gpus 4 pretrain_gpt.py` as `pretrain_gpt --num_gpus 4`
  EXPECT_EQ(parse({"--num_nodes", "2", "--node_rank", "1", "--master_port", "29501"}).node_rank, 1);
  EXPECT_EQ(parse({"--local-rank=0"}).local_rank_flag, 0);  // torch.distributed.launch's spelling
  EXPECT_ZLM_ERROR(parse({"--include", "localhost:0,1"}), ErrorKind::Usage, "--include is a deepspeed launcher option that pretrain_gpt's "
                   "launcher does not take");
  // Megatron's allow_abbrev=False: a prefix is refused, with the flag it probably meant.
  EXPECT_ZLM_ERROR(parse({"--micro-batch", "2"}), ErrorKind::Usage, "takes whole flag names, as Megatron-LM's arguments.py "
                   "(allow_abbrev=False) ---> HINT: --micro-batch-size");
  EXPECT_ZLM_ERROR(parse({"--zero-stage", "4"}), ErrorKind::Usage, "--zero-stage must be 0, 1, 2 or 3");
  EXPECT_ZLM_ERROR(parse({"--offload-params"}), ErrorKind::Usage, "--offload-params needs --zero-stage 3");
  // Megatron-DeepSpeed's scripts pass the JSON without --deepspeed: applied, with one warning saying so.
  const TrainArgs ds = parse({"--deepspeed_config", "ds.json"});
  EXPECT_TRUE(ds.deepspeed);
  ASSERT_EQ(ds.warnings.size(), 1u);
  EXPECT_NE(ds.warnings[0].find("although --deepspeed is missing"), std::string::npos) << ds.warnings[0];
  EXPECT_TRUE(parse({"--deepspeed", "--deepspeed_config", "ds.json"}).warnings.empty());
}

}  // namespace
}  // namespace zlm::trainer
