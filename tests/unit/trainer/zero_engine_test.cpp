// Unit tests of the trainer's engine below the end-to-end scripts: Comm's
// collectives over 2 Gloo processes, ZeroEngine against LibTorch's own AdamW,
// the stages against each other on 2 ranks, and the engine's state through a
// checkpoint. The multi-process tests start this binary again as its ranks
// (ZLM_TEST_WORKER=<name> ZLM_TEST_RANK=<r>, handled in main() before gtest),
// and each rank writes what it computed to a file the test then compares.
#include <malloc.h>
#include <spawn.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/core/error.h"
#include "common/core/files.h"
#include "common/core/output_file.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/model/tensor_parallel.h"
#include "trainer/parallel/comm.h"
#include "trainer/config/dist_env.h"
#include "trainer/model/gpt2_model.h"
#include "trainer/model/tensor_parallel.h"
#include "trainer/parallel/grid.h"
#include "trainer/zero/engine.h"

extern char** environ;

namespace zlm::trainer {
namespace {

namespace fs = std::filesystem;
using Params = std::map<std::string, torch::Tensor>;

constexpr int64_t kBatch = 4, kSeq = 8, kVocab = 64;

Gpt2Config tiny() {
  Gpt2Config c;
  c.vocab_size = kVocab;
  c.max_positions = kSeq;
  c.num_layers = 2;
  c.hidden = 32;
  c.heads = 4;
  c.hidden_dropout = c.attention_dropout = 0;
  c.seed = 7;
  return c;
}

// Step `step`'s batch, the same on every rank; a rank of `world` takes its rows.
std::pair<torch::Tensor, torch::Tensor> batch(int64_t step, int rank, int world) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + static_cast<uint64_t>(step));
  torch::Tensor t = at::randint(kVocab, {kBatch, kSeq + 1}, gen, torch::TensorOptions().dtype(torch::kLong));
  const int64_t rows = kBatch / world;
  t = t.narrow(0, rank * rows, rows);
  return {t.narrow(1, 0, kSeq).contiguous(), t.narrow(1, 1, kSeq).contiguous()};
}

// Adam's eps is 1e-4 rather than 1e-8: the key bias of attention has a zero
// gradient in exact arithmetic (softmax ignores a constant added to every
// score), so its computed gradient is rounding noise of ~1e-9 that eps 1e-8
// would turn into lr-sized updates of either sign, and no two summation orders
// would agree on them.
constexpr double kLr = 1e-2, kDecay = 0.1, kEps = 1e-4;

ZeroConfig zero_config(int stage, bool offload, torch::ScalarType param_dtype = torch::kFloat, torch::ScalarType grad_dtype = torch::kFloat) {
  ZeroConfig zc;
  zc.plan = zero_plan(static_cast<ZeroStage>(stage), offload);
  zc.param_dtype = param_dtype;
  zc.grad_dtype = grad_dtype;
  zc.weight_decay = kDecay;
  zc.eps = kEps;
  return zc;
}

// `steps` optimizer steps of the engine; the full parameters at the end (on rank 0).
void run_steps(Gpt2& model, ZeroEngine& engine, Comm& comm, int64_t first, int64_t steps) {
  for (int64_t s = first; s < first + steps; ++s) {
    engine.begin_step(1);
    auto [tokens, labels] = batch(s, comm.rank(), comm.world());
    model->loss(tokens, labels).backward();
    engine.after_backward();
    engine.reduce_grads(1.0 / comm.world());  // the mean over the ranks' equal shares
    engine.step(kLr, 1.0);
  }
}

// The engine's model is built as pretrain_gpt builds it (parameters drawn by
// the engine into its buffers); the references' drawn on the CPU.
Params train(int stage, bool offload, Comm& comm, int64_t steps, int64_t delayed_after = -1) {
  Gpt2 model(tiny(), ModelPart{}, ParamInit::Deferred);
  ZeroConfig zc = zero_config(stage, offload);
  zc.plan.delayed_update_after = delayed_after;
  ZeroEngine engine(model, comm, zc, torch::Device(torch::kCPU));
  run_steps(model, engine, comm, 0, steps);
  return engine.gather_state().params;
}

