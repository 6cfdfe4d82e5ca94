#include "trainer/run/trainer.h"

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>

#include "common/core/dir_lock.h"
#include "common/core/error.h"
#include "common/core/json_writer.h"
#include "common/core/log.h"
#include "common/core/output_file.h"
#include "common/core/stats.h"
#include "common/tokenizer/vocab_file.h"
#include "formats/gpt_dataset.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/parallel/comm.h"
#include "trainer/run/device_memory.h"
#include "trainer/config/dist_env.h"
#include "trainer/model/gpt2_model.h"
#include "trainer/zero/loss_scaler.h"
#include "trainer/run/step_profiler.h"
#include "trainer/model/tensor_parallel.h"
#include "trainer/parallel/grid.h"
#include "trainer/parallel/schedule.h"
#include "trainer/report/phase_timers.h"
#include "trainer/report/tensorboard.h"
#include "trainer/zero/engine.h"

namespace zlm::trainer {

namespace fs = std::filesystem;
using formats::GptIndex;
using formats::MegatronReader;

namespace {

// SIGTERM / SIGINT: the first one asks for a stop after the current iteration
// (agreed by all ranks, see Trainer::mean_loss); the handler then resets
// itself (SA_RESETHAND), so a second signal kills as usual.
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig); }
void install_stop_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  for (int sig : {SIGTERM, SIGINT}) sigaction(sig, &sa, nullptr);
}

using SampleSource = formats::GptSamples;  // the samples of one split: one dataset or a blend

// (tokens, labels), each (B, T), of `count` consecutive samples from `first`.
std::pair<torch::Tensor, torch::Tensor> batch(const SampleSource& src, int64_t first, int64_t count, int64_t seq_length,
                                              const torch::Device& device) {
  // Pinned on CUDA, so that the copy below is asynchronous: a copy from pageable
  // memory would wait for the work already queued (the previous backward).
  auto all = torch::empty({count, seq_length + 1}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(device.is_cuda()));
  auto acc = all.accessor<int64_t, 2>();
  for (int64_t b = 0; b < count; ++b) {
    auto s = src.sample(first + b);
    for (int64_t t = 0; t <= seq_length; ++t) acc[b][t] = s[static_cast<size_t>(t)];
  }
  all = all.to(device, /*non_blocking=*/true);
  return {all.narrow(1, 0, seq_length), all.narrow(1, 1, seq_length)};
}

std::string dashes(size_t n) { return std::string(n, '-'); }

// A number for metrics.jsonl: null where it is not finite (JSON has no NaN).
std::optional<double> finite_or_null(double v) { return std::isfinite(v) ? std::optional<double>(v) : std::nullopt; }

// What must be equal on every rank; a difference is refused at start.
std::string run_fingerprint(const TrainArgs& a, int64_t padded_vocab, const std::string& precision) {
  return strprintf("num-layers=%ld hidden-size=%ld num-attention-heads=%ld seq-length=%ld max-position-embeddings=%ld vocab=%ld "
                   "micro-batch-size=%ld global-batch-size=%ld train-iters=%ld zero-stage=%ld cpu-offload=%d offload-params=%d "
                   "precision=%s seed=%u lr=%g tensor-model-parallel-size=%ld pipeline-model-parallel-size=%ld "
                   "num-layers-per-virtual-pipeline-stage=%ld sequence-parallel=%d delayed-param-update=%ld",
                   (long)a.num_layers, (long)a.hidden_size, (long)a.num_attention_heads, (long)a.seq_length,
                   (long)a.max_position_embeddings, (long)padded_vocab, (long)a.micro_batch_size, (long)a.global_batch_size,
                   (long)a.total_iters(), (long)a.zero_stage, (int)a.cpu_offload, (int)a.offload_params, precision.c_str(), a.seed, a.lr,
                   (long)a.tensor_model_parallel_size, (long)a.pipeline_model_parallel_size,
                   (long)a.num_layers_per_virtual_pipeline_stage, (int)a.sequence_parallel,
                   a.delayed_param_update ? (long)a.delayed_param_update_warmup : -1L);
}

void check_same_settings(Comm& comm, const std::string& mine) {
  auto all = comm.exchange("settings", mine);
  for (int r = 0; r < comm.world(); ++r) {
    if (all[static_cast<size_t>(r)] == all[0]) continue;
    // Name the settings that differ.
    std::istringstream x(all[0]), y(all[static_cast<size_t>(r)]);
    std::string p, q, diff;
    while ((x >> p) && (y >> q))
      if (p != q) diff += " " + q + " (rank 0: " + p.substr(p.find('=') + 1) + ")";
    throw Error(ErrorKind::Usage, "rank %d was started with different model or parallel settings than rank 0:%s; every rank must get the same flags",
                r, diff.c_str());
  }
}

std::string human_bytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return strprintf("%.1f %s", v, units[u]);
}


// The device of this rank and the precision it trains in.
struct Placement {
  bool cuda = false;
  int gpu = 0;
  torch::Device device{torch::kCPU};
  std::string backend;
  bool fp16 = false, bf16 = false;
  bool half() const { return fp16 || bf16; }
  torch::ScalarType param_dtype() const { return fp16 ? torch::kHalf : bf16 ? torch::kBFloat16 : torch::kFloat; }
  torch::ScalarType grad_dtype = torch::kFloat;
};

// Megatron's --deterministic-mode: PyTorch's deterministic kernels (an op without one warns
// instead of failing), cuBLAS with a fixed workspace (its reductions then keep one order) and
// NCCL's ring algorithm unless NCCL_ALGO says otherwise. Before the first cuBLAS call.
void use_deterministic_kernels(int rank) {
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);
  ::setenv("NCCL_ALGO", "Ring", 0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
  if (rank == 0)
    ZLM_LOG_INF(" > --deterministic-mode: deterministic kernels, CUBLAS_WORKSPACE_CONFIG=%s, NCCL_ALGO=%s", std::getenv("CUBLAS_WORKSPACE_CONFIG"),
                std::getenv("NCCL_ALGO"));
}

