#include "trainer/trainer.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <tuple>
#include <memory>

#include "common/error.h"
#include "common/log.h"
#include "common/output_file.h"
#include "formats/gpt_dataset.h"
#include "trainer/gpt2_model.h"
#include "trainer/comm.h"
#include "trainer/deepspeed_config.h"
#include "trainer/device_memory.h"
#include "trainer/dist_env.h"
#include "trainer/loss_scaler.h"
#include "trainer/zero.h"

namespace zlm::trainer {

namespace fs = std::filesystem;
using formats::GptIndex;
using formats::MegatronReader;

namespace {

// The vocabulary size (entries of vocab.json) and the id of <|endoftext|>,
// read without a JSON library (the trainer builds where simdjson is absent).
std::pair<int64_t, int64_t> read_vocab(const std::string& path) {
  std::string s = read_file(path);
  int64_t entries = 0, eod = -1;
  int depth = 0;
  bool in_string = false;
  std::string current;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\' && i + 1 < s.size()) {
        current.push_back(s[++i]);
      } else if (c == '"') {
        in_string = false;
      } else {
        current.push_back(c);
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      current.clear();
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      --depth;
    } else if (c == ':' && depth == 1) {
      ++entries;
      if (current == "<|endoftext|>") eod = std::strtoll(s.c_str() + i + 1, nullptr, 10);
    }
  }
  if (entries == 0) throw Error(ErrorKind::Format, "%s: no entries (not a GPT-2 vocab.json?)", path.c_str());
  return {entries, eod};
}

// Samples of one split: one dataset, or a blend of several (§5.12).
class SampleSource {
 public:
  SampleSource(const std::vector<std::unique_ptr<MegatronReader>>& readers, const std::vector<double>& weights,
               const std::string& split, int split_index, int64_t num_samples, int64_t seq_length, uint32_t seed,
               const std::string& cache_dir)
      : readers_(readers) {
    if (num_samples <= 0) return;
    std::vector<int64_t> targets = readers.size() == 1 ? std::vector<int64_t>{num_samples}
                                                       : formats::blend_targets_legacy(num_samples, weights);
    for (size_t d = 0; d < readers.size(); ++d) {
      auto ranges = formats::split_ranges_legacy(split, static_cast<int64_t>(readers[d]->num_sequences()));
      if (ranges[split_index].size() <= 0) {
        indexes_.emplace_back();
        continue;
      }
      static const char* kNames[3] = {"train", "valid", "test"};
      bool loaded = false;
      std::string why;
      indexes_.push_back(std::make_unique<GptIndex>(formats::build_gpt_index_cached(
          *readers[d], ranges[split_index], kNames[split_index], targets[d], seq_length, seed, &loaded, &why, cache_dir)));
      if (loaded) ZLM_LOG_INF(" > loaded %s index cache of %s", kNames[split_index], readers[d]->prefix().c_str());
      if (!why.empty()) ZLM_LOG_WRN("could not write the %s index cache (%s); continuing without it", kNames[split_index], why.c_str());
    }
    if (readers.size() > 1) {
      int64_t total = 0;
      for (const auto& ix : indexes_) total += ix ? ix->num_samples() : 0;
      blend_ = formats::build_blend_index(weights, total);
    }
  }
  bool empty() const {
    for (const auto& ix : indexes_)
      if (ix && ix->num_samples() > 0) return false;
    return true;
  }
  int64_t size() const {
    if (readers_.size() > 1) return static_cast<int64_t>(blend_.dataset.size());
    return indexes_.empty() || !indexes_[0] ? 0 : indexes_[0]->num_samples();
  }
  std::vector<int64_t> sample(int64_t i) const {
    size_t d = 0;
    int64_t j = i % std::max<int64_t>(1, size());  // wrap around like another epoch of the shuffled index
    if (readers_.size() > 1) {
      d = blend_.dataset[static_cast<size_t>(j)];
      j = blend_.dataset_sample[static_cast<size_t>(j)] % indexes_[d]->num_samples();
    }
    return formats::gpt_sample(*readers_[d], *indexes_[d], j);
  }

 private:
  const std::vector<std::unique_ptr<MegatronReader>>& readers_;
  std::vector<std::unique_ptr<GptIndex>> indexes_;
  formats::BlendIndex blend_;
};

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

struct RunState {
  int64_t iteration = 0, consumed_train = 0, consumed_valid = 0;
};