// The same steps with LibTorch's AdamW on a plain model (decay on weights, not
// on biases and LayerNorm, as Megatron and the engine do). With delayed_after
// >= 0, the delayed parameter update's definition: AdamW steps a master copy,
// and after step k > delayed_after the forward and backward run on the master
// weights of before step k (one update late).
Params train_reference(int64_t steps, int64_t delayed_after = -1) {
  Gpt2 model(tiny());   // what forward and backward run on
  Gpt2 master(tiny());  // what AdamW steps (the same initial values)
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : master->named_parameters()) (p.value().dim() >= 2 ? decay : no_decay).push_back(p.value());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(kLr).weight_decay(kDecay).eps(kEps)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(kLr).weight_decay(0).eps(kEps)));
  torch::optim::AdamW opt(groups, torch::optim::AdamWOptions(kLr).betas({0.9, 0.999}).eps(kEps));
  std::vector<torch::Tensor> used = model->parameters(), stepped = master->parameters();
  for (int64_t s = 0; s < steps; ++s) {
    model->zero_grad();
    auto [tokens, labels] = batch(s, 0, 1);
    model->loss(tokens, labels).backward();
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> before;
    for (size_t i = 0; i < used.size(); ++i) {
      stepped[i].mutable_grad() = used[i].grad().clone();
      before.push_back(stepped[i].detach().clone());
    }
    opt.step();
    const bool delayed = delayed_after >= 0 && s + 1 > delayed_after;
    for (size_t i = 0; i < used.size(); ++i) used[i].copy_(delayed ? before[i] : stepped[i].detach());
  }
  Params out;
  for (auto& p : master->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

void expect_close(const Params& a, const Params& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << what << ": " << name;
    const double diff = (t - b.at(name)).abs().max().item<double>();
    EXPECT_LE(diff, tol) << what << ": " << name;
    if (std::getenv("ZLM_TEST_VERBOSE")) std::fprintf(stderr, "%s %s max diff %.3g\n", what.c_str(), name.c_str(), diff);
  }
}

// A fresh directory, removed with its files at the end of the test
// (zlm::remove_tree: std::filesystem::remove_all resolves to libtorch's copy, which crashes).
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::path(testing::TempDir()) / ("zlm_zero_engine_" + name + "_" + std::to_string(getpid()))) {
    remove_tree(path.string());
    fs::create_directories(path);
  }
  ~TempDir() { remove_tree(path.string()); }
  operator const fs::path&() const { return path; }
};

std::unique_ptr<Comm> one_rank() { return make_comm(DistEnv{}, "gloo", -1, std::chrono::minutes(1)); }

// ---- one process ------------------------------------------------------------

// Every stage, with and without offload, equals LibTorch's AdamW after 5 steps
// (fp32; the engine's AdamW and LibTorch's differ in rounding only: at most
// 1.3e-7 measured, asserted 1e-6; a missing weight decay would be 1e-4).
TEST(ZeroEngine, EveryStageEqualsTorchAdamW) {
  const Params ref = train_reference(5);
  auto comm = one_rank();
  for (int stage = 0; stage <= 3; ++stage)
    for (bool offload : {false, true}) expect_close(train(stage, offload, *comm, 5), ref, 1e-6, "stage " + std::to_string(stage) + (offload ? " offload" : ""));
}

// gather_state -> load_state into a new engine, then the same step on both: bit-identical.
// The delayed parameter update (offload, every stage) is AdamW one update
// late after its synchronous steps: equal to the reference definition within
// the rounding of EveryStageEqualsTorchAdamW (1e-6; measured differences
// between the delayed and the synchronous trajectories are >1e-4), exactly the
// synchronous run while no step is delayed, and refused without offload.
TEST(ZeroEngine, DelayedUpdateIsAdamWOneUpdateLate) {
  const Params ref = train_reference(6, 2), sync_ref = train_reference(6);
  double apart = 0;
  for (const auto& [name, t] : ref) apart = std::max(apart, (t - sync_ref.at(name)).abs().max().item<double>());
  EXPECT_GT(apart, 1e-4) << "the delayed reference is not distinguishable from the synchronous one";
  auto comm = one_rank();
  for (int stage = 0; stage <= 3; ++stage) {
    const std::string what = "stage " + std::to_string(stage) + " offload, delayed after 2";
    expect_close(train(stage, true, *comm, 6, 2), ref, 1e-6, what);
    expect_close(train(stage, true, *comm, 6, 6), train(stage, true, *comm, 6), 0.0, "stage " + std::to_string(stage) + " delayed after 6 of 6");
  }
  Gpt2 model(tiny(), ModelPart{}, ParamInit::Deferred);
  ZeroConfig zc = zero_config(2, false);
  zc.plan.delayed_update_after = 0;
  EXPECT_THROW(ZeroEngine(model, *comm, zc, torch::Device(torch::kCPU)), Error);
}