Placement place(const TrainArgs& a, const DistEnv& env) {
  Placement p;
  p.cuda = a.device == "cuda" || (a.device == "auto" && torch::cuda::is_available());
  if (a.device == "cuda" && !torch::cuda::is_available()) throw Error(ErrorKind::Usage, "--device cuda: no CUDA device is visible");
  // GPU of this rank: LOCAL_RANK, or GPU 0 when the launcher gave each rank
  // only its own GPU (Slurm's --gpus-per-task, CUDA_VISIBLE_DEVICES per rank).
  if (p.cuda) {
    const int visible = static_cast<int>(torch::cuda::device_count());
    p.gpu = env.local_rank < visible ? env.local_rank : 0;
    if (env.local_rank >= visible && visible > 1)
      throw Error(ErrorKind::Usage, "local rank %d but only %d GPUs are visible to it", env.local_rank, visible);
  }
  p.device = p.cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(p.gpu)) : torch::Device(torch::kCPU);
  // fp32 matrix products on the tensor cores (TF32, 10-bit mantissa inputs, fp32 accumulation), as
  // llm.c and nanoGPT do; PyTorch's default is full fp32. NVIDIA_TF32_OVERRIDE=0, NVIDIA's own switch,
  // keeps full fp32 (cuBLAS obeys it too).
  const char* tf32 = std::getenv("NVIDIA_TF32_OVERRIDE");
  if (p.cuda && !(tf32 && std::string(tf32) == "0")) {
    at::globalContext().setFloat32MatmulPrecision("high");
    if (env.rank == 0) ZLM_LOG_INF(" > fp32 matrix products use TF32 on the GPU (NVIDIA_TF32_OVERRIDE=0 keeps full fp32)");
  }
  if (a.deterministic_mode) use_deterministic_kernels(env.rank);
  p.backend = a.distributed_backend;
  if (!p.cuda && p.backend == "nccl") {
    if (env.rank == 0) ZLM_LOG_WRN("--distributed-backend nccl needs a GPU; training on CPU with gloo");
    p.backend = "gloo";
  }
  // Mixed precision is Megatron's and DeepSpeed's layout: 16-bit parameters
  // and activations, fp32 master weights and Adam moments in the optimizer
  // (trainer/zero/engine.h). On CPU, where half-precision matrix products are mostly
  // emulated (tens of times slower than fp32 on CPUs without AVX512-BF16/AMX),
  // --fp16/--bf16 fall back to fp32 unless ZLM_CPU_MIXED_PRECISION=1, which the
  // tests use to run the GPU's mixed-precision code paths on CPU.
  const char* cpu_env = std::getenv("ZLM_CPU_MIXED_PRECISION");
  const bool mixed_ok = p.cuda || (cpu_env && std::string(cpu_env) == "1");
  if (env.rank == 0 && (a.fp16 || a.bf16)) {
    if (!mixed_ok) ZLM_LOG_WRN("--%s on CPU: training in fp32 (ZLM_CPU_MIXED_PRECISION=1 trains in 16-bit on CPU)", a.fp16 ? "fp16" : "bf16");
    else if (!p.cuda) ZLM_LOG_WRN("--%s on CPU: 16-bit parameters on CPU (ZLM_CPU_MIXED_PRECISION=1)", a.fp16 ? "fp16" : "bf16");
  }
  p.fp16 = mixed_ok && a.fp16;
  p.bf16 = mixed_ok && a.bf16;
  // Gradients: Megatron accumulates and all-reduces them in fp32 for --bf16 and
  // with --accumulate-allreduce-grads-in-fp32, otherwise in fp16; DeepSpeed in
  // its communication_data_type, by default the parameters' dtype.
  const std::string& want = a.grad_reduce_dtype;
  if (!p.half() || want == "fp32" || (want.empty() && p.bf16 && !a.deepspeed)) p.grad_dtype = torch::kFloat;
  else p.grad_dtype = p.param_dtype();  // the settings refused any other dtype
  if (env.rank == 0 && p.bf16 && want.empty() && !a.deepspeed) ZLM_LOG_INF("accumulate and all-reduce gradients in fp32 for bfloat16 data type.");
  return p;
}

// Activation bytes one micro-batch leaves per layer until its backward, for
// the memory plan: Korthikanti et al. 2022 (16-bit: s b h (34 + 5 a s / h),
// the parts in split regions / TP, everything / TP with sequence parallelism),
// doubled for fp32; with recomputation only the layer's input.
int64_t activation_bytes_per_layer(const TrainArgs& a, bool half) {
  const double s = static_cast<double>(a.seq_length), b = static_cast<double>(a.micro_batch_size), h = static_cast<double>(a.hidden_size),
               heads = static_cast<double>(a.num_attention_heads), t = static_cast<double>(a.tensor_model_parallel_size);
  const double scale = half ? 1.0 : 2.0;
  if (a.checkpoint_activations) return static_cast<int64_t>(s * b * h * 2 * scale / (a.sequence_parallel ? t : 1.0));
  const double per = a.sequence_parallel ? 34.0 / t + 5.0 * heads * s / (h * t) : 10.0 + 24.0 / t + 5.0 * heads * s / (h * t);
  return static_cast<int64_t>(s * b * h * per * scale);
}

// One training run (train() below): set-up in the constructor, then run().
class Trainer {
 public:
  Trainer(const TrainConfig& cfg, const DistEnv& env);
  int run();

 private:
  void announce_settings();
  void open_vocabulary();
  void connect();
  void build_data();
  void build_model();
  void report_memory_plan();
  StageFns stage_fns(const SampleSource& src, int64_t consumed, double loss_grad_scale);
  torch::Tensor loss_figures(const torch::Tensor& loss_sum, int64_t micro_batches, double vote);
  double mean_loss(const torch::Tensor& loss_sum, int64_t micro_batches, bool* stop = nullptr);
  torch::Tensor clip_coefficient(const torch::Tensor& norm) const;
  torch::Tensor skip_flag(const torch::Tensor& norm, const torch::Tensor& figures) const;
  bool any_rank_stopping();
  [[noreturn]] void stop_on_signal(bool saved = false);
  void summary();  // rank 0: the stats table (unless -q) and --stats-out
  void finish();
  double model_parallel_sum(double v);
  void train_step();
  void log_progress();
  void evaluate(const std::string& label, const SampleSource& src, int64_t* consumed);
  void save();

  const TrainConfig& cfg_;
  const TrainArgs& a_;  // cfg_.args
  std::unique_ptr<DirLock> save_lock_;  // rank 0: this run's claim on --save
  int saves_ = 0;       // checkpoints saved by this run
  DistEnv env_;
  Placement pl_;
  int64_t padded_vocab_ = 0, vocab_entries_ = 0, micro_ = 0;
  double flops_per_iter_ = 0;
  std::unique_ptr<Comm> world_;
  std::unique_ptr<ProcessGrid> grid_;  // after world_: destroyed before it
  std::vector<std::unique_ptr<MegatronReader>> readers_;
  std::unique_ptr<SampleSource> train_src_, valid_src_, test_src_;
  RngTracker rng_;
  Gpt2 model_{nullptr};
  std::unique_ptr<ZeroEngine> engine_;
  std::unique_ptr<PipelineSchedule> schedule_;
  std::unique_ptr<std::ofstream> metrics_;  // rank 0 writes every metric as a JSON line (appended: resumed runs continue it)
  std::string metrics_path_;
  // A failed metrics write (disk full) is an error, not a silently shorter file.
  void check_metrics() {
    if (metrics_ && !*metrics_) throw Error(ErrorKind::Io, "cannot write the metrics file '%s' ---> HINT: is the disk full?", metrics_path_.c_str());
  }
  std::unique_ptr<TensorBoardLog> tb_;      // rank 0, with --tensorboard-dir
  std::unique_ptr<PhaseTimers> timers_;     // with --timing-log-level
  std::unique_ptr<StepProfiler> profiler_;  // --profile
  void time_start(const char* phase) {
    if (timers_) timers_->start(phase);
  }
  void time_stop(const char* phase) {
    if (timers_) timers_->stop(phase);
  }
  std::vector<std::vector<PhaseTimes>> gather_phase_times();
  void write_metrics(double avg, double lr_now, double secs, double tflops, const std::vector<PhaseMax>& phases);
  void tensorboard_training(double loss_avg, double grad_norm);
  LossScaler scaler_{1, 1, 1, 1, false};
  RunState st_;
  // The current log interval.
  double interval_loss_ = 0;                            // over the iterations that advanced (Megatron)
  int64_t interval_iters_ = 0, interval_advanced_ = 0;  // all iterations, and those not skipped
  int64_t skipped_iters_ = 0, nan_iters_ = 0;
  double last_grad_norm_ = 0, last_logged_loss_ = NAN, total_secs_ = 0;
  std::optional<double> last_valid_loss_, test_loss_;
  int64_t total_skipped_ = 0, iterations_run_ = 0;
  std::optional<double> last_num_zeros_, last_params_norm_;
  bool last_skipped_ = false, stop_ = false;
  std::chrono::steady_clock::time_point interval_start_;
};

