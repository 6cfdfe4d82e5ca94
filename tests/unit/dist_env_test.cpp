#include "trainer/config/dist_env.h"

#include <map>

#include "common/core/error.h"
#include "test_util.h"
#include "trainer/config/launcher.h"
#include "trainer/config/megatron_args.h"
#include "trainer/config/settings.h"

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

// The job's name that ranks check in the store: the launcher's own id only, so that ranks that
// one launcher started agree (a Slurm id is not used for ranks torchrun started).
TEST(DistEnv, JobIdComesFromTheLauncherThatStartedTheRanks) {
  EXPECT_EQ(from({}).job_id, "");
  EXPECT_EQ(from({{"ZLM_JOB_ID", "vm:12:34"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}).job_id, "vm:12:34");
  EXPECT_EQ(from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"TORCHELASTIC_RUN_ID", "none"}, {"SLURM_JOB_ID", "77"}}).job_id, "");
  EXPECT_EQ(from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"TORCHELASTIC_RUN_ID", "abc"}}).job_id, "torchrun:abc");
  EXPECT_EQ(from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "3"}, {"MASTER_ADDR", "h"}}).job_id,
            "slurm:77.3");
  // Only rank 0 takes the store's socket from the launcher.
  EXPECT_EQ(from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"ZLM_STORE_LISTEN_FD", "5"}}).store_listen_fd, 5);
  EXPECT_EQ(from({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"ZLM_STORE_LISTEN_FD", "5"}}).store_listen_fd, -1);
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
                        "--nproc_per_node", "2", "--no_ssh", "--lr", "0.1"};
  EXPECT_EQ(strip_launcher_flags(13, argv), (std::vector<std::string>{"pretrain_gpt", "--lr", "0.1"}));
}

// The deepspeed launcher's hostfile as it reads it: DeepSpeed's line pattern, the first --num_nodes
// hosts, one host run here with its slots (or --num_gpus), several only in its no-ssh mode.
TEST(Launcher, HostfileAsTheDeepSpeedLauncherReadsIt) {
  test::TempDir dir;
  const std::string p = dir.path("hostfile");
  test::spit(p, "# DeepSpeed's format\nworker-1 slots=4 max_slots=8  # extra words after the slots are fine\n\nworker-2 slots=2\n");
  const auto hosts = read_hostfile(p);
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].name, "worker-1");
  EXPECT_EQ(hosts[0].slots, 4);
  auto plan = [&](std::vector<std::string> words) {
    std::vector<const char*> argv{"pretrain_gpt", "--hostfile", p.c_str()};
    for (auto& w : words) argv.push_back(w.c_str());
    return launch_plan(parse_megatron_args(static_cast<int>(argv.size()), argv.data()));
  };
  const LaunchPlan first = plan({"--num_nodes", "1"});  // the first host, run here whatever its name
  EXPECT_EQ(first.nproc_per_node, 4);
  EXPECT_EQ(first.nnodes, 1);
  EXPECT_EQ(plan({"--num_nodes", "1", "--num_gpus", "2"}).nproc_per_node, 2);
  EXPECT_ZLM_ERROR(plan({}), ErrorKind::Usage, "2 hosts: pretrain_gpt starts ranks on this machine only");
  const LaunchPlan second = plan({"--no_ssh", "--node_rank", "1"});  // DeepSpeed's no-ssh mode, on the second host
  EXPECT_EQ(second.nnodes, 2);
  EXPECT_EQ(second.node_rank, 1);
  EXPECT_EQ(second.nproc_per_node, 2);
  EXPECT_EQ(second.master_addr, "worker-1");
  EXPECT_ZLM_ERROR(plan({"--num_nodes", "3"}), ErrorKind::Usage, "--num_nodes 3: --hostfile " + p + " lists 2 hosts");
  test::spit(p, "localhost 4\n");
  EXPECT_ZLM_ERROR(read_hostfile(p), ErrorKind::Usage, "hostfile:1: 'localhost 4' is not 'HOSTNAME slots=N'");
  test::spit(p, "a slots=1\na slots=2\n");
  EXPECT_ZLM_ERROR(read_hostfile(p), ErrorKind::Usage, "hostfile:2: host a is listed twice");
  // A hostfile that does not exist: a warning, and this machine alone (as DeepSpeed).
  testing::internal::CaptureStderr();
  std::vector<const char*> argv{"pretrain_gpt", "--hostfile", "/nonexistent/hostfile", "--num_gpus", "2"};
  EXPECT_EQ(launch_plan(parse_megatron_args(5, argv.data())).nproc_per_node, 2);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("does not exist"), std::string::npos);
}

// A fork bomb is refused before any rank starts.
TEST(Launcher, RefusesMoreRanksThanTheMachineHolds) {
  const char* argv[] = {"pretrain_gpt", "--nproc-per-node", "100000"};
  EXPECT_ZLM_ERROR(launch_plan(parse_megatron_args(3, argv)), ErrorKind::Usage, "--nproc-per-node 100000: this machine holds at most");
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
    return make_train_config(parse_megatron_args(static_cast<int>(argv.size()), argv.data()), 1).args;
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
  EXPECT_ZLM_ERROR(parse({"--zero-stage", "4"}), ErrorKind::Usage, "--zero-stage 4: must be 0, 1, 2 or 3");
  EXPECT_ZLM_ERROR(parse({"--offload-params"}), ErrorKind::Usage, "--offload-params: needs ZeRO stage 3");
  // Megatron-DeepSpeed's scripts pass the JSON without --deepspeed: applied, with one warning saying so.
  test::TempDir dir;
  test::spit(dir.path("ds.json"), R"({"zero_optimization": {"stage": 2}})");
  std::vector<std::string> all = words;
  all.insert(all.end(), {"--deepspeed_config", dir.path("ds.json")});
  std::vector<const char*> argv{"pretrain_gpt"};
  for (auto& w : all) argv.push_back(w.c_str());
  const TrainConfig ds = make_train_config(parse_megatron_args(static_cast<int>(argv.size()), argv.data()), 1);
  EXPECT_TRUE(ds.args.deepspeed);
  EXPECT_EQ(ds.zero.number(), 2);
  ASSERT_EQ(ds.warnings.size(), 1u);
  EXPECT_NE(ds.warnings[0].find("although --deepspeed is missing"), std::string::npos) << ds.warnings[0];
}

}  // namespace
}  // namespace zlm::trainer