TEST(ZeroEngine, StateRoundTripIsExact) {
  auto comm = one_rank();
  for (int stage : {0, 3}) {
    Gpt2 a(tiny());
    ZeroEngine ea(a, *comm, zero_config(stage, false), torch::Device(torch::kCPU));
    run_steps(a, ea, *comm, 0, 3);
    const ZeroEngine::FullState saved = ea.gather_state();
    EXPECT_EQ(saved.step, 3);
    Gpt2Config other = tiny();
    other.seed = 99;  // different initial weights: everything must come from the state
    Gpt2 b(other);
    ZeroEngine eb(b, *comm, zero_config(stage, false), torch::Device(torch::kCPU));
    eb.load_state(saved);
    run_steps(a, ea, *comm, 3, 1);
    run_steps(b, eb, *comm, 3, 1);
    expect_close(ea.gather_state().params, eb.gather_state().params, 0.0, "stage " + std::to_string(stage));
    expect_close(ea.gather_state().exp_avg_sq, eb.gather_state().exp_avg_sq, 0.0, "exp_avg_sq, stage " + std::to_string(stage));
  }
}

// The step with its clipping factor and skip flag as tensors (how a GPU run
// queues AdamW without reading the norm first), on the CPU through the device's
// path (ATen's fused AdamW, found_inf, the count taken back by confirm_step):
// bit for bit the host path's steps with the same factor, a flagged step leaves
// every state (and the step count) as it was, and the host path reads the flag.
TEST(ZeroEngine, StepWithFactorOnTheDeviceIsTheHostStep) {
  auto comm = one_rank();
  const auto dbl = [](double v) { return torch::full({}, v, torch::kDouble); };
  const auto flag = [](bool skip) { return torch::full({}, skip ? 1.0 : 0.0); };
  for (bool device_path : {true, false})
    for (int stage : {0, 1, 3}) {
      ShardOptimizer::set_device_path_on_cpu(device_path);
      const std::string what = std::string(device_path ? "device path" : "host path") + ", stage " + std::to_string(stage);
      auto steps = [&](bool with_tensors) {
        Gpt2 model(tiny());
        ZeroEngine engine(model, *comm, zero_config(stage, false), torch::Device(torch::kCPU));
        for (int64_t s = 0; s < 3; ++s) {
          const double clip = s == 1 ? 0.37 : 1.0;
          for (bool skip : {true, false}) {  // the flagged step first, on the same gradients
            if (skip && !with_tensors) continue;
            engine.begin_step(1);
            auto [tokens, labels] = batch(s, 0, 1);
            model->loss(tokens, labels).backward();
            engine.after_backward();
            engine.reduce_grads(0.5);
            if (!with_tensors) {
              engine.step(kLr, clip);
              continue;
            }
            engine.step(kLr, dbl(clip), flag(skip));
            engine.confirm_step(!skip);
          }
        }
        return engine.gather_state();
      };
      const ZeroEngine::FullState host = steps(false), dev = steps(true);
      EXPECT_EQ(dev.step, 3) << what;
      expect_close(dev.params, host.params, 0.0, what);
      expect_close(dev.exp_avg, host.exp_avg, 0.0, "exp_avg, " + what);
      expect_close(dev.exp_avg_sq, host.exp_avg_sq, 0.0, "exp_avg_sq, " + what);
    }
  ShardOptimizer::set_device_path_on_cpu(false);
}

// A checkpoint written by save_checkpoint reads back (load_model) as the
// engine's full parameters, bit for bit; a damaged file is an error naming it.
TEST(Checkpoint, SavedWeightsReadBackExactlyAndDamageIsNamed) {
  auto comm = one_rank();
  Gpt2 model(tiny());
  ZeroEngine engine(model, *comm, zero_config(2, false), torch::Device(torch::kCPU));
  run_steps(model, engine, *comm, 0, 2);
  ProcessGrid grid(*comm, 1, 1);
  RngTracker rng;
  rng.seed(torch::Device(torch::kCPU), 1234, 1234 + 2718);
  const TempDir dir("checkpoint");
  RunState st;
  st.iteration = 2;
  save_checkpoint(dir.path.string(), model, engine, grid, rng, st, /*save_number=*/0);
  int64_t iteration = 0;
  Gpt2 loaded = load_model(dir.path.string(), &iteration);
  EXPECT_EQ(iteration, 2);
  Params back;
  for (auto& p : loaded->named_parameters()) back[p.key()] = p.value().detach();
  expect_close(back, engine.gather_state().params, 0.0, "load_model");
  // Cut every file of the checkpoint to half: load_model must name one.
  for (const auto& e : fs::recursive_directory_iterator(dir.path))
    if (e.is_regular_file() && e.path().extension() == ".pt") fs::resize_file(e.path(), fs::file_size(e.path()) / 2);
  try {
    load_model(dir.path.string(), &iteration);
    ADD_FAILURE() << "a truncated checkpoint loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(".pt"), std::string::npos) << e.what();
  }
}