Trainer::Trainer(const TrainConfig& cfg, const DistEnv& env) : cfg_(cfg), a_(cfg_.args), env_(env) {
  if (a_.local_rank_flag >= 0 && a_.local_rank_flag != env.local_rank)
    throw Error(ErrorKind::Usage, "--local_rank %ld disagrees with LOCAL_RANK=%d", (long)a_.local_rank_flag, env.local_rank);
  if (env.rank != 0 && log_level() >= LogLevel::Inf) log_set_level(LogLevel::Wrn);  // rank 0 speaks for the job
  announce_settings();
  pl_ = place(a_, env);
  scaler_ = LossScaler(a_.loss_scale > 0 ? a_.loss_scale : a_.initial_loss_scale, a_.min_loss_scale, a_.loss_scale_window, a_.hysteresis,
                       a_.loss_scale <= 0);
  open_vocabulary();
  if (env.rank == 0 && !a_.save.empty()) {  // before anything is written there
    save_lock_ = std::make_unique<DirLock>(a_.save, "--save");
    if (!save_lock_->stale_note().empty())
      ZLM_LOG_WRN("--save %s: took over the claim of a run that ended without releasing it (%s)", a_.save.c_str(),
                  save_lock_->stale_note().c_str());
  }
  connect();
  build_data();
  build_model();
  if (a_.timing_log_level > 0)
    timers_ = std::make_unique<PhaseTimers>(static_cast<int>(a_.timing_log_level), [cuda = pl_.cuda] {
      if (cuda) torch::cuda::synchronize();
    });
  profiler_ = std::make_unique<StepProfiler>(a_, env_.rank, pl_.cuda);
}

// What the settings came to, where they are not the flags as given (rank 0).
void Trainer::announce_settings() {
  if (a_.local_rank_flag >= 0) ZLM_LOG_INF(" > --local-rank=%ld from the launcher (LOCAL_RANK=%d)", (long)a_.local_rank_flag, env_.local_rank);
  if (!a_.model_config.empty())
    ZLM_LOG_INF(" > model from %s: %ld layers, hidden %ld, %ld heads, %ld positions", a_.model_config.c_str(), (long)a_.num_layers,
                (long)a_.hidden_size, (long)a_.num_attention_heads, (long)a_.max_position_embeddings);
  if (!cfg_.deepspeed_summary.empty()) ZLM_LOG_INF(" > %s", cfg_.deepspeed_summary.c_str());
  for (const auto& n : cfg_.notes) ZLM_LOG_INF(" > note: %s", n.c_str());
  if (env_.rank == 0)
    for (const auto& w : cfg_.warnings) ZLM_LOG_WRN("%s", w.c_str());
}

// The vocabulary's size and EOD (vocab.json), Megatron's padding, and the model config's agreement with them.
void Trainer::open_vocabulary() {
  const auto [vocab_entries, eod] = read_vocab_summary(a_.vocab_file);
  // Megatron pads to a multiple of --make-vocab-size-divisible-by x TP.
  padded_vocab_ = static_cast<int64_t>(padded_vocab_size(static_cast<uint64_t>(vocab_entries), static_cast<uint64_t>(a_.make_vocab_size_divisible_by),
                                                         static_cast<uint64_t>(a_.tensor_model_parallel_size)));
  vocab_entries_ = vocab_entries;
  if (a_.model_config_vocab_size > 0 && a_.model_config_vocab_size != vocab_entries && a_.model_config_vocab_size != padded_vocab_)
    throw Error(ErrorKind::Usage, "%s: vocab_size %ld is neither the %ld entries of %s nor their padded size %ld", a_.model_config.c_str(),
                (long)a_.model_config_vocab_size, (long)vocab_entries, a_.vocab_file.c_str(), (long)padded_vocab_);
  if (a_.model_config_eos >= 0 && a_.model_config_eos != eod)
    throw Error(ErrorKind::Usage, "%s: eos_token_id %ld is not %s's <|endoftext|> id %ld", a_.model_config.c_str(), (long)a_.model_config_eos,
                a_.vocab_file.c_str(), (long)eod);
  ZLM_LOG_INF(" > padded vocab (size: %ld) with %ld dummy tokens (new size: %ld)", (long)vocab_entries,
              (long)(padded_vocab_ - vocab_entries), (long)padded_vocab_);
}

// The ranks meet, agree on the settings and form the process grid.
void Trainer::connect() {
  // Before anything else, so that different settings are refused before they can deadlock.
  world_ = make_comm(env_, pl_.backend, pl_.cuda ? pl_.gpu : -1,
                     std::chrono::milliseconds(static_cast<int64_t>(a_.distributed_timeout_minutes * 60000)));
  check_same_settings(*world_, run_fingerprint(a_, padded_vocab_,
                                                 strprintf("%s(gradients:%s)", c10::toString(pl_.param_dtype()), c10::toString(pl_.grad_dtype))));
  grid_ = std::make_unique<ProcessGrid>(*world_, static_cast<int>(a_.tensor_model_parallel_size),
                                        static_cast<int>(a_.pipeline_model_parallel_size));
  if (world_->backend() != "local") {  // several ranks, or one through a process group (ZLM_PROCESS_GROUP_ALONE)
    ZLM_LOG_INF(" > initialized tensor model parallel with size %d", grid_->tp_size());
    ZLM_LOG_INF(" > initialized pipeline model parallel with size %d", grid_->pp_size());
    ZLM_LOG_INF(" > initialized data parallel with size %d (%s backend, launched by %s, rendezvous %s:%d)", grid_->dp_size(),
                world_->backend().c_str(), env_.launcher.c_str(), env_.master_addr.c_str(), env_.master_port);
    ZLM_LOG_INF(" > process grid (global rank = tp + TP x (dp + DP x pp)):\n%s", grid_->describe().c_str());
  }
  micro_ = cfg_.micro_batches;
  ZLM_CHECK(grid_->dp_size() == cfg_.data_parallel, "grid DP %d, settings DP %d", grid_->dp_size(), cfg_.data_parallel);
  // Megatron's FLOPs per iteration: 3 passes (4 with recomputation, which ZeRO-3's gathered blocks also do).
  const double L = static_cast<double>(a_.num_layers), h = static_cast<double>(a_.hidden_size), s = static_cast<double>(a_.seq_length);
  flops_per_iter_ = 24.0 * (a_.checkpoint_activations || cfg_.zero.shard_parameters ? 4 : 3) * static_cast<double>(a_.global_batch_size) * s * L *
                    h * h * (1.0 + s / (6.0 * h) + static_cast<double>(padded_vocab_) / (16.0 * L * h));
}