// Full tensors by dotted name ("blocks.0.ln1.weight") into nested archives,
// the layout torch::nn::Module::save writes, so Module::load reads it back.
void write_nested(torch::serialize::OutputArchive& ar, const std::map<std::string, torch::Tensor>& m) {
  std::map<std::string, std::map<std::string, torch::Tensor>> children;
  for (const auto& [k, v] : m) {
    auto dot = k.find('.');
    if (dot == std::string::npos) ar.write(k, v);
    else children[k.substr(0, dot)][k.substr(dot + 1)] = v;
  }
  for (const auto& [c, sub] : children) {
    torch::serialize::OutputArchive child;
    write_nested(child, sub);
    ar.write(c, child);
  }
}

void read_nested(torch::serialize::InputArchive& ar, const std::vector<std::string>& names, const std::string& prefix,
                 std::map<std::string, torch::Tensor>& out) {
  std::map<std::string, std::vector<std::string>> children;
  for (const auto& n : names) {
    auto dot = n.find('.');
    if (dot == std::string::npos) {
      torch::Tensor t;
      ar.read(n, t);
      out[prefix + n] = t;
    } else {
      children[n.substr(0, dot)].push_back(n.substr(dot + 1));
    }
  }
  for (const auto& [c, sub] : children) {
    torch::serialize::InputArchive child;
    ar.read(c, child);
    read_nested(child, sub, prefix + c + ".", out);
  }
}

std::vector<std::string> parameter_names(const Gpt2& model) {
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) names.push_back(item.key());
  return names;
}

// Collective: every rank calls it; rank 0 writes. The file holds full tensors
// (weights, Adam moments), whatever the world size and ZeRO stage were.
void save_checkpoint(const TrainArgs& a, Gpt2& model, ZeroEngine& engine, Comm& comm, const RunState& st) {
  ZeroEngine::FullState full = engine.gather_state();
  if (comm.rank() != 0) {
    comm.barrier();
    return;
  }
  fs::create_directories(a.save);
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07ld", static_cast<long>(st.iteration));
  fs::path final_dir = fs::path(a.save) / name;
  fs::path tmp_dir = fs::path(a.save) / (std::string(name) + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir / "mp_rank_00");
  ZLM_LOG_INF("saving checkpoint at iteration %7ld to %s", (long)st.iteration, a.save.c_str());
  torch::serialize::OutputArchive archive, model_archive, opt_archive, m_archive, v_archive;
  write_nested(model_archive, full.params);
  write_nested(m_archive, full.exp_avg);
  write_nested(v_archive, full.exp_avg_sq);
  opt_archive.write("exp_avg", m_archive);
  opt_archive.write("exp_avg_sq", v_archive);
  opt_archive.write("step", torch::tensor(full.step));
  archive.write("model", model_archive);
  archive.write("optimizer", opt_archive);
  archive.write("iteration", torch::tensor(st.iteration));
  archive.write("consumed_train_samples", torch::tensor(st.consumed_train));
  archive.write("consumed_valid_samples", torch::tensor(st.consumed_valid));
  archive.write("checkpoint_version", torch::tensor(3.0));
  archive.write("world_size", torch::tensor(static_cast<int64_t>(comm.world())));
  const Gpt2Config& c = model->config();
  archive.write("config", torch::tensor({c.vocab_size, c.max_positions, c.num_layers, c.hidden, c.heads}));
  archive.write("rng_cpu", at::globalContext().defaultGenerator(torch::kCPU).get_state());
  archive.save_to((tmp_dir / "mp_rank_00" / "model_optim_rng.pt").string());
  // Complete directory first, then the tracker: a crash never points at a partial checkpoint.
  fs::remove_all(final_dir);
  fs::rename(tmp_dir, final_dir);
  write_file_atomic((fs::path(a.save) / "latest_checkpointed_iteration.txt").string(), std::to_string(st.iteration));
  ZLM_LOG_INF("  successfully saved checkpoint at iteration %7ld to %s", (long)st.iteration, a.save.c_str());
  comm.barrier();
}

// Path of the checkpoint file the tracker of `dir` points at.
std::string checkpoint_file(const std::string& dir, int64_t* iteration) {
  fs::path tracker = fs::path(dir) / "latest_checkpointed_iteration.txt";
  if (!fs::exists(tracker)) throw Error(ErrorKind::Usage, "%s: no checkpoint (missing %s)", dir.c_str(), tracker.string().c_str());
  std::string text = read_file(tracker.string());
  char* end = nullptr;
  long it = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || (end && *end != '\0' && *end != '\n') || it < 0)
    throw Error(ErrorKind::Format, "%s: '%s' is not an iteration number", tracker.string().c_str(), text.c_str());
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07ld", it);
  *iteration = it;
  return (fs::path(dir) / name / "mp_rank_00" / "model_optim_rng.pt").string();
}