// The bytes the C library's allocator holds (LibTorch's CPU tensors come from posix_memalign).
int64_t malloc_bytes() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

// The process's peak resident set since the last reset_peak_rss() (Linux's VmHWM).
int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  throw Error(ErrorKind::Internal, "/proc/self/status has no VmHWM line");
}
void reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5" << std::flush;
  if (!out) throw Error(ErrorKind::Internal, "cannot write /proc/self/clear_refs to reset the peak resident set");
}

// What the memory plan counts is what the engine allocates, and a model is
// never held whole beside it: over the model's and the engine's construction
// (the parameters drawn by the engine, as pretrain_gpt does), the allocator's
// growth equals the plan's resident bytes (within 1% + 256 KiB of
// bookkeeping), and the peak resident set grows by at most that plus twice
// the largest parameter (one drawn tensor and its copy) and 8 MiB (the
// process's own noise: up to 5.1 MB measured after a warm-up), for
// every stage, offload and precision. A model drawn whole in fp32 first
// (26 MB here, its largest tensor 1 MB) fails both checks.
TEST(ZeroEngine, MemoryPlanIsWhatTheAllocatorHolds) {
  auto comm = one_rank();
  Gpt2Config c = tiny();
  c.hidden = 256;
  c.num_layers = 8;
  c.vocab_size = 1024;  // ~6.6 M parameters: tens of MB against the allocator's noise
  int64_t largest = 0;
  for (const auto& p : Gpt2(c)->parameters()) largest = std::max(largest, p.numel() * 4);
  {  // the process's first engine also starts LibTorch's thread pools (~20 MB resident): not measured
    Gpt2 model(c, ModelPart{}, ParamInit::Deferred);
    ZeroEngine engine(model, *comm, zero_config(0, false), torch::Device(torch::kCPU));
  }
  for (int stage = 0; stage <= 3; ++stage)
    for (bool offload : {false, true})
      for (auto [pd, gd] : {std::pair{torch::kFloat, torch::kFloat}, std::pair{torch::kBFloat16, torch::kFloat}, std::pair{torch::kBFloat16, torch::kBFloat16}}) {
        malloc_trim(0);
        reset_peak_rss();
        const int64_t before = malloc_bytes(), rss_before = peak_rss_bytes();
        Gpt2 model(c, ModelPart{}, ParamInit::Deferred);
        ZeroEngine engine(model, *comm, zero_config(stage, offload, pd, gd), torch::Device(torch::kCPU));
        const int64_t grown = malloc_bytes() - before, peak_grown = peak_rss_bytes() - rss_before;
        const MemoryPlan p = engine.plan();
        const int64_t planned = p.params_device - p.params_gathered + p.params_host + p.grads_device - p.grads_staging + p.grads_host +
                                p.optim_device + p.optim_host;
        const std::string what = "stage " + std::to_string(stage) + (offload ? " offload " : " ") + c10::toString(pd) + "/" + c10::toString(gd);
        EXPECT_NEAR(static_cast<double>(grown), static_cast<double>(planned), 0.01 * static_cast<double>(planned) + 262144.0) << what;
        EXPECT_LE(peak_grown, planned + 2 * largest + 8 * 1048576) << what;
        if (std::getenv("ZLM_TEST_VERBOSE"))
          std::fprintf(stderr, "%s: allocator %ld, plan %ld, peak RSS growth %ld (largest parameter %ld)\n", what.c_str(), (long)grown,
                       (long)planned, (long)peak_grown, (long)largest);
      }
}