void Trainer::build_data() {
  std::vector<double> raw_weights;
  for (const auto& [w, prefix] : a_.data_path) {
    readers_.push_back(std::make_unique<MegatronReader>(prefix));
    raw_weights.push_back(w);
    if (readers_.back()->total_tokens() == 0)  // the cause, before --split's ranges would blame themselves
      throw Error(ErrorKind::Format, "--data-path %s: the dataset holds %s ---> HINT: check the step that made it (preprocess_data's stats "
                  "say how many records it rejected)", prefix.c_str(), readers_.back()->num_documents() == 0 ? "no documents"
                  : strprintf("%lu documents, all empty", (unsigned long)readers_.back()->num_documents()).c_str());
    // Checked at open, not met as an index error deep in the embedding lookup.
    if (auto bad = formats::find_token_id_out_of_range(*readers_.back(), vocab_entries_))
      throw Error(ErrorKind::Format, "%s: document %lu (sequence %lu) holds token id %ld, but %s has %ld tokens ---> HINT: the dataset "
                  "was tokenized with another vocabulary", formats::bin_path(prefix).c_str(), (unsigned long)bad->document,
                  (unsigned long)bad->sequence, (long)bad->id, a_.vocab_file.c_str(), (long)vocab_entries_);
  }
  std::vector<double> weights = formats::normalize_blend_weights(raw_weights);
  ZLM_LOG_INF(" > datasets target sizes (minimum size):");
  ZLM_LOG_INF("    train:      %ld", (long)a_.train_samples_total());
  ZLM_LOG_INF("    validation: %ld", (long)a_.valid_samples());
  ZLM_LOG_INF("    test:       %ld", (long)a_.test_samples());
  // Rank 0 builds (and caches) the indices first; the others then load the cache.
  auto build = [&] {
    const std::string& cache = a_.data_cache_path;
    std::vector<const MegatronReader*> readers;
    for (const auto& r : readers_) readers.push_back(r.get());
    train_src_ = std::make_unique<SampleSource>(readers, weights, a_.split, 0, a_.train_samples_total(), a_.seq_length, a_.seed, cache);
    valid_src_ = std::make_unique<SampleSource>(readers, weights, a_.split, 1, a_.valid_samples(), a_.seq_length, a_.seed, cache);
    test_src_ = std::make_unique<SampleSource>(readers, weights, a_.split, 2, a_.test_samples(), a_.seq_length, a_.seed, cache);
  };
  if (env_.rank == 0) build();
  world_->barrier();
  if (env_.rank != 0) build();
  if (train_src_->empty()) throw Error(ErrorKind::Usage, "--split '%s' leaves no training documents", a_.split.c_str());
}

void Trainer::build_model() {
  ProcessGrid& g = *grid_;
  Gpt2Config cfg{.vocab_size = padded_vocab_, .vocab_entries = vocab_entries_, .max_positions = a_.max_position_embeddings, .num_layers = a_.num_layers,
                 .hidden = a_.hidden_size, .heads = a_.num_attention_heads, .init_std = a_.init_method_std,
                 .hidden_dropout = a_.hidden_dropout, .attention_dropout = a_.attention_dropout,
                 .checkpoint_activations = a_.checkpoint_activations, .seed = a_.seed,
                 .cpu_initialization = a_.use_cpu_initialization, .erf_gelu = !a_.bias_gelu_fusion && !a_.openai_gelu};
  ModelPart part;
  part.tp = TensorParallel{&g.tp(), g.tp_size(), g.tp_rank(), a_.sequence_parallel, &rng_};
  part.pre = g.first_stage();
  part.post = g.last_stage();
  part.chunks = stage_layers(a_.num_layers, g.pp_size(), static_cast<int>(a_.pipeline_chunks()), g.pp_rank());
  // Parameters without storage: the ZeRO engine draws each one into the
  // buffer or shard that holds it (every weight from its own seed: the same
  // model for every layout).
  model_ = Gpt2(cfg, part, ParamInit::Deferred);
  // Megatron's dropout streams: seed + 100 x stage for the default generator,
  // + 2718 + TP rank for the model-parallel tracker.
  const uint64_t seed = a_.seed + 100ULL * static_cast<uint64_t>(g.pp_rank());
  torch::manual_seed(seed);
  rng_.seed(pl_.device, seed, seed + 2718 + static_cast<uint64_t>(g.tp_rank()));

  ZeroConfig z{.plan = cfg_.zero, .param_dtype = pl_.param_dtype(), .grad_dtype = pl_.grad_dtype, .beta1 = a_.adam_beta1,
               .beta2 = a_.adam_beta2, .eps = a_.adam_eps, .weight_decay = a_.weight_decay};
  if (cfg_.offload_chunk > 0) z.offload_chunk = cfg_.offload_chunk;
  z.fuse_wgrad = a_.gradient_accumulation_fusion;
  if (z.delayed())
    ZLM_LOG_INF(" > delayed parameter update after %ld synchronous steps: each CPU AdamW step overlaps the next forward/backward, whose "
                "gradients are one update stale; evaluations, checkpoints and --log-params-norm wait for it", (long)z.plan.delayed_update_after);
  z.overlap = g.pp_size() == 1;  // pipeline schedules interleave the backward passes of micro-batches
  if (g.pp_size() > 1 && (part.pre || part.post)) z.own_buckets = {"wte.weight"};  // the same shard on the first and last stage
  Gpt2Impl* m = model_.get();
  z.in_norm = [m](const std::string& name) { return m->counts_in_grad_norm(name); };
  if (part.tp.sp()) {
    z.tp_partial = [m](const std::string& name) { return m->tp_partial_grad(name); };
    z.tp_partial_comm = &g.tp();
  }
  engine_ = std::make_unique<ZeroEngine>(model_, g.dp(), z, pl_.device);
  schedule_ = std::make_unique<PipelineSchedule>(g.pp(), model_->num_chunks(), model_->activation_shape(a_.micro_batch_size, a_.seq_length),
                                                 torch::TensorOptions().dtype(pl_.param_dtype()).device(pl_.device));
  const std::string metrics_path = !a_.metrics_out.empty() ? a_.metrics_out : (!a_.save.empty() ? (fs::path(a_.save) / "metrics.jsonl").string() : "");
  if (!metrics_path.empty() && env_.rank == 0) {
    if (fs::path(metrics_path).has_parent_path()) fs::create_directories(fs::path(metrics_path).parent_path());
    metrics_ = std::make_unique<std::ofstream>(metrics_path, std::ios::app);
    metrics_path_ = metrics_path;
    check_metrics();
  }
  if (!a_.tensorboard_dir.empty() && env_.rank == 0) {
    tb_ = std::make_unique<TensorBoardLog>(a_);
    ZLM_LOG_INF(" > TensorBoard events: %s (every %ld iterations)", tb_->path().c_str(), (long)a_.tensorboard_log_interval);
    if (a_.log_memory_to_tensorboard && !pl_.cuda) ZLM_LOG_INF(" > note: --log-memory-to-tensorboard: a CPU run has no device allocator figures to log");
  }
  report_memory_plan();
}