// Every rank reads the same file and takes its own shard (any saved world size).
bool load_checkpoint(const TrainArgs& a, Gpt2& model, ZeroEngine& engine, RunState& st) {
  fs::path tracker = fs::path(a.load) / "latest_checkpointed_iteration.txt";
  if (!fs::exists(tracker)) {
    // Megatron starts from scratch here, which the tutorial's "--save X --load X"
    // relies on for its first run; a --load elsewhere means resuming a run
    // that is not there, which is an error.
    std::error_code ec;
    if (a.save.empty() || !(a.load == a.save || fs::equivalent(a.load, a.save, ec)))
      throw Error(ErrorKind::Usage, "--load %s: no checkpoint there (missing %s)", a.load.c_str(), tracker.string().c_str());
    ZLM_LOG_WRN("WARNING: could not find the metadata file %s; will not load any checkpoints and will start from random",
                tracker.string().c_str());
    return false;
  }
  int64_t it = 0;
  fs::path file = checkpoint_file(a.load, &it);
  int64_t saved_world = 0;
  try {
    torch::serialize::InputArchive archive, model_archive, opt_archive, m_archive, v_archive;
    archive.load_from(file.string());
    auto read = [&](torch::serialize::InputArchive& ar, const char* key) {  // a fresh tensor per key: read() resizes a defined one
      torch::Tensor t;
      ar.read(key, t);
      return t;
    };
    torch::Tensor cfg = read(archive, "config");
    const Gpt2Config& c = model->config();
    auto v = cfg.accessor<int64_t, 1>();
    if (v[0] != c.vocab_size || v[2] != c.num_layers || v[3] != c.hidden || v[4] != c.heads)
      throw Error(ErrorKind::Usage, "%s: checkpoint of a model with %ld layers, hidden %ld, %ld heads, vocab %ld; this run has %ld, %ld, %ld, %ld",
                  file.string().c_str(), (long)v[2], (long)v[3], (long)v[4], (long)v[0], (long)c.num_layers, (long)c.hidden,
                  (long)c.heads, (long)c.vocab_size);
    ZeroEngine::FullState full;
    const auto names = parameter_names(model);
    archive.read("model", model_archive);
    read_nested(model_archive, names, "", full.params);
    archive.read("optimizer", opt_archive);
    opt_archive.read("exp_avg", m_archive);
    opt_archive.read("exp_avg_sq", v_archive);
    read_nested(m_archive, names, "", full.exp_avg);
    read_nested(v_archive, names, "", full.exp_avg_sq);
    full.step = read(opt_archive, "step").item<int64_t>();
    engine.load_state(full);
    st.iteration = read(archive, "iteration").item<int64_t>();
    st.consumed_train = read(archive, "consumed_train_samples").item<int64_t>();
    st.consumed_valid = read(archive, "consumed_valid_samples").item<int64_t>();
    torch::Tensor w;
    if (archive.try_read("world_size", w)) saved_world = w.item<int64_t>();
    at::Generator gen = at::globalContext().defaultGenerator(torch::kCPU);  // a handle to the global generator
    gen.set_state(read(archive, "rng_cpu"));
  } catch (const c10::Error& e) {
    throw Error(ErrorKind::Format, "%s: cannot load the checkpoint (%s) ---> HINT: it is damaged or from another model shape",
                file.string().c_str(), e.what_without_backtrace());
  }
  ZLM_LOG_INF(" loading checkpoint from %s at iteration %ld (saved by %ld ranks)", a.load.c_str(), (long)it, (long)saved_world);
  return true;
}

}  // namespace

Gpt2 load_model(const std::string& dir, int64_t* iteration) {
  std::string file = checkpoint_file(dir, iteration);
  try {
    torch::serialize::InputArchive archive, model_archive;
    archive.load_from(file);
    torch::Tensor cfg;
    archive.read("config", cfg);
    auto v = cfg.accessor<int64_t, 1>();
    Gpt2Config c{.vocab_size = v[0], .max_positions = v[1], .num_layers = v[2], .hidden = v[3], .heads = v[4],
                 .hidden_dropout = 0, .attention_dropout = 0};
    Gpt2 model(c);
    archive.read("model", model_archive);
    model->load(model_archive);
    model->eval();
    return model;
  } catch (const c10::Error& e) {
    throw Error(ErrorKind::Format, "%s: cannot load the checkpoint (%s)", file.c_str(), e.what_without_backtrace());
  }
}