// A deferred model drawn by the engine is the drawn model, bit for bit: at
// stage 0 (buffers), at stage 3 (shards, drawn slot by slot), and for every
// tensor-parallel part (each rank's cut of the whole tensor); biases 0 and
// LayerNorm scales 1 exactly.
TEST(Gpt2, DeferredParametersAreTheDrawnOnes) {
  auto comm = one_rank();
  Gpt2 whole(tiny());
  Params drawn;
  for (const auto& p : whole->named_parameters()) drawn[p.key()] = p.value().detach();
  for (int stage : {0, 3}) {
    Gpt2 model(tiny(), ModelPart{}, ParamInit::Deferred);
    ZeroEngine engine(model, *comm, zero_config(stage, false), torch::Device(torch::kCPU));
    expect_close(engine.gather_state().params, drawn, 0.0, "stage " + std::to_string(stage));
  }
  for (int rank = 0; rank < 2; ++rank) {
    ModelPart part;
    part.tp.size = 2;
    part.tp.rank = rank;
    Gpt2 model(tiny(), part, ParamInit::Deferred);
    for (const auto& p : model->named_parameters()) {
      const torch::Tensor v = model->initial_value(p.key(), torch::kCPU);
      EXPECT_EQ(v.sizes(), p.value().sizes()) << p.key();
      EXPECT_TRUE(torch::equal(v, tp_slice(drawn.at(p.key()), Gpt2Impl::tp_split(p.key()), 2, rank))) << "TP rank " << rank << " " << p.key();
    }
  }
  for (const auto& [name, t] : drawn) {
    if (name.ends_with(".bias")) {
      EXPECT_TRUE(torch::equal(t, torch::zeros_like(t))) << name;
    } else if (name.find("ln") != std::string::npos) {
      EXPECT_TRUE(torch::equal(t, torch::ones_like(t))) << name;
    }
  }
}

// ---- two processes ----------------------------------------------------------

std::string self_exe() { return fs::read_symlink("/proc/self/exe").string(); }

// Starts this binary as `world` ranks of `worker` (rendezvous on a free port),
// waits for them; true when every rank exited 0.
bool run_ranks(const std::string& worker, int world, const fs::path& dir) {
  static int port = 29700 + static_cast<int>(getpid() % 1000) * 7;
  ++port;
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> env = {"ZLM_TEST_WORKER=" + worker, "ZLM_TEST_DIR=" + dir.string(), "RANK=" + std::to_string(r),
                                    "WORLD_SIZE=" + std::to_string(world), "LOCAL_RANK=" + std::to_string(r),
                                    "LOCAL_WORLD_SIZE=" + std::to_string(world), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port),
                                    "OMP_NUM_THREADS=1", "PATH=/usr/bin:/bin"};
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string exe = self_exe();
    char* argv[] = {exe.data(), nullptr};
    pid_t pid;
    if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) != 0) return false;
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

Params load_params(const fs::path& file) {
  Params out;
  torch::serialize::InputArchive in;
  in.load_from(file.string());
  for (const auto& key : in.keys()) {
    torch::Tensor t;
    in.read(key, t);
    out[key] = t;
  }
  return out;
}

void save_params(const Params& p, const fs::path& file) {
  torch::serialize::OutputArchive out;
  for (const auto& [k, v] : p) out.write(k, v);
  out.save_to(file.string());
}


TEST(Comm, GlooCollectivesOnTwoRanks) {
  const TempDir dir("comm");
  ASSERT_TRUE(run_ranks("collectives", 2, dir));
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(fs::exists(dir.path / ("ok." + std::to_string(r)))) << "rank " << r;
}

TEST(CrossEntropy, FusedTwinEqualsChunkedOverTwoVocabularyRanks) {
  const TempDir dir("vocab_ce");
  ASSERT_TRUE(run_ranks("vocab_ce", 2, dir));
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(fs::exists(dir.path / ("ok." + std::to_string(r)))) << "rank " << r;
}

// ZLM_P2P_RENDEZVOUS gives Gloo NCCL's point-to-point rules: messages are
// matched by posting order whatever their tags, and two ranks that each post a
// send alone before the receive the other waits for hang (here: fail after the
// 3 s timeout), as on NCCL.
TEST(Comm, RendezvousModeFollowsNcclsRules) {
  const TempDir dir("rendezvous");
  ASSERT_TRUE(run_ranks("rendezvous", 2, dir));
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(fs::exists(dir.path / ("ok." + std::to_string(r)))) << "rank " << r;
}