// Every rank's bytes (counted from its tensors where they exist), printed and written by rank 0.
void Trainer::report_memory_plan() {
  const ProcessGrid& g = *grid_;
  const MemoryPlan plan = engine_->plan();
  const bool half = pl_.half();
  const int64_t layers_here = static_cast<int64_t>(model_->blocks->size());
  const int64_t in_flight = schedule_->max_in_flight(micro_);
  const int64_t activations = in_flight * (layers_here / static_cast<int64_t>(model_->num_chunks())) * activation_bytes_per_layer(a_, half);
  constexpr int kFields = 10;
  auto mine = torch::tensor({engine_->optimizer_state_bytes(), engine_->resident_parameter_bytes(), model_->num_parameters(),
                             plan.params_device, plan.params_host, plan.grads_device, plan.grads_host, plan.optim_device, plan.optim_host,
                             activations}, torch::kLong).to(pl_.device);
  const int W = world_->world();
  auto all = torch::zeros({kFields * W}, torch::kLong).to(pl_.device);
  world_->all_gather(all, mine);
  all = all.cpu();
  auto field = [&](int r, int f) { return all[r * kFields + f].item<int64_t>(); };
  const int64_t unsharded = engine_->optimizer_state_bytes_full(false);
  ZLM_LOG_INF(" > number of parameters on this rank: %ld (model: %ld layers, hidden %ld)", (long)model_->num_parameters(),
              (long)a_.num_layers, (long)a_.hidden_size);
  ZLM_LOG_INF(" > ZeRO stage %d over %d data-parallel rank%s, CPU offload %s%s; memory plan per rank (device | CPU):", cfg_.zero.number(),
              g.dp_size(), g.dp_size() > 1 ? "s" : "", cfg_.zero.offload_optimizer ? "on" : "off",
              cfg_.zero.offload_parameters ? " (parameters too)" : "");
  for (int r = 0; r < W; ++r) {
    if (W > 8 && r != 0 && r != W - 1) continue;  // large worlds: the first and the last rank
    ZLM_LOG_INF("     rank %d: %ld parameters; parameters %s | %s, gradients %s | %s, optimizer states %s | %s, activations held ~%s", r,
                (long)field(r, 2), human_bytes(field(r, 3)).c_str(), human_bytes(field(r, 4)).c_str(), human_bytes(field(r, 5)).c_str(),
                human_bytes(field(r, 6)).c_str(), human_bytes(field(r, 7)).c_str(), human_bytes(field(r, 8)).c_str(),
                human_bytes(field(r, 9)).c_str());
  }
  if (g.pp_size() > 1)
    ZLM_LOG_INF("     (pipeline: the first stage holds up to %ld micro-batches' activations, the last %ld)", (long)schedule_->max_in_flight(micro_),
                (long)std::min<int64_t>(1, micro_));
  if (!metrics_) return;
  auto per_rank = [&](int f) {
    std::vector<int64_t> v(static_cast<size_t>(W));
    for (int r = 0; r < W; ++r) v[static_cast<size_t>(r)] = field(r, f);
    return json_array(v);
  };
  JsonObject m;
  m.add("zero_stage", cfg_.zero.number()).add("world_size", W).add("tensor_parallel", g.tp_size()).add("pipeline_parallel", g.pp_size());
  m.add("data_parallel", g.dp_size()).add("cpu_offload", cfg_.zero.offload_optimizer);
  m.add("params_device", plan.params_device).add("params_host", plan.params_host).add("grads_device", plan.grads_device);
  m.add("grads_host", plan.grads_host).add("optim_device", plan.optim_device).add("optim_host", plan.optim_host);
  m.add("parameters", engine_->unpadded_numel()).add("padded_parameters", engine_->padded_numel());
  m.add("optimizer_state_bytes_unsharded", unsharded).add("optimizer_state_bytes_padded", engine_->optimizer_state_bytes_full(true));
  m.add_raw("optimizer_state_bytes_per_rank", per_rank(0)).add_raw("resident_parameter_bytes_per_rank", per_rank(1));
  m.add_raw("parameters_per_rank", per_rank(2)).add_raw("activation_bytes_per_rank", per_rank(9));
  *metrics_ << JsonObject().add_raw("memory_plan", m.str()).str() << std::endl;
  check_metrics();
}

// What the schedule runs for micro-batch m: the first stage reads its tokens,
// the last its labels; Megatron's data-parallel sampler gives micro-step m of
// a global batch the samples [m * mbs * DP + dp_rank * mbs, + mbs).
StageFns Trainer::stage_fns(const SampleSource& src, int64_t consumed, double loss_grad_scale) {
  StageFns f;
  const int64_t mbs = a_.micro_batch_size, dp = grid_->dp_size(), dp_rank = grid_->dp_rank();
  const bool first = grid_->first_stage(), last = grid_->last_stage();
  const size_t chunks = model_->num_chunks();
  f.forward = [=, this, &src](size_t v, int64_t m, const torch::Tensor& input) {
    const bool reads_tokens = first && v == 0, reads_labels = last && v + 1 == chunks;
    torch::Tensor tokens, labels;
    if (reads_tokens || reads_labels) std::tie(tokens, labels) = batch(src, consumed + m * mbs * dp + dp_rank * mbs, mbs, a_.seq_length, pl_.device);
    return model_->forward_chunk(v, reads_tokens ? tokens : input, reads_labels ? labels : torch::Tensor());
  };
  f.backward = [loss_grad_scale](const torch::Tensor& out, const torch::Tensor& grad) {
    if (grad.defined()) torch::autograd::backward({out}, {grad});
    else (out * loss_grad_scale).backward();
  };
  f.after_backward = [this](size_t v) { engine_->after_backward(v); };
  return f;
}

// [loss sum, micro-batches, stop votes], each summed over the ranks (every
// rank calls it), on the device and not read: the last stage's tensor-parallel
// rank 0 counts the loss, and each rank that received SIGTERM or SIGINT votes,
// so that all of them agree to stop after the same iteration.
torch::Tensor Trainer::loss_figures(const torch::Tensor& loss_sum, int64_t micro_batches, double vote) {
  const bool counts = world_->world() == 1 || (grid_->last_stage() && grid_->tp_rank() == 0);
  const auto dbl = torch::TensorOptions().dtype(torch::kDouble).device(pl_.device);
  auto t = torch::stack({counts ? loss_sum.to(dbl).reshape({}) : torch::zeros({}, dbl),
                         torch::full({}, counts ? static_cast<double>(micro_batches) : 0.0, dbl), torch::full({}, vote, dbl)});
  if (world_->world() > 1) world_->all_reduce_sum(t);
  return t;
}

// The mean over data-parallel ranks of a last-stage loss sum, read (every rank
// calls it); with `stop`, whether any rank is stopping (loss_figures).
double Trainer::mean_loss(const torch::Tensor& loss_sum, int64_t micro_batches, bool* stop) {
  const double vote = stop && g_stop_signal.load() != 0 ? 1.0 : 0.0;
  const torch::Tensor t = loss_figures(loss_sum, micro_batches, vote).cpu();
  if (stop) *stop = t[2].item<double>() > 0;
  return t[0].item<double>() / t[1].item<double>();
}