namespace {

// A number for metrics.jsonl: null where it is not finite (JSON has no NaN).
std::string json_number(double v) { return std::isfinite(v) ? strprintf("%.9g", v) : "null"; }

// What must be equal on every rank; a difference is refused at start.
std::string run_fingerprint(const TrainArgs& a, int64_t padded_vocab, const ZeroConfig& z, const std::string& precision) {
  return strprintf("num-layers=%ld hidden-size=%ld num-attention-heads=%ld seq-length=%ld max-position-embeddings=%ld vocab=%ld "
                   "micro-batch-size=%ld global-batch-size=%ld train-iters=%ld zero-stage=%d cpu-offload=%d offload-params=%d "
                   "precision=%s seed=%u lr=%g",
                   (long)a.num_layers, (long)a.hidden_size, (long)a.num_attention_heads, (long)a.seq_length,
                   (long)a.max_position_embeddings, (long)padded_vocab, (long)a.micro_batch_size, (long)a.global_batch_size,
                   (long)a.total_iters(), z.stage, (int)z.offload_optimizer, (int)z.offload_params, precision.c_str(), a.seed, a.lr);
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
    throw Error(ErrorKind::Usage, "rank %d was started with different model or ZeRO settings than rank 0:%s; every rank must get the same flags",
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

}  // namespace

int train(const TrainArgs& args) {
  const DistEnv env = dist_env_from_process();
  TrainArgs a = args;
  DeepSpeedSettings ds;
  if (a.deepspeed) {  // DeepSpeed's JSON decides ZeRO, precision and batch sizes, as under the deepspeed launcher
    if (a.deepspeed_config.empty()) throw Error(ErrorKind::Usage, "--deepspeed needs --deepspeed_config FILE");
    ds = apply_deepspeed_config(a, a.deepspeed_config, env.world_size);
  }
  if (a.local_rank_flag >= 0 && a.local_rank_flag != env.local_rank)
    throw Error(ErrorKind::Usage, "--local_rank %ld disagrees with LOCAL_RANK=%d", (long)a.local_rank_flag, env.local_rank);
  if (env.rank != 0 && log_level() >= LogLevel::Inf) log_set_level(LogLevel::Wrn);  // rank 0 speaks for the job
  if (a.deepspeed) {
    ZLM_LOG_INF(" > DeepSpeed config %s: ZeRO stage %ld, CPU offload %s, micro batch %ld, global batch %ld%s", a.deepspeed_config.c_str(),
                (long)a.zero_stage, a.cpu_offload ? (a.offload_params ? "optimizer + parameters" : "optimizer") : "off",
                (long)a.micro_batch_size, (long)a.global_batch_size, a.fp16 ? ", fp16" : a.bf16 ? ", bf16" : "");
    for (const auto& n : ds.notes) ZLM_LOG_INF("   note: %s", n.c_str());
  }
  torch::manual_seed(a.seed);
  // Device and precision.
  bool cuda = a.device == "cuda" || (a.device == "auto" && torch::cuda::is_available());
  if (a.device == "cuda" && !torch::cuda::is_available()) throw Error(ErrorKind::Usage, "--device cuda: no CUDA device is visible");
  // GPU of this rank: LOCAL_RANK, or GPU 0 when the launcher gave each rank
  // only its own GPU (Slurm's --gpus-per-task, CUDA_VISIBLE_DEVICES per rank).
  int gpu = 0;
  if (cuda) {
    const int visible = static_cast<int>(torch::cuda::device_count());
    gpu = env.local_rank < visible ? env.local_rank : 0;
    if (env.local_rank >= visible && visible > 1)
      throw Error(ErrorKind::Usage, "local rank %d but only %d GPUs are visible to it", env.local_rank, visible);
  }
  torch::Device device = cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(gpu)) : torch::Device(torch::kCPU);
  std::string backend = a.distributed_backend;
  if (!cuda && backend == "nccl") {
    if (env.rank == 0) ZLM_LOG_WRN("--distributed-backend nccl needs a GPU; training on CPU with gloo");
    backend = "gloo";
  }
  // Mixed precision is autocast (fp32 master weights and Adam). On CPU, where
  // half-precision matrix products are mostly emulated (70x slower than fp32
  // on CPUs without AVX512-BF16/AMX), --fp16/--bf16 fall back to fp32 unless
  // ZLM_CPU_AUTOCAST=1, which the tests use to run the GPU's mixed-precision
  // code paths (loss scaling, recomputation under autocast, its weight cache).
  const char* cpu_autocast_env = std::getenv("ZLM_CPU_AUTOCAST");
  const bool mixed_ok = cuda || (cpu_autocast_env && std::string(cpu_autocast_env) == "1");
  const c10::DeviceType autocast_device = cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  if (env.rank == 0 && (a.fp16 || a.bf16)) {
    if (!mixed_ok) ZLM_LOG_WRN("--%s on CPU: training in fp32 (ZLM_CPU_AUTOCAST=1 forces CPU autocast)", a.fp16 ? "fp16" : "bf16");
    else if (!cuda) ZLM_LOG_WRN("--%s on CPU: CPU autocast (ZLM_CPU_AUTOCAST=1)", a.fp16 ? "fp16" : "bf16");
  }
  const bool fp16 = mixed_ok && a.fp16, bf16 = mixed_ok && a.bf16;
  if (fp16 || bf16) {  // autocast for every forward pass; fp16 also gets Megatron's loss scaling below
    at::autocast::set_autocast_dtype(autocast_device, fp16 ? at::kHalf : at::kBFloat16);
    at::autocast::set_autocast_enabled(autocast_device, true);
  }
  LossScaler scaler(a.loss_scale > 0 ? a.loss_scale : a.initial_loss_scale, a.min_loss_scale, a.loss_scale_window, a.hysteresis,
                    a.loss_scale <= 0);
  int64_t skipped_iters = 0, nan_iters = 0;
  const bool autocast = fp16 || bf16;
  // Autocast caches the low-precision copy of each weight; the cache is cleared
  // every iteration (the optimizer changes the weights). ZeRO-3 turns it off:
  // cached copies of every block would keep the gathered parameters alive.
  if (autocast && a.zero_stage == 3) at::autocast::set_autocast_cache_enabled(false);
  const int W = env.world_size;
  if (a.global_batch_size % (a.micro_batch_size * W) != 0)
    throw Error(ErrorKind::Usage, "--global-batch-size %ld is not a multiple of --micro-batch-size %ld times the data-parallel size %d",
                (long)a.global_batch_size, (long)a.micro_batch_size, W);

  auto [vocab_entries, eod] = read_vocab(a.vocab_file);
  int64_t padded = (vocab_entries + a.make_vocab_size_divisible_by - 1) / a.make_vocab_size_divisible_by * a.make_vocab_size_divisible_by;
  ZLM_LOG_INF(" > padded vocab (size: %ld) with %ld dummy tokens (new size: %ld)", (long)vocab_entries,
              (long)(padded - vocab_entries), (long)padded);

  ZeroConfig zcfg{.stage = static_cast<int>(a.zero_stage), .offload_optimizer = a.cpu_offload, .offload_params = a.offload_params,
                  .beta1 = a.adam_beta1, .beta2 = a.adam_beta2, .eps = a.adam_eps, .weight_decay = a.weight_decay};
  if (ds.offload_chunk > 0) zcfg.offload_chunk = ds.offload_chunk;
  // Ranks meet before anything else, so that different settings are refused before they can deadlock.
  auto comm = make_comm(env, backend, cuda ? gpu : -1, std::chrono::milliseconds(static_cast<int64_t>(a.distributed_timeout_minutes * 60000)));
  if (W > 1)
    ZLM_LOG_INF(" > initialized data parallel with size %d (%s backend, launched by %s, rendezvous %s:%d)", W, comm->backend().c_str(),
                env.launcher.c_str(), env.master_addr.c_str(), env.master_port);
  check_same_settings(*comm, run_fingerprint(a, padded, zcfg, fp16 ? "fp16" : bf16 ? "bf16" : "fp32"));

  // Data: every prefix, three splits.
  std::vector<std::unique_ptr<MegatronReader>> readers;
  std::vector<double> raw_weights;
  for (const auto& [w, prefix] : a.data_path) {
    readers.push_back(std::make_unique<MegatronReader>(prefix));
    raw_weights.push_back(w);
  }
  std::vector<double> weights = formats::normalize_blend_weights(raw_weights);
  ZLM_LOG_INF(" > datasets target sizes (minimum size):");
  ZLM_LOG_INF("    train:      %ld", (long)a.train_samples_total());
  ZLM_LOG_INF("    validation: %ld", (long)a.valid_samples());
  ZLM_LOG_INF("    test:       %ld", (long)a.test_samples());
  // Rank 0 builds (and caches) the indices first; the others then load the cache.
  const std::string& cache_dir = a.data_cache_path;
  auto build_sources = [&] {
    return std::make_tuple(std::make_unique<SampleSource>(readers, weights, a.split, 0, a.train_samples_total(), a.seq_length, a.seed, cache_dir),
                           std::make_unique<SampleSource>(readers, weights, a.split, 1, a.valid_samples(), a.seq_length, a.seed, cache_dir),
                           std::make_unique<SampleSource>(readers, weights, a.split, 2, a.test_samples(), a.seq_length, a.seed, cache_dir));
  };
  std::unique_ptr<SampleSource> train_p, valid_p, test_p;
  if (env.rank == 0) std::tie(train_p, valid_p, test_p) = build_sources();
  comm->barrier();
  if (env.rank != 0) std::tie(train_p, valid_p, test_p) = build_sources();
  const SampleSource &train_src = *train_p, &valid_src = *valid_p, &test_src = *test_p;
  if (train_src.empty()) throw Error(ErrorKind::Usage, "--split '%s' leaves no training documents", a.split.c_str());

  Gpt2Config cfg{.vocab_size = padded, .max_positions = a.max_position_embeddings, .num_layers = a.num_layers,
                 .hidden = a.hidden_size, .heads = a.num_attention_heads, .init_std = a.init_method_std,
                 .hidden_dropout = a.hidden_dropout, .attention_dropout = a.attention_dropout,
                 .checkpoint_activations = a.checkpoint_activations};
  Gpt2 model(cfg);  // same seed on every rank: the same initial weights
  model->to(device);
  const int64_t params = model->num_parameters();
  ZeroEngine engine(model, *comm, zcfg, device);
  ZLM_LOG_INF(" > number of parameters: %ld", (long)params);
  std::unique_ptr<std::ofstream> metrics;  // rank 0 writes every metric as a JSON line
  std::string metrics_path = !a.metrics_out.empty() ? a.metrics_out : (!a.save.empty() ? (fs::path(a.save) / "metrics.jsonl").string() : "");
  if (!metrics_path.empty() && env.rank == 0) {
    if (fs::path(metrics_path).has_parent_path()) fs::create_directories(fs::path(metrics_path).parent_path());
    metrics = std::make_unique<std::ofstream>(metrics_path, std::ios::app);
  }
  {
    MemoryPlan plan = engine.plan();
    // Counted from each rank's tensors: optimizer states and the parameters it keeps between uses.
    auto mine = torch::tensor({engine.optimizer_state_bytes(), engine.resident_parameter_bytes()}, torch::kLong).to(device);
    auto all = torch::zeros({2 * W}, torch::kLong).to(device);
    comm->all_gather(all, mine);
    all = all.cpu();
    const int64_t unsharded = engine.optimizer_state_bytes_full(false);
    ZLM_LOG_INF(" > ZeRO stage %ld on %d rank%s, CPU offload %s%s; memory plan per rank:", (long)a.zero_stage, W, W > 1 ? "s" : "",
                a.cpu_offload ? "on" : "off", a.offload_params ? " (parameters too)" : "");
    auto line = [&](const char* what, int64_t on_device, int64_t on_host, const char* extra) {
      ZLM_LOG_INF("     %-24s %10s on %s (%ld B), %10s in CPU memory (%ld B)%s", what, human_bytes(on_device).c_str(), device.str().c_str(),
                  (long)on_device, human_bytes(on_host).c_str(), (long)on_host, extra);
    };
    line("parameters (fp32):", plan.params_device, plan.params_host, "");
    line("gradients (fp32):", plan.grads_device, plan.grads_host, "");
    std::string optim_extra = strprintf("; Adam moments%s, unsharded %s", unsharded > engine.unpadded_numel() * 8 ? " + master weights" : "",
                                        human_bytes(unsharded).c_str());
    line("optimizer states (fp32):", plan.optim_device, plan.optim_host, optim_extra.c_str());
    if (metrics) {
      std::string per_rank, params_per_rank;
      for (int r = 0; r < W; ++r) {
        per_rank += (r ? ", " : "") + std::to_string(all[2 * r].item<int64_t>());
        params_per_rank += (r ? ", " : "") + std::to_string(all[2 * r + 1].item<int64_t>());
      }
      *metrics << "{\"memory_plan\": {\"zero_stage\": " << a.zero_stage << ", \"world_size\": " << W
               << ", \"cpu_offload\": " << (a.cpu_offload ? "true" : "false")
               << ", \"params_device\": " << plan.params_device << ", \"params_host\": " << plan.params_host
               << ", \"grads_device\": " << plan.grads_device << ", \"grads_host\": " << plan.grads_host
               << ", \"optim_device\": " << plan.optim_device << ", \"optim_host\": " << plan.optim_host
               << ", \"parameters\": " << engine.unpadded_numel() << ", \"padded_parameters\": " << engine.padded_numel()
               << ", \"optimizer_state_bytes_unsharded\": " << unsharded
               << ", \"optimizer_state_bytes_padded\": " << engine.optimizer_state_bytes_full(true)
               << ", \"optimizer_state_bytes_per_rank\": [" << per_rank << "]"
               << ", \"resident_parameter_bytes_per_rank\": [" << params_per_rank << "]}}" << std::endl;
    }
  }

  RunState st;
  if (!a.load.empty()) load_checkpoint(a, model, engine, st);

  const int64_t T = a.total_iters(), gbs = a.global_batch_size, mbs = a.micro_batch_size, micro = gbs / (mbs * W);
  const double L = static_cast<double>(a.num_layers), h = static_cast<double>(a.hidden_size), s = static_cast<double>(a.seq_length);
  const double flops_per_iter = 24.0 * (a.checkpoint_activations || a.zero_stage == 3 ? 4 : 3) * static_cast<double>(gbs) * s * L * h * h *
                                (1.0 + s / (6.0 * h) + static_cast<double>(padded) / (16.0 * L * h));
  // Megatron's data-parallel sampler: micro-step m of a global batch reads
  // samples [m * mbs * W + rank * mbs, + mbs) of it.
  auto rank_offset = [&](int64_t m) { return m * mbs * W + env.rank * mbs; };
  auto all_mean = [&](double local_sum, int64_t local_count) {
    auto t = torch::tensor({local_sum, static_cast<double>(local_count)}, torch::kDouble).to(device);
    comm->all_reduce_sum(t);
    t = t.cpu();
    return t[0].item<double>() / t[1].item<double>();
  };

  auto evaluate = [&](const std::string& label, const SampleSource& src, int64_t* consumed) {
    if (src.empty() || a.eval_iters == 0) return;
    if (autocast) at::autocast::clear_cache();
    model->eval();
    torch::NoGradGuard no_grad;
    double total = 0;
    int64_t n = 0;
    for (int64_t e = 0; e < a.eval_iters; ++e) {
      for (int64_t m = 0; m < micro; ++m) {
        auto [tok, lab] = batch(src, *consumed + rank_offset(m), mbs, a.seq_length, device);
        total += model->loss(tok, lab).item<double>();
        ++n;
      }
      *consumed += gbs;
    }
    model->train();
    double v = all_mean(total, n);
    if (env.rank != 0) return;
    char line[512];
    std::snprintf(line, sizeof line, " validation loss at %s | lm loss value: %.6E | lm loss PPL: %.6E | ", label.c_str(), v,
                  std::exp(std::min(20.0, v)));
    std::fprintf(stderr, "%s\n%s\n%s\n", dashes(std::strlen(line) + 1).c_str(), line, dashes(std::strlen(line) + 1).c_str());
    if (metrics) *metrics << "{\"iteration\": " << st.iteration << ", \"split\": \"" << (&src == &test_src ? "test" : "valid")
                          << "\", \"lm_loss\": " << json_number(v) << ", \"ppl\": " << json_number(std::exp(std::min(20.0, v))) << "}" << std::endl;
  };

  model->train();
  double interval_loss = 0;                          // over the iterations that advanced (Megatron)
  int64_t interval_iters = 0, interval_advanced = 0;  // all iterations, and those not skipped
  auto interval_start = std::chrono::steady_clock::now();
  int64_t valid_consumed = st.consumed_valid;
  while (st.iteration < T) {
    const double lr = megatron_lr(a, st.iteration);  // Megatron: the LR of the steps taken so far
    if (autocast) at::autocast::clear_cache();
    engine.begin_step(micro);
    // Summed on the device and read once per step: a read per micro-batch would
    // make the host wait for each backward before queueing the next forward.
    auto loss_acc = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device));
    const double loss_mult = fp16 ? scaler.scale() : 1.0;
    for (int64_t m = 0; m < micro; ++m) {
      auto [tok, lab] = batch(train_src, st.consumed_train + rank_offset(m), mbs, a.seq_length, device);
      auto loss = model->loss(tok, lab);
      {
        // Backward outside autocast, as in PyTorch's recipe (on CPU it would
        // otherwise run under the caller's autocast state).
        at::autocast::set_autocast_enabled(autocast_device, false);
        (loss * (loss_mult / static_cast<double>(micro))).backward();
        at::autocast::set_autocast_enabled(autocast_device, autocast);
      }
      engine.after_backward();
      loss_acc += loss.detach().to(torch::kDouble);
    }
    const double loss_sum = loss_acc.item<double>();
    // Mean over ranks (the sum is taken by the reduction) and the loss scale undone.
    const double grad_norm = engine.reduce_grads(1.0 / (loss_mult * static_cast<double>(W)));
    const bool found_inf = !std::isfinite(grad_norm);
    if (fp16) scaler.update(found_inf);
    const double loss_avg = W > 1 ? all_mean(loss_sum, micro) : loss_sum / static_cast<double>(micro);
    const bool skipped = found_inf && fp16;
    if (skipped) {  // Megatron skips the update and counts it
      ++skipped_iters;
      nan_iters += !std::isfinite(loss_avg);
    } else {
      const double clip = a.clip_grad > 0 ? std::min(1.0, a.clip_grad / (grad_norm + 1e-6)) : 1.0;
      engine.step(lr, clip);
    }
    ++st.iteration;
    st.consumed_train += gbs;
    if (!skipped) {
      interval_loss += loss_avg;
      ++interval_advanced;
    }
    ++interval_iters;
    if ((st.iteration % a.log_interval == 0 || st.iteration == T) && env.rank == 0) {
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - interval_start).count() / static_cast<double>(interval_iters);
      // Megatron: the loss averages the iterations that advanced and is left out
      // when there were none; the grad norm (of this iteration) only when it stepped.
      const double avg = interval_loss / static_cast<double>(std::max<int64_t>(1, interval_advanced));
      const double lr_now = megatron_lr(a, st.iteration);
      std::fprintf(stderr,
                   " iteration %8ld/%8ld | consumed samples: %12ld | consumed tokens: %12ld | elapsed time per iteration (s): %.2f | "
                   "learning rate: %.3E | global batch size: %5ld |%s%s%s number of skipped iterations: %3ld | "
                   "number of nan iterations: %3ld | samples per second: %.3f | TFLOPs: %.2f |\n",
                   (long)st.iteration, (long)T, (long)st.consumed_train, (long)(st.consumed_train * a.seq_length), secs, lr_now,
                   (long)gbs, interval_advanced > 0 ? strprintf(" lm loss: %.6E |", avg).c_str() : "",
                   fp16 ? strprintf(" loss scale: %.1f |", scaler.scale()).c_str() : "",
                   skipped ? "" : strprintf(" grad norm: %.3f |", grad_norm).c_str(), (long)skipped_iters, (long)nan_iters,
                   static_cast<double>(gbs) / secs, flops_per_iter / secs / 1e12 / W);
      if (cuda && st.iteration == a.log_interval)  // Megatron reports memory once, after the first interval
        std::fprintf(stderr, "%s\n", cuda_memory_report(env.rank, st.iteration, gpu).c_str());
      if (metrics)
        *metrics << "{\"iteration\": " << st.iteration << ", \"consumed_samples\": " << st.consumed_train << std::setprecision(9)
                 << ", \"lm_loss\": " << (interval_advanced > 0 ? json_number(avg) : "null") << ", \"lr\": " << lr_now
                 << ", \"grad_norm\": " << (skipped ? "null" : json_number(grad_norm))
                 << ", \"skipped_iterations\": " << skipped_iters << ", \"seconds_per_iteration\": " << secs
                 << ", \"tflops_per_rank\": " << flops_per_iter / secs / 1e12 / W
                 << ", \"tokens_per_second\": " << static_cast<double>(gbs * a.seq_length) / secs
                 << ", \"peak_device_bytes\": " << (cuda ? cuda_peak_allocated(gpu) : 0) << "}" << std::endl;
    }
    if (st.iteration % a.log_interval == 0 || st.iteration == T) {
      skipped_iters = nan_iters = 0;
      interval_loss = 0;
      interval_iters = interval_advanced = 0;
      interval_start = std::chrono::steady_clock::now();
    }
    if (st.iteration % a.eval_interval == 0 && !valid_src.empty()) {
      evaluate("iteration " + std::to_string(st.iteration), valid_src, &valid_consumed);
      st.consumed_valid = valid_consumed;
    }
    if (!a.save.empty() && a.save_interval > 0 && st.iteration % a.save_interval == 0) save_checkpoint(a, model, engine, *comm, st);
    if (a.exit_interval > 0 && st.iteration % a.exit_interval == 0) {
      if (!a.save.empty() && (a.save_interval == 0 || st.iteration % a.save_interval != 0)) save_checkpoint(a, model, engine, *comm, st);
      ZLM_LOG_INF("exiting program at iteration %ld", (long)st.iteration);
      comm->shutdown();
      return 0;
    }
  }
  if (!a.save.empty() && (a.save_interval == 0 || st.iteration % a.save_interval != 0)) save_checkpoint(a, model, engine, *comm, st);
  evaluate("the end of training for val data", valid_src, &valid_consumed);
  int64_t test_consumed = 0;
  evaluate("the end of training for test data", test_src, &test_consumed);
  comm->shutdown();
  return 0;
}

}  // namespace zlm::trainer