// Stages 1, 2 and 3 on 2 ranks: bit-identical to each other (as the README
// says), and equal to LibTorch's AdamW on one process within rounding; the
// same with offload and delayed updates (after 1 synchronous step).
TEST(ZeroEngine, StagesOnTwoRanksAreBitIdentical) {
  const TempDir dir("stages");
  ASSERT_TRUE(run_ranks("stages", 2, dir));
  const Params s1 = load_params(dir.path / "stage1.pt");
  expect_close(load_params(dir.path / "stage2.pt"), s1, 0.0, "stage 2 vs 1");
  expect_close(load_params(dir.path / "stage3.pt"), s1, 0.0, "stage 3 vs 1");
  expect_close(load_params(dir.path / "stage1_offload.pt"), s1, 1e-6, "stage 1 offload vs 1");
  expect_close(load_params(dir.path / "stage3_offload.pt"), s1, 1e-6, "stage 3 offload vs 1");
  expect_close(s1, train_reference(4), 1e-6, "stage 1 on 2 ranks vs LibTorch AdamW");
  const Params d1 = load_params(dir.path / "stage1_delayed.pt");
  expect_close(load_params(dir.path / "stage2_delayed.pt"), d1, 0.0, "delayed update: stage 2 vs 1");
  expect_close(load_params(dir.path / "stage3_delayed.pt"), d1, 0.0, "delayed update: stage 3 vs 1");
  expect_close(d1, train_reference(4, 1), 1e-6, "delayed update, stage 1 on 2 ranks vs its definition");
}