// Megatron's clipping factor min(1, clip / (norm + 1e-6)), in double on the
// norm's device: as std::min, 1 where the ratio is NaN; 1 without clipping.
torch::Tensor Trainer::clip_coefficient(const torch::Tensor& norm) const {
  const torch::Tensor one = torch::ones_like(norm);
  if (a_.clip_grad <= 0) return one;
  const torch::Tensor ratio = torch::full_like(norm, a_.clip_grad).div(norm + 1e-6);
  return torch::where(ratio.lt(1.0), ratio, one);
}

// Whether AdamW must leave this step out, on the device: an fp16 overflow
// (Megatron skips the update), or, with --check-for-nan-in-loss-and-grad, a
// NaN/inf norm or loss (the run then stops without the update). train_step
// reads the same conditions on the host afterwards.
torch::Tensor Trainer::skip_flag(const torch::Tensor& norm, const torch::Tensor& figures) const {
  const torch::Tensor bad_norm = norm.isfinite().logical_not();
  torch::Tensor flag = pl_.fp16 ? bad_norm : torch::zeros_like(bad_norm);
  if (a_.check_for_nan) flag = flag.logical_or(bad_norm).logical_or(figures[0].div(figures[1]).isfinite().logical_not());
  return flag;
}

// Whether any rank received SIGTERM or SIGINT (collective).
bool Trainer::any_rank_stopping() {
  const double vote = g_stop_signal.load() != 0 ? 1.0 : 0.0;
  if (world_->world() == 1) return vote > 0;
  auto t = torch::full({1}, vote, torch::kDouble).to(pl_.device);
  world_->all_reduce_sum(t);
  return t.cpu().item<double>() > 0;
}

// A per-rank figure summed over the other tensor and pipeline ranks.
double Trainer::model_parallel_sum(double v) {
  if (grid_->mp().world() == 1) return v;  // one rank: no copy to the device and back
  auto t = torch::full({1}, v, torch::kDouble).to(pl_.device);
  grid_->mp().all_reduce_sum(t);
  return t.cpu().item<double>();
}

void Trainer::train_step() {
  const double lr = megatron_lr(a_, st_.scheduler_samples);  // Megatron: the LR of the updates taken so far
  engine_->begin_step(micro_);
  const double loss_mult = pl_.fp16 ? scaler_.scale() : 1.0;
  // The loss sum stays on the device until the step's end: a read per
  // micro-batch would make the host wait for each backward.
  time_start("forward-backward");
  torch::Tensor loss_sum = schedule_->train(micro_, stage_fns(*train_src_, st_.consumed_train, loss_mult / static_cast<double>(micro_)));
  time_stop("forward-backward");
  // Mean over data-parallel ranks (the reduction sums) and the loss scale undone.
  time_start("all-grads-sync");
  engine_->reduce_grads(1.0 / (loss_mult * static_cast<double>(grid_->dp_size())));
  time_stop("all-grads-sync");
  if (Comm* emb = grid_->embedding()) {  // the tied embedding: first and last stage add their gradients
    time_start("embedding-grads-all-reduce");
    torch::Tensor g = engine_->reduced_grad("wte.weight");
    emb->all_reduce_sum(g);
    time_stop("embedding-grads-all-reduce");
  }
  time_start("optimizer");
  // The norm, the clipping factor and the skip flag stay on the device, and the
  // step is queued before the host reads anything: a read here would leave the
  // device idle while the host launches AdamW.
  time_start("optimizer-clip-main-grad");
  torch::Tensor sum_sq = engine_->grad_sum_of_squares_tensor();
  if (grid_->mp().world() > 1) grid_->mp().all_reduce_sum(sum_sq);  // the other tensor and pipeline ranks'
  const torch::Tensor norm = sum_sq.sqrt().reshape({});
  time_stop("optimizer-clip-main-grad");
  const torch::Tensor figures = loss_figures(loss_sum, micro_, g_stop_signal.load() != 0 ? 1.0 : 0.0);
  std::optional<double> zeros;  // counted before the step multiplies the gradients
  if (a_.log_num_zeros_in_grad) zeros = model_parallel_sum(engine_->grad_num_zeros());
  time_start("optimizer-inner-step");
  engine_->step(lr, clip_coefficient(norm), skip_flag(norm, figures));
  time_stop("optimizer-inner-step");
  const torch::Tensor host = torch::cat({norm.reshape({1}), figures}).cpu();  // the one read, behind the queued step
  const double grad_norm = host[0].item<double>(), loss_avg = host[1].item<double>() / host[2].item<double>();
  stop_ = host[3].item<double>() > 0;
  const bool found_inf = !std::isfinite(grad_norm);
  if (pl_.fp16) scaler_.update(found_inf);
  last_skipped_ = found_inf && pl_.fp16;
  // Megatron's --check-for-nan-in-loss-and-grad: a NaN/inf that is not an fp16
  // overflow (those are skipped) stops the run; skip_flag kept the update out,
  // so no NaN state is ever stepped into or saved.
  const bool nan_stop = a_.check_for_nan && !last_skipped_ && (!std::isfinite(grad_norm) || !std::isfinite(loss_avg));
  engine_->confirm_step(!last_skipped_ && !nan_stop);
  if (nan_stop)
    throw Error(ErrorKind::Format, "iteration %ld: the %s is %s; stopping before the update (the last checkpoint is unchanged) ---> HINT: "
                "a lower --lr, --clip-grad, or --bf16 instead of --fp16 (--no-check-for-nan-in-loss-and-grad trains on)",
                (long)st_.iteration + 1, std::isfinite(loss_avg) ? "gradient norm" : "loss",
                std::isnan(std::isfinite(loss_avg) ? grad_norm : loss_avg) ? "NaN" : "infinite");
  last_grad_norm_ = grad_norm;
  last_num_zeros_.reset();  // Megatron counts them on the steps taken only
  if (last_skipped_) {  // Megatron skips the update and counts it
    ++skipped_iters_;
    nan_iters_ += !std::isfinite(loss_avg);
  } else {
    last_num_zeros_ = zeros;
    interval_loss_ += loss_avg;
    ++interval_advanced_;
  }
  time_stop("optimizer");
  if (a_.log_params_norm) last_params_norm_ = std::sqrt(model_parallel_sum(engine_->param_sum_of_squares()));
  ++st_.iteration;
  st_.consumed_train += a_.global_batch_size;
  if (!last_skipped_) st_.scheduler_samples += a_.global_batch_size;  // Megatron steps its scheduler on updates only
  if (pl_.fp16) st_.loss_scale = scaler_.state();
  ++interval_iters_;
  if (tb_ && tb_->due(st_.iteration)) tensorboard_training(loss_avg, grad_norm);
}

// rank 0, every --tensorboard-log-interval: the step's scalars.
void Trainer::tensorboard_training(double loss_avg, double grad_norm) {
  TrainingScalars t{.iteration = st_.iteration, .consumed_samples = st_.consumed_train, .batch_size = a_.global_batch_size,
                    .world_size = world_->world(), .learning_rate = megatron_lr(a_, st_.scheduler_samples),
                    .loss_scale = pl_.fp16 ? scaler_.scale() : 1.0};
  t.loss = loss_avg;
  if (!last_skipped_) t.grad_norm = grad_norm;
  t.num_zeros = last_num_zeros_;
  t.params_norm = last_params_norm_;
  if (pl_.cuda) {
    const CudaMemoryNow m = cuda_memory_now(pl_.gpu);
    t.memory = TrainingScalars::Memory{m.reserved_bytes, m.allocated_bytes, m.allocated_count};
  }
  tb_->training(t);
}

// Collective: the checkpoint in --ckpt-format (DeepSpeed's needs the run's optimizer settings).
void Trainer::save() {
  const CheckpointFormat format = checkpoint_format(a_.ckpt_format);
  DeepSpeedRun ds;
  if (format != CheckpointFormat::kZerolm) {
    // The layout of the precision asked for, which DeepSpeed's engine (or Megatron's optimizer) of
    // that precision looks for, also where CPU training fell back to fp32 (the files hold fp32
    // master weights either way).
    ds = deepspeed_run(a_, st_, cfg_.zero.number(), a_.bf16);
    ds.fp16 = a_.fp16;
    ds.dynamic_loss_scale = a_.fp16 && a_.loss_scale <= 0;
    if (a_.fp16) ds.loss_scale = pl_.fp16 ? scaler_.scale() : a_.loss_scale > 0 ? a_.loss_scale : a_.initial_loss_scale;
    if (pl_.fp16) ds.loss_scale_growth = st_.loss_scale.growth_tracker, ds.hysteresis_left = st_.loss_scale.hysteresis_tracker;
  }
  save_checkpoint(a_.save, model_, *engine_, *grid_, rng_, st_, saves_++, format, &ds);
}

// rank 0: the interval's line of metrics.jsonl.
void Trainer::write_metrics(double avg, double lr_now, double secs, double tflops, const std::vector<PhaseMax>& phases) {
  const int64_t gbs = a_.global_batch_size;
  JsonObject m;
  m.add("iteration", st_.iteration).add("consumed_samples", st_.consumed_train);
  m.add("lm_loss", interval_advanced_ > 0 ? finite_or_null(avg) : std::nullopt).add("lr", lr_now);
  m.add("grad_norm", last_skipped_ ? std::nullopt : finite_or_null(last_grad_norm_));
  m.add("loss_scale", pl_.fp16 ? scaler_.scale() : 1.0).add("batch_size", gbs).add("world_size", world_->world());
  if (last_num_zeros_) m.add("num_zeros", finite_or_null(*last_num_zeros_));
  if (last_params_norm_) m.add("params_norm", finite_or_null(*last_params_norm_));
  m.add("skipped_iterations", skipped_iters_).add("seconds_per_iteration", secs).add("tflops_per_rank", finite_or_null(tflops));
  m.add("tokens_per_second", finite_or_null(static_cast<double>(gbs * a_.seq_length) / secs));
  m.add("peak_device_bytes", pl_.cuda ? cuda_peak_allocated(pl_.gpu) : int64_t{0});
  if (!phases.empty()) {
    JsonObject t;  // each phase's largest time across ranks, ms per iteration
    for (const PhaseMax& p : phases) t.add(p.name, p.max_ms);
    m.add_raw("timers_ms", t.str());
  }
  *metrics_ << m.str() << std::endl;
}

// Every rank's phase times of this interval (every rank calls it: they are exchanged).
std::vector<std::vector<PhaseTimes>> Trainer::gather_phase_times() {
  if (!timers_) return {};
  const std::string mine = encode_phase_times(timers_->take(interval_iters_));
  std::vector<std::vector<PhaseTimes>> all;
  for (const std::string& line : world_->exchange("phase-times/" + std::to_string(st_.iteration), mine)) all.push_back(decode_phase_times(line));
  return all;
}

void Trainer::log_progress() {
  const int64_t T = a_.total_iters(), gbs = a_.global_batch_size;
  const std::vector<std::vector<PhaseTimes>> phase_times = gather_phase_times();
  const std::vector<PhaseMax> phases = phase_maxima(phase_times);
  if (env_.rank == 0) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - interval_start_).count() /
                        static_cast<double>(interval_iters_);
    // Megatron: the loss averages the iterations that advanced and is left out
    // when there were none; the grad norm (of this iteration) only when it stepped.
    const double avg = interval_loss_ / static_cast<double>(std::max<int64_t>(1, interval_advanced_));
    if (interval_advanced_ > 0) last_logged_loss_ = avg;
    const double lr_now = megatron_lr(a_, st_.scheduler_samples);
    const double tflops = flops_per_iter_ / secs / 1e12 / world_->world();
    if (log_level() >= LogLevel::Inf)  // not with -q
      std::fprintf(stderr,
                 " iteration %8ld/%8ld | consumed samples: %12ld | consumed tokens: %12ld | elapsed time per iteration (s): %.2f | "
                 "learning rate: %.3E | global batch size: %5ld |%s%s%s%s%s number of skipped iterations: %3ld | "
                 "number of nan iterations: %3ld | samples per second: %.3f | TFLOPs: %.2f |\n",
                 (long)st_.iteration, (long)T, (long)st_.consumed_train, (long)(st_.consumed_train * a_.seq_length), secs, lr_now, (long)gbs,
                 interval_advanced_ > 0 ? strprintf(" lm loss: %.6E |", avg).c_str() : "",
                 pl_.fp16 ? strprintf(" loss scale: %.1f |", scaler_.scale()).c_str() : "",
                 last_skipped_ ? "" : strprintf(" grad norm: %.3f |", last_grad_norm_).c_str(),
                 last_num_zeros_ ? strprintf(" num zeros: %.1f |", *last_num_zeros_).c_str() : "",
                 last_params_norm_ ? strprintf(" params norm: %.3f |", *last_params_norm_).c_str() : "", (long)skipped_iters_, (long)nan_iters_,
                 static_cast<double>(gbs) / secs, tflops);
    if (!phases.empty() && log_level() >= LogLevel::Inf) std::fprintf(stderr, "%s\n", format_phase_times(phase_times, a_.timing_log_option).c_str());
    if (pl_.cuda && st_.iteration == a_.log_interval)  // Megatron reports memory once, after the first interval
      std::fprintf(stderr, "%s\n", cuda_memory_report(env_.rank, st_.iteration, pl_.gpu).c_str());
    if (metrics_) write_metrics(avg, lr_now, secs, tflops, phases);
    check_metrics();
    if (tb_) {
      tb_->iteration_time(st_.iteration, secs);
      tb_->phase_times(st_.iteration, phases);
      tb_->flush();
    }
  }
  total_skipped_ += skipped_iters_;
  iterations_run_ += interval_iters_;
  total_secs_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - interval_start_).count();
  skipped_iters_ = nan_iters_ = 0;
  interval_loss_ = 0;
  interval_iters_ = interval_advanced_ = 0;
  interval_start_ = std::chrono::steady_clock::now();
}