// Bytes per parameter on each rank, by the ZeRO paper's accounting (Rajbhandari
// et al. 2020, mixed precision: 2 bytes of 16-bit parameters, 2 of gradients,
// 12 of fp32 master weights and Adam moments; stage 1 shards the 12, stage 2
// the gradients too, stage 3 everything; W ranks), on 2 ranks: stage 1
// reduce-scatters in place, so it holds no gradient bytes beyond the paper's.
// Offload moves the 12 / W to the host, and at stages 2, 3 the reduced
// gradient shard; at stages 0 and 1 it adds a host copy of the reduced shard
// (which the device's full buffer needs for the next step's accumulation).
// With fp32 gradients (Megatron's --bf16) every gradient figure doubles.
TEST(ZeroEngine, BytesPerParameterFollowTheZeroPaper) {
  const TempDir dir("memory");
  ASSERT_TRUE(run_ranks("memory", 2, dir));
  std::ifstream in(dir.path / "plan.0");
  const double W = 2;
  struct Want {
    double params_device, params_host, grads_device, grads_host, optim_device, optim_host;
  };
  int rows = 0;
  for (std::string name; in >> name;) {
    int stage = 0, offload = 0, grad_bytes = 0;
    double P = 0, got[6];
    in >> stage >> offload >> grad_bytes >> P;
    for (double& g : got) in >> g;
    const double g = grad_bytes, shard = 1 / W;
    Want w{};
    w.params_device = stage == 3 ? 2 * shard : 2;
    w.optim_device = offload ? 0 : (stage == 0 ? 12 : 12 * shard);
    w.optim_host = offload ? (stage == 0 ? 12 : 12 * shard) : 0;
    if (stage <= 1) {
      w.grads_device = g;
      w.grads_host = offload ? g * (stage == 1 ? shard : 1) : 0;
    } else {
      w.grads_device = offload ? 0 : g * shard;
      w.grads_host = offload ? g * shard : 0;
    }
    const double want[6] = {w.params_device, w.params_host, w.grads_device, w.grads_host, w.optim_device, w.optim_host};
    const char* kinds[6] = {"parameters (device)", "parameters (host)", "gradients (device)", "gradients (host)", "optimizer (device)", "optimizer (host)"};
    for (int i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(got[i] / P, want[i]) << name << ": " << kinds[i];
    ++rows;
  }
  EXPECT_EQ(rows, 16);
}

// ---- the ranks --------------------------------------------------------------

void expect_all(bool cond, const char* what) {
  if (!cond) throw Error(ErrorKind::Internal, "check failed: %s", what);
}

void worker_collectives(Comm& c, const fs::path& dir) {
  const int r = c.rank();
  auto f = torch::TensorOptions().dtype(torch::kFloat);
  torch::Tensor t = torch::full({3}, static_cast<float>(r + 1), f);
  c.all_reduce_sum(t);
  expect_all(t.equal(torch::full({3}, 3.0f, f)), "all_reduce_sum");
  torch::Tensor m = torch::full({2}, static_cast<float>(r * 10), f);
  c.all_reduce_max(m);
  expect_all(m.equal(torch::full({2}, 10.0f, f)), "all_reduce_max");
  torch::Tensor full = torch::arange(4, f) + 100 * r;  // rank r's input
  torch::Tensor shard = torch::empty({2}, f);
  c.reduce_scatter_sum(shard, full);  // chunk r of the sum: (2*[0,1,2,3] + 100) at r*2..
  expect_all(shard.equal(torch::arange(4, f).narrow(0, 2 * r, 2) * 2 + 100), "reduce_scatter_sum");
  // In place (ZeRO stage 1): the shard is the rank's chunk of the input.
  torch::Tensor inplace = torch::arange(4, f) + 100 * r;
  torch::Tensor chunk = inplace.narrow(0, 2 * r, 2);
  c.reduce_scatter_sum(chunk, inplace);
  expect_all(chunk.equal(torch::arange(4, f).narrow(0, 2 * r, 2) * 2 + 100), "reduce_scatter_sum in place");
  torch::Tensor gathered = torch::empty({4}, f);
  torch::Tensor mine = torch::full({2}, static_cast<float>(r), f);
  c.all_gather(gathered, mine);
  expect_all(gathered.equal(torch::tensor({0.f, 0.f, 1.f, 1.f})), "all_gather");
  auto pending = c.all_reduce_async(t);
  pending->wait();
  expect_all(t.equal(torch::full({3}, 6.0f, f)), "all_reduce_async");
  torch::Tensor msg = r == 0 ? torch::tensor({7.f, 8.f}) : torch::empty({2}, f);
  c.p2p({{r == 0 ? Comm::P2p::kSend : Comm::P2p::kRecv, msg, 1 - r, /*tag=*/5}})->wait();
  expect_all(msg.equal(torch::tensor({7.f, 8.f})), "send/recv");
  // One batch each way with two messages, posted in the same order on both
  // sides (what NCCL needs): both ranks send and receive at once.
  torch::Tensor out1 = torch::full({2}, static_cast<float>(r + 1), f), out2 = torch::full({3}, static_cast<float>(10 * (r + 1)), f);
  torch::Tensor in1 = torch::empty({2}, f), in2 = torch::empty({3}, f);
  std::vector<Comm::P2p> batch{{Comm::P2p::kSend, out1, 1 - r, 1}, {Comm::P2p::kRecv, in1, 1 - r, 1},
                               {Comm::P2p::kSend, out2, 1 - r, 2}, {Comm::P2p::kRecv, in2, 1 - r, 2}};
  c.p2p(batch)->wait();
  expect_all(in1.equal(torch::full({2}, static_cast<float>(2 - r), f)) && in2.equal(torch::full({3}, static_cast<float>(10 * (2 - r)), f)),
             "p2p batch");
  auto names = c.exchange("who", "rank" + std::to_string(r));
  expect_all(names == std::vector<std::string>{"rank0", "rank1"}, "exchange");
  auto g = c.new_group("pair", {1, 0});  // reversed order: global rank 1 is the group's rank 0
  expect_all(g->rank() == 1 - r && g->world() == 2, "new_group ranks");
  torch::Tensor one = torch::ones({1}, f);
  g->all_reduce_sum(one);
  expect_all(one.item<float>() == 2.0f, "group all_reduce_sum");
  c.barrier();
  std::ofstream(dir / ("ok." + std::to_string(r))) << "ok\n";
}

void worker_stages(Comm& c, const fs::path& dir) {
  for (auto [stage, offload, name] : {std::tuple{1, false, "stage1"}, std::tuple{2, false, "stage2"}, std::tuple{3, false, "stage3"},
                                      std::tuple{1, true, "stage1_offload"}, std::tuple{3, true, "stage3_offload"}}) {
    const Params p = train(stage, offload, c, 4);
    if (c.rank() == 0) save_params(p, dir / (std::string(name) + ".pt"));
  }
  for (int stage = 1; stage <= 3; ++stage) {
    const Params p = train(stage, true, c, 4, 1);
    if (c.rank() == 0) save_params(p, dir / ("stage" + std::to_string(stage) + "_delayed.pt"));
  }
}

// Per configuration: name, stage, offload, gradient bytes, padded parameters
// and the plan's resident bytes by kind (transient buffers left out).
void worker_memory(Comm& c, const fs::path& dir) {
  std::ofstream out(dir / ("plan." + std::to_string(c.rank())));
  for (int stage = 0; stage <= 3; ++stage)
    for (bool offload : {false, true})
      for (auto gd : {torch::kBFloat16, torch::kFloat}) {
        Gpt2 model(tiny());
        ZeroEngine engine(model, c, zero_config(stage, offload, torch::kBFloat16, gd), torch::Device(torch::kCPU));
        const MemoryPlan p = engine.plan();
        out << "stage" << stage << (offload ? "_offload_" : "_") << c10::toString(gd) << " " << stage << " " << offload << " "
            << c10::elementSize(gd) << " " << engine.padded_numel() << " " << p.params_device - p.params_gathered << " " << p.params_host << " "
            << p.grads_device - p.grads_staging << " " << p.grads_host << " " << p.optim_device << " " << p.optim_host << "\n";
      }
}

void worker_rendezvous(Comm& c, const fs::path& dir) {
  const int r = c.rank();
  auto f = torch::TensorOptions().dtype(torch::kFloat);
  torch::Tensor a = torch::full({2}, 1.0f, f), b = torch::full({2}, 2.0f, f), x = torch::empty({2}, f), y = torch::empty({2}, f);
  if (r == 0) c.p2p({{Comm::P2p::kSend, a, 1, /*tag=*/1}, {Comm::P2p::kSend, b, 1, /*tag=*/2}})->wait();
  else c.p2p({{Comm::P2p::kRecv, x, 0, /*tag=*/2}, {Comm::P2p::kRecv, y, 0, /*tag=*/1}})->wait();
  if (r == 1) expect_all(x.equal(a) && y.equal(b), "matched by posting order, tags ignored");
  bool hung = false;
  try {
    c.p2p({{Comm::P2p::kSend, a, 1 - r, 0}})->wait();  // both send first: neither receive is ever posted
    c.p2p({{Comm::P2p::kRecv, x, 1 - r, 0}})->wait();
  } catch (const Error& e) {
    hung = std::string(e.what()).find("failed") != std::string::npos;
  }
  expect_all(hung, "two sends posted alone hang until the timeout");
  std::ofstream(dir / ("ok." + std::to_string(r))) << "ok\n";
}

// The fused loss's ATen twin against the chunked path with the vocabulary
// split over 2 ranks (fp32, within 1e-6), and both against LibTorch's loss of
// the whole logits: each rank's gradient is its columns of the whole one.
void worker_vocab_ce(Comm& c, const fs::path& dir) {
  const int r = c.rank();
  torch::manual_seed(11);
  const auto full = torch::randn({29, 40}) * 4;
  const auto targets = torch::randint(40, {29}, torch::kLong);
  auto whole = full.clone().requires_grad_(true);
  const auto want = torch::nn::functional::cross_entropy(whole, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  want.mean().backward();
  const TensorParallel tp{&c, 2, r, false, nullptr};
  torch::Tensor loss[2], grad[2];
  for (int i = 0; i < 2; ++i) {
    auto x = full.narrow(1, 20 * r, 20).clone().requires_grad_(true);
    CeOptions o;
    o.impl = i == 0 ? CeImpl::Chunked : CeImpl::Fused;
    o.chunk_rows = 6;
    o.chunk_cols = 7;
    o.logits_dead = i == 1;
    loss[i] = vocab_parallel_cross_entropy(x * 1, targets, tp, o);
    loss[i].mean().backward();
    grad[i] = x.grad();
  }
  expect_all(torch::allclose(loss[1], loss[0], 1e-6, 1e-6), "fused twin loss vs chunked on 2 vocabulary ranks");
  expect_all(torch::allclose(grad[1], grad[0], 1e-6, 1e-8), "fused twin gradient vs chunked on 2 vocabulary ranks");
  expect_all(torch::allclose(loss[1], want.detach(), 1e-6, 1e-6), "fused twin loss vs LibTorch's on the whole logits");
  expect_all(torch::allclose(grad[1], whole.grad().narrow(1, 20 * r, 20), 1e-6, 1e-8), "fused twin gradient vs LibTorch's");
  std::ofstream(dir / ("ok." + std::to_string(r))) << "ok\n";
}

int worker_main(const std::string& worker) {
  try {
    const fs::path dir = std::getenv("ZLM_TEST_DIR");
    const DistEnv env = dist_env_from_process();
    if (worker == "rendezvous") setenv("ZLM_P2P_RENDEZVOUS", "1", 1);
    auto comm = make_comm(env, "gloo", -1, worker == "rendezvous" ? std::chrono::seconds(3) : std::chrono::seconds(60));
    if (worker == "rendezvous") {  // its comm is broken by the hang: no shutdown handshake
      worker_rendezvous(*comm, dir);
      return 0;
    }
    if (worker == "collectives") worker_collectives(*comm, dir);
    else if (worker == "stages") worker_stages(*comm, dir);
    else if (worker == "memory") worker_memory(*comm, dir);
    else if (worker == "vocab_ce") worker_vocab_ce(*comm, dir);
    else throw Error(ErrorKind::Usage, "unknown worker %s", worker.c_str());
    comm->shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker %s: %s\n", worker.c_str(), e.what());
    return 1;
  }
}

}  // namespace
}  // namespace zlm::trainer

int main(int argc, char** argv) {
  if (const char* worker = std::getenv("ZLM_TEST_WORKER")) return zlm::trainer::worker_main(worker);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