void Trainer::evaluate(const std::string& label, const SampleSource& src, int64_t* consumed) {
  if (src.empty() || a_.eval_iters == 0) return;
  engine_->sync();  // a delayed update in flight: evaluate the weights after it, as without one
  model_->eval();
  auto total = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(pl_.device));
  const int64_t start = *consumed;
  for (int64_t e = 0; e < a_.eval_iters; ++e) {
    // A stop signal ends a long validation at the next batch (a cluster's grace
    // period can be shorter than it), unreported and uncounted.
    if (any_rank_stopping()) {
      ZLM_LOG_INF(" > %s: validation stopped after %ld of %ld batches by a stop signal", label.c_str(), (long)e, (long)a_.eval_iters);
      *consumed = start;
      stop_ = true;
      model_->train();
      return;
    }
    total += schedule_->evaluate(micro_, stage_fns(src, *consumed, 1.0));
    *consumed += a_.global_batch_size;
  }
  model_->train();
  const double v = mean_loss(total, micro_ * a_.eval_iters);
  if (env_.rank != 0) return;
  char line[512];
  std::snprintf(line, sizeof line, " validation loss at %s | lm loss value: %.6E | lm loss PPL: %.6E | ", label.c_str(), v,
                std::exp(std::min(20.0, v)));
  if (log_level() >= LogLevel::Inf) std::fprintf(stderr, "%s\n%s\n%s\n", dashes(std::strlen(line) + 1).c_str(), line, dashes(std::strlen(line) + 1).c_str());
  const bool test = &src == test_src_.get();
  (test ? test_loss_ : last_valid_loss_) = v;
  if (metrics_)
    *metrics_ << JsonObject()
                     .add("iteration", st_.iteration)
                     .add("consumed_samples", st_.consumed_train)
                     .add("split", test ? "test" : "valid")
                     .add("lm_loss", finite_or_null(v))
                     .add("ppl", finite_or_null(std::exp(std::min(20.0, v))))
                     .str()
              << std::endl;
  check_metrics();
  if (tb_) {
    tb_->evaluation(test ? "test" : "validation", st_.iteration, st_.consumed_train, v);
    tb_->flush();
  }
}

int Trainer::run() {
  if (!a_.load.empty() && load_checkpoint(a_, model_, *engine_, *grid_, rng_, st_) && pl_.fp16 && st_.loss_scale.scale > 0) {
    // fp16 goes on from the saved loss scale, as Megatron's optimizer loads its grad scaler's state
    // (a fresh 2^32 would skip a dozen iterations again); a static --loss-scale keeps its own.
    scaler_.restore(st_.loss_scale);
    ZLM_LOG_INF(" > loss scale %.1f from the checkpoint", scaler_.scale());
  }
  const int64_t T = a_.total_iters(), first = st_.iteration;
  if (first >= T)
    ZLM_LOG_WRN("the checkpoint in --load %s is at iteration %ld, and %s asks for %ld: nothing to train (validation and test only; no "
                "checkpoint saved) ---> HINT: raise --train-iters/--train-samples to train on", a_.load.c_str(), (long)first,
                a_.train_iters > 0 ? "--train-iters" : "--train-samples", (long)T);
  model_->train();
  interval_start_ = std::chrono::steady_clock::now();
  int64_t valid_consumed = st_.consumed_valid;
  const bool saving = !a_.save.empty();
  install_stop_handler();
  while (st_.iteration < T) {
    profiler_->before_step(st_.iteration);
    train_step();
    profiler_->after_step(st_.iteration);
    if (st_.iteration % a_.log_interval == 0 || st_.iteration == T || stop_) log_progress();
    if (stop_) stop_on_signal();
    if (st_.iteration % a_.eval_interval == 0 && !valid_src_->empty()) {
      evaluate("iteration " + std::to_string(st_.iteration), *valid_src_, &valid_consumed);
      st_.consumed_valid = valid_consumed;
      if (stop_) stop_on_signal();
    }
    const bool saved_now = saving && a_.save_interval > 0 && st_.iteration % a_.save_interval == 0;
    if (saved_now) save();
    if (a_.exit_interval > 0 && st_.iteration % a_.exit_interval == 0) {
      if (saving && !saved_now) save();
      ZLM_LOG_INF("exiting program at iteration %ld", (long)st_.iteration);
      finish();
      return 0;
    }
  }
  profiler_->finish();  // a range past the last iteration ends with it, before validation
  // Megatron's last save, never of an iteration this run did not train (iteration 0 included).
  const bool final_save = saving && st_.iteration > first && (a_.save_interval == 0 || st_.iteration % a_.save_interval != 0);
  if (final_save) save();
  evaluate("the end of training for val data", *valid_src_, &valid_consumed);
  int64_t test_consumed = 0;
  if (!stop_) evaluate("the end of training for test data", *test_src_, &test_consumed);
  if (stop_) stop_on_signal(/*saved=*/saving);  // the last iteration's checkpoint is already written (or was loaded)
  finish();
  return 0;
}

// Every way out of run(): the summary, the logs closed, the ranks released.
void Trainer::finish() {
  if (profiler_) profiler_->finish();
  summary();
  if (tb_) tb_->close();
  if (metrics_) metrics_->flush();
  world_->shutdown();
  save_lock_.reset();  // also on the std::exit() of a stop signal, which runs no destructor
}

void Trainer::summary() {
  if (env_.rank != 0) return;
  Stats stats("pretrain_gpt");
  stats.set("iteration", st_.iteration);
  stats.set("iterations_run", iterations_run_);
  stats.set("consumed_samples", st_.consumed_train);
  stats.set("consumed_tokens", st_.consumed_train * a_.seq_length);
  stats.set("skipped_iterations", total_skipped_);
  if (std::isfinite(last_logged_loss_)) stats.set("lm_loss_last_interval", last_logged_loss_);
  if (last_valid_loss_) stats.set("lm_loss_validation", *last_valid_loss_);
  if (test_loss_) stats.set("lm_loss_test", *test_loss_);
  stats.set("world_size", static_cast<int64_t>(world_->world()));
  stats.set("train_sec", total_secs_);
  if (total_secs_ > 0) stats.set("tokens_per_sec", static_cast<double>(iterations_run_ * a_.global_batch_size * a_.seq_length) / total_secs_);
  if (log_level() >= LogLevel::Inf) stats.print_table();
  if (!a_.stats_out.empty()) stats.write_json(a_.stats_out);
}

// All ranks agreed to stop after this iteration (a rank received SIGTERM or
// SIGINT). With --exit-signal-handler (Megatron's flag) a checkpoint is saved
// and the run exits 0; without, the logs are flushed and closed and the process
// ends by the signal's default action, as it would have without this handler.
void Trainer::stop_on_signal(bool saved) {
  const int sig = g_stop_signal.load() != 0 ? g_stop_signal.load() : SIGTERM;  // a rank that only heard of it from another
  const bool save_now = a_.exit_signal_handler && !a_.save.empty() && !saved;
  if (save_now) save();
  finish();
  if (a_.exit_signal_handler) {
    ZLM_LOG_INF("exiting program after receiving %s at iteration %ld%s", sig == SIGINT ? "SIGINT" : "SIGTERM", (long)st_.iteration,
                save_now ? " (checkpoint saved)" : saved ? " (its checkpoint was saved before)" : " (no --save: nothing saved)");
    std::exit(0);
  }
  ZLM_LOG_WRN("stopping after iteration %ld on %s; logs flushed, no checkpoint saved ---> HINT: --exit-signal-handler saves one first",
              (long)st_.iteration, sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
  std::_Exit(128 + sig);
}

}  // namespace

int train(const TrainConfig& cfg, const DistEnv& env) {
  Trainer t(cfg, env);
  return t.run();
}

}  // namespace zlm::trainer
