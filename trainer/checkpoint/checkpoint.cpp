#include "trainer/checkpoint/checkpoint.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/core/dir_lock.h"
#include "common/core/error.h"
#include "common/tokenizer/vocab_file.h"
#include "common/core/log.h"
#include "common/core/files.h"
#include "common/core/output_file.h"
#include "trainer/checkpoint/deepspeed_format.h"
#include "trainer/checkpoint/megatron_format.h"

namespace zlm::trainer {

namespace fs = std::filesystem;

namespace {

constexpr const char* kBlockParams[] = {"ln1.weight",       "ln1.bias",      "attn_qkv.weight", "attn_qkv.bias",
                                        "attn_proj.weight", "attn_proj.bias", "ln2.weight",     "ln2.bias",
                                        "mlp_fc.weight",    "mlp_fc.bias",    "mlp_proj.weight", "mlp_proj.bias"};

struct Layout {
  int64_t tp = 1, pp = 1, chunks = 1;
  bool operator==(const Layout&) const = default;
};

std::string iter_name(int64_t it) { return megatron_iter_name(it); }

std::string shard_name(const Layout& lay, int64_t tp_rank, int64_t pp_rank) { return megatron_part_name(tp_rank, pp_rank, lay.pp); }

// The whole model's names of the parameters stage `stage` holds.
std::vector<std::string> stage_names(int64_t layers, const Layout& lay, int64_t stage) {
  std::vector<std::string> names;
  if (stage == 0 || stage == lay.pp - 1) names.emplace_back("wte.weight");
  if (stage == 0) names.emplace_back("wpe.weight");
  for (const auto& chunk : stage_layers(layers, static_cast<int>(lay.pp), static_cast<int>(lay.chunks), static_cast<int>(stage)))
    for (int64_t l : chunk)
      for (const char* p : kBlockParams) names.push_back("blocks." + std::to_string(l) + "." + p);
  if (stage == lay.pp - 1) {
    names.emplace_back("ln_f.weight");
    names.emplace_back("ln_f.bias");
  }
  return names;
}

// Tensors by dotted name ("blocks.0.ln1.weight") into nested archives, the
// layout torch::nn::Module::save writes, so Module::load and torch.jit.load read it.
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

// A 64-bit checksum of a tensor's bytes (8 bytes per multiply; any damaged
// byte changes it), recorded for every tensor at save and verified at load:
// torch's archive reader does not check the zip CRCs.
torch::Tensor checksum(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous().cpu();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  const size_t n = static_cast<size_t>(c.numel()) * c.element_size();
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001B3ULL;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ULL;
  return torch::tensor(static_cast<int64_t>(h));
}

torch::Tensor read_tensor(torch::serialize::InputArchive& ar, const char* key) {  // a fresh tensor: read() resizes a defined one
  torch::Tensor t;
  ar.read(key, t);
  return t;
}

struct ShardFile {
  std::map<std::string, torch::Tensor> params, exp_avg, exp_avg_sq;
  torch::Tensor rng_cpu, rng_tracker, rng_device;
};

// One checkpoint directory, its files read as they are needed.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir) : dir_(dir) {
    fs::path tracker = fs::path(dir) / "latest_checkpointed_iteration.txt";
    if (!fs::exists(tracker)) throw Error(ErrorKind::Usage, "%s: no checkpoint (missing %s)", dir.c_str(), tracker.string().c_str());
    std::string text = read_file(tracker.string());
    char* end = nullptr;
    errno = 0;
    long it = std::strtol(text.c_str(), &end, 10);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    if (text.size() > 40) text = text.substr(0, 40) + "...";
    if (text.empty() || (end && *end != '\0' && *end != '\n') || it < 0 || errno == ERANGE)
      throw Error(ErrorKind::Format, "%s: '%s' is not an iteration number", tracker.string().c_str(), text.c_str());
    iteration = it;
    iter_dir_ = fs::path(dir) / iter_name(it);
    if (!fs::is_directory(iter_dir_))
      throw Error(ErrorKind::Format, "%s names iteration %ld, but %s does not exist ---> HINT: write the number of a saved iteration into it",
                  tracker.string().c_str(), it, iter_dir_.string().c_str());
    // The first file says the layout (files from before model parallelism have none: one part).
    fs::path first = iter_dir_ / "mp_rank_00" / "model_optim_rng.pt";
    if (!fs::exists(first)) first = iter_dir_ / "mp_rank_00_000" / "model_optim_rng.pt";
    guarded(first, [&] {
      torch::serialize::InputArchive ar;
      ar.load_from(first.string());
      auto cfg = read_tensor(ar, "config");
      auto v = cfg.accessor<int64_t, 1>();
      config = Gpt2Config{.vocab_size = v[0], .max_positions = v[1], .num_layers = v[2], .hidden = v[3], .heads = v[4],
                          .hidden_dropout = 0, .attention_dropout = 0};
      torch::Tensor entries;  // absent from checkpoints saved before it was written
      if (ar.try_read("vocab_entries", entries)) config.vocab_entries = entries.item<int64_t>();
      torch::Tensor erf;
      config.erf_gelu = ar.try_read("erf_gelu", erf) && erf.item<int64_t>() != 0;
      torch::Tensor par;
      if (ar.try_read("parallel", par)) layout = Layout{par[0].item<int64_t>(), par[1].item<int64_t>(), par[2].item<int64_t>()};
      torch::serialize::InputArchive opt;
      ar.read("optimizer", opt);
      step = read_tensor(opt, "step").item<int64_t>();
      consumed_train = read_tensor(ar, "consumed_train_samples").item<int64_t>();
      consumed_valid = read_tensor(ar, "consumed_valid_samples").item<int64_t>();
      torch::Tensor sched;  // absent before the schedule skipped fp16's overflows: every sample counted
      scheduler_samples = ar.try_read("scheduler_samples", sched) ? sched.item<int64_t>() : consumed_train;
      if (torch::Tensor s; ar.try_read("loss_scale", s) && s.numel() == 3)
        loss_scale = {.scale = s[0].item<double>(), .growth_tracker = s[1].item<int64_t>(), .hysteresis_tracker = s[2].item<int64_t>()};
      torch::Tensor w;
      if (ar.try_read("world_size", w)) saved_world = w.item<int64_t>();
      files_[{0, 0}] = read_shard(ar, first.string(), 0);  // the same archive: not read again
    });
  }

  // A parameter's whole tensor (kind 0 weights, 1 exp_avg, 2 exp_avg_sq), its tensor-parallel parts joined.
  torch::Tensor full(const std::string& name, int kind) {
    const int64_t stage = stage_of(name);
    std::vector<torch::Tensor> parts;
    for (int64_t t = 0; t < layout.tp; ++t) {
      ShardFile& f = file(t, stage);
      auto& m = kind == 0 ? f.params : kind == 1 ? f.exp_avg : f.exp_avg_sq;
      auto it = m.find(name);
      if (it == m.end()) throw Error(ErrorKind::Format, "%s: no %s in %s", dir_.c_str(), name.c_str(), path(t, stage).c_str());
      parts.push_back(it->second);
    }
    return tp_concat(parts, Gpt2Impl::tp_split(name));
  }

  ShardFile& file(int64_t t, int64_t p) {
    auto& slot = files_[{t, p}];
    if (slot) return *slot;
    const std::string file_path = path(t, p);
    guarded(file_path, [&] {
      torch::serialize::InputArchive ar;
      ar.load_from(file_path);
      slot = read_shard(ar, file_path, p);
    });
    return *slot;
  }

  // The tensors of stage p's file, their checksums verified, and its RNG states.
  std::unique_ptr<ShardFile> read_shard(torch::serialize::InputArchive& ar, const std::string& file_path, int64_t p) {
    auto shard = std::make_unique<ShardFile>();
    torch::serialize::InputArchive model, opt, m, v;
    const auto names = stage_names(config.num_layers, layout, p);
    ar.read("model", model);
    read_nested(model, names, "", shard->params);
    ar.read("optimizer", opt);
    opt.read("exp_avg", m);
    opt.read("exp_avg_sq", v);
    read_nested(m, names, "", shard->exp_avg);
    read_nested(v, names, "", shard->exp_avg_sq);
    torch::serialize::InputArchive sums;
    if (ar.try_read("checksum", sums)) {  // checkpoints from before checksums have none
      std::vector<std::string> keys;
      for (const auto& n : names)
        for (const char* kind : {"model.", "exp_avg.", "exp_avg_sq."}) keys.push_back(kind + n);
      std::map<std::string, torch::Tensor> want;
      read_nested(sums, keys, "", want);
      for (const auto& [key, expected] : want) {
        const std::string name = key.substr(key.find('.') + 1);
        const auto& map = key.rfind("model.", 0) == 0 ? shard->params : key.rfind("exp_avg_sq.", 0) == 0 ? shard->exp_avg_sq : shard->exp_avg;
        if (checksum(map.at(name)).item<int64_t>() != expected.item<int64_t>())
          throw Error(ErrorKind::Format, "%s: tensor %s is damaged (its checksum differs from the one saved with it) ---> HINT: "
                      "resume from an earlier iteration (edit latest_checkpointed_iteration.txt) or re-copy the file",
                      file_path.c_str(), key.c_str());
      }
    }
    if (torch::Tensor c; ar.try_read("rng_cpu", c)) shard->rng_cpu = c;  // absent from converted models: the run's --seed starts the streams
    torch::Tensor t;
    if (ar.try_read("rng_tracker", t)) shard->rng_tracker = t;
    torch::Tensor d;
    if (ar.try_read("rng_device", d)) shard->rng_device = d;
    return shard;
  }

  std::string path(int64_t t, int64_t p) const { return (iter_dir_ / shard_name(layout, t, p) / "model_optim_rng.pt").string(); }

  Gpt2Config config;
  Layout layout;
  int64_t iteration = 0, step = 0, consumed_train = 0, consumed_valid = 0, scheduler_samples = 0, saved_world = 0;
  LossScaler::State loss_scale;  // fp16's; scale 0: not saved

 private:
  int64_t stage_of(const std::string& name) const {
    if (name == "wte.weight" || name == "wpe.weight") return 0;
    if (name.rfind("ln_f.", 0) == 0) return layout.pp - 1;
    const int64_t layer = std::stol(name.substr(7, name.find('.', 7) - 7));
    const int64_t n = config.num_layers / (layout.pp * layout.chunks);
    return (layer / n) % layout.pp;
  }
  template <class F>
  void guarded(const fs::path& p, F&& f) {
    try {
      f();
    } catch (const c10::Error& e) {
      throw Error(ErrorKind::Format, "%s: cannot load the checkpoint (%s) ---> HINT: it is damaged or from another model shape",
                  p.string().c_str(), e.what_without_backtrace());
    }
  }

  std::string dir_;
  fs::path iter_dir_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<ShardFile>> files_;
};

// The embedding rows of a checkpoint saved with another padded vocabulary:
// trimmed, or padded with the last row (weights) or zeros (Adam moments).
torch::Tensor fit_vocab(const torch::Tensor& t, int64_t rows, bool weights) {
  if (t.size(0) == rows) return t;
  if (t.size(0) > rows) return t.narrow(0, 0, rows);
  auto pad = weights ? t.narrow(0, t.size(0) - 1, 1).expand({rows - t.size(0), t.size(1)}) : torch::zeros({rows - t.size(0), t.size(1)});
  return torch::cat({t, pad});
}

// Resuming resizes only the padding: the rows of tokens must be the same
// vocabulary's, or the run would make up rows (a larger vocabulary) or drop
// trained ones (a smaller). Checkpoints that do not say their token count
// (saved_entries 0: older ones of ours, Megatron's and DeepSpeed's): their rows
// must be what this vocabulary pads to in the layout they were saved with.
void check_vocabulary(const std::string& where, int64_t saved_entries, int64_t saved_rows, int64_t saved_tp, int64_t divisible_by,
                      int64_t entries) {
  if (entries <= 0) return;  // a model built without a vocabulary file (tests)
  const bool same = saved_entries > 0 ? saved_entries == entries
                    : saved_rows == static_cast<int64_t>(padded_vocab_size(static_cast<uint64_t>(entries), static_cast<uint64_t>(divisible_by),
                                                                           static_cast<uint64_t>(saved_tp)));
  if (same) return;
  const std::string theirs = saved_entries > 0 ? strprintf("a vocabulary of %ld tokens", (long)saved_entries)
                                               : strprintf("%ld embedding rows, which no padding of %ld tokens gives", (long)saved_rows, (long)entries);
  throw Error(ErrorKind::Usage, "%s: the checkpoint was trained with %s; this run's vocabulary has %ld: resuming would %s ---> HINT: give "
              "the --vocab-file the checkpoint was trained with", where.c_str(), theirs.c_str(), (long)entries,
              saved_entries == 0 ? (saved_rows > entries ? "drop trained embedding rows" : "add embedding rows that were never trained")
              : saved_entries > entries ? "drop trained embedding rows"
                                        : "add embedding rows that were never trained");
}

// The GELU a checkpoint was trained with is the one the run computes, or the model would change.
void check_gelu(const std::string& where, const Gpt2Config& saved, const Gpt2Config& run) {
  if (saved.erf_gelu == run.erf_gelu) return;
  auto name = [](bool erf) { return erf ? "exact (erf) GELU, --no-bias-gelu-fusion" : "tanh-approximated GELU, Megatron's default"; };
  throw Error(ErrorKind::Usage, "%s: the checkpoint was trained with %s; this run computes %s ---> HINT: %s", where.c_str(), name(saved.erf_gelu),
              name(run.erf_gelu), saved.erf_gelu ? "add --no-bias-gelu-fusion" : "drop --no-bias-gelu-fusion (or add --openai-gelu)");
}

// The checkpoint's model is this run's: its shape, GELU and vocabulary (`what`: "a DeepSpeed
// checkpoint", for the message; `tp`: the tensor-parallel size it was saved with, whose
// padding its embedding rows may carry). Another padding of the same vocabulary is a warning
// (`warn`: this rank says it).
void check_same_model(const std::string& where, const std::string& what, const Gpt2Config& s, const Gpt2Config& c, int64_t tp,
                      int64_t divisible_by, bool warn) {
  if (s.num_layers != c.num_layers || s.hidden != c.hidden || s.heads != c.heads || s.max_positions != c.max_positions)
    throw Error(ErrorKind::Usage, "%s: %s of %ld layers, hidden %ld, %ld heads, %ld positions; this run has %ld, %ld, %ld, %ld", where.c_str(),
                what.c_str(), (long)s.num_layers, (long)s.hidden, (long)s.heads, (long)s.max_positions, (long)c.num_layers, (long)c.hidden,
                (long)c.heads, (long)c.max_positions);
  check_gelu(where, s, c);
  check_vocabulary(where, s.vocab_entries, s.vocab_size, tp, divisible_by, c.vocab_entries);
  if (s.vocab_size != c.vocab_size && warn)
    ZLM_LOG_WRN("WARNING: the checkpoint's padded vocabulary has %ld rows, this run's %ld (another --tensor-model-parallel-size or "
                "--make-vocab-size-divisible-by); padding rows %s, every token's row kept", (long)s.vocab_size, (long)c.vocab_size,
                s.vocab_size > c.vocab_size ? "dropped" : "added (copies of the last row)");
}

// The dropout streams of this rank's part of an imported checkpoint saved in this layout, where
// its rng_state has them: torch's CPU generator, and the model-parallel tracker (a GPU run's
// CUDA states; on CPUs, the CPU state a zerolm run keeps beside them). Whether every stream of
// this run was restored (on every rank: the layouts must agree).
bool restore_streams(const ImportedModel& m, ProcessGrid& grid, RngTracker& rng) {
  if (m.tp != grid.tp_size() || m.pp != grid.pp_size()) return false;
  const auto it = m.rng.find({grid.tp_rank(), grid.pp_rank()});
  if (it == m.rng.end() || !rng.state().defined()) return false;
  const PartRng& r = it->second;
  const bool gpu = !rng.device().is_cpu();
  const torch::Tensor& tracker = gpu ? r.tracker : r.cpu_tracker;
  if (!tracker.defined() || (gpu && !r.device.defined())) return false;
  try {
    swap_rng_state(torch::Device(torch::kCPU), r.cpu);
    if (gpu) swap_rng_state(rng.device(), r.device);
    // A state the generator refuses is found here, not at the first dropout.
    torch::Tensor before = swap_rng_state(rng.device(), tracker);
    swap_rng_state(rng.device(), before);
  } catch (const c10::Error& e) {
    throw Error(ErrorKind::Format, "%s: its rng_state does not fit this run's generators: %s", r.file.c_str(), e.what_without_backtrace());
  }
  rng.set_state(tracker);
  return true;
}

// A checkpoint of Megatron-LM or DeepSpeed (megatron_format.h,
// deepspeed_format.h): its weights, cut for this rank, its iteration and
// consumed samples, Adam's moments and step where it has them (else they
// start at zero), the schedule's samples, fp16's loss scale and, in the same
// layout, the dropout streams.
bool load_imported_checkpoint(const TrainArgs& a, ImportedModel m, Gpt2& model, ZeroEngine& engine, ProcessGrid& grid, RngTracker& rng,
                              RunState& st) {
  const Gpt2Config& c = model->config();
  const Gpt2Config& s = m.config;
  Gpt2Config saved = s;
  saved.vocab_entries = m.vocab_entries;
  check_same_model("--load " + a.load, "a " + m.format + " checkpoint", saved, c, m.tp,
                   m.vocab_divisible_by > 0 ? m.vocab_divisible_by : a.make_vocab_size_divisible_by, grid.world().rank() == 0);
  const bool moments = !m.exp_avg.empty();
  const auto shapes = engine.param_shapes();
  ZeroEngine::FullState full;
  for (const auto& item : model->named_parameters()) {
    const std::string& local = item.key();
    const std::string g = model->global_name(local);
    const TpSplit split = Gpt2Impl::tp_split(local);
    auto it = m.params.find(g);
    if (it == m.params.end()) throw Error(ErrorKind::Format, "--load %s: the checkpoint has no %s", a.load.c_str(), g.c_str());
    auto cut = [&](torch::Tensor t, bool weights) {
      if (g == "wte.weight") t = fit_vocab(t, c.vocab_size, weights);
      return tp_slice(t, split, grid.tp_size(), grid.tp_rank());
    };
    torch::Tensor w = cut(it->second, true);
    if (const std::vector<int64_t>& want = shapes.at(local); w.sizes() != c10::IntArrayRef(want))
      throw Error(ErrorKind::Usage, "--load %s: %s is %s there, %s in this run", a.load.c_str(), g.c_str(), c10::str(w.sizes()).c_str(),
                  c10::str(want).c_str());
    full.params[local] = w;
    full.exp_avg[local] = moments ? cut(m.exp_avg.at(g), false) : torch::zeros_like(w);
    full.exp_avg_sq[local] = moments ? cut(m.exp_avg_sq.at(g), false) : torch::zeros_like(w);
  }
  full.step = moments ? m.adam_step : 0;
  engine.load_state(full);
  st.iteration = m.iteration;
  st.consumed_train = m.consumed_train;
  st.scheduler_samples = m.scheduler_samples >= 0 ? m.scheduler_samples : m.consumed_train;
  st.loss_scale = m.loss_scale;
  st.loss_scale.hysteresis_tracker = std::min<int64_t>(m.loss_scale.hysteresis_tracker, a.hysteresis);  // not INT64_MAX in what is saved
  st.consumed_valid = m.consumed_valid;
  const bool streams = restore_streams(m, grid, rng);
  if (grid.world().rank() == 0)
    ZLM_LOG_WRN("WARNING: --load %s is a %s checkpoint (saved with TP %ld x PP %ld): its weights, %siteration %ld and %ld consumed "
                "samples are read; %s%s", a.load.c_str(), m.format.c_str(), (long)m.tp, (long)m.pp,
                moments ? "Adam's moments and step, " : "", (long)m.iteration, (long)m.consumed_train, moments ? "" : "Adam's moments and ",
                streams ? "the dropout streams continue from its rng_state" : "the dropout streams start afresh");
  return true;
}

}  // namespace

namespace {

// A part's weights and Adam moments under the whole model's names ("blocks.5...").
struct GlobalNamed {
  std::map<std::string, torch::Tensor> params, exp_avg, exp_avg_sq;
};
GlobalNamed by_global_name(Gpt2& model, const ZeroEngine::FullState& full) {
  GlobalNamed out;
  for (const auto& [local, t] : full.params) {
    const std::string g = model->global_name(local);
    out.params[g] = t;
    out.exp_avg[g] = full.exp_avg.at(local);
    out.exp_avg_sq[g] = full.exp_avg_sq.at(local);
  }
  return out;
}

// The archive of this rank's part: weights and Adam moments under the whole
// model's names, how each is split over TP ranks, their checksums, the
// counters, the model shape, the layout and the RNG states.
torch::serialize::OutputArchive part_archive(Gpt2& model, const ZeroEngine::FullState& full, int64_t tp_rank, int64_t pp_rank,
                                             const Layout& lay, const RngTracker& rng, const RunState& st, int world) {
  const GlobalNamed named = by_global_name(model, full);
  const auto& params = named.params;
  const auto& m = named.exp_avg;
  const auto& v = named.exp_avg_sq;
  std::map<std::string, torch::Tensor> partition, sums;
  for (const auto& [g, t] : params) {
    const TpSplit s = Gpt2Impl::tp_split(g);
    partition[g] = torch::tensor({static_cast<int64_t>(s.dim), static_cast<int64_t>(s.groups)});
    sums["model." + g] = checksum(t);
    sums["exp_avg." + g] = checksum(m.at(g));
    sums["exp_avg_sq." + g] = checksum(v.at(g));
  }
  torch::serialize::OutputArchive archive, model_ar, opt_ar, m_ar, v_ar, part_ar, sum_ar;
  write_nested(model_ar, params);
  write_nested(m_ar, m);
  write_nested(v_ar, v);
  write_nested(part_ar, partition);
  write_nested(sum_ar, sums);
  archive.write("checksum", sum_ar);
  opt_ar.write("exp_avg", m_ar);
  opt_ar.write("exp_avg_sq", v_ar);
  opt_ar.write("step", torch::tensor(full.step));
  archive.write("model", model_ar);
  archive.write("optimizer", opt_ar);
  archive.write("partition", part_ar);
  archive.write("iteration", torch::tensor(st.iteration));
  archive.write("consumed_train_samples", torch::tensor(st.consumed_train));
  archive.write("scheduler_samples", torch::tensor(st.scheduler_samples));
  if (const LossScaler::State& s = st.loss_scale; s.scale > 0)
    archive.write("loss_scale", torch::tensor({s.scale, static_cast<double>(s.growth_tracker), static_cast<double>(s.hysteresis_tracker)}, torch::kDouble));
  archive.write("consumed_valid_samples", torch::tensor(st.consumed_valid));
  archive.write("checkpoint_version", torch::tensor(3.0));
  archive.write("world_size", torch::tensor(static_cast<int64_t>(world)));
  const Gpt2Config& c = model->config();
  archive.write("config", torch::tensor({c.vocab_size, c.max_positions, c.num_layers, c.hidden, c.heads}));
  if (c.vocab_entries > 0) archive.write("vocab_entries", torch::tensor(c.vocab_entries));
  if (c.erf_gelu) archive.write("erf_gelu", torch::tensor(int64_t{1}));  // absent: the tanh approximation
  archive.write("parallel", torch::tensor({lay.tp, lay.pp, lay.chunks, tp_rank, pp_rank}));
  if (rng.state().defined()) {  // a run's streams (a converted model has none)
    archive.write("rng_cpu", at::globalContext().defaultGenerator(torch::kCPU).get_state());
    archive.write("rng_tracker", rng.state());
  }
  if (!rng.device().is_cpu()) archive.write("rng_device", swap_rng_state(rng.device(), torch::Tensor()));
  return archive;
}

// This rank's part of the model in Megatron's layout, with the run's counters.
MegatronPart part_of(Gpt2& model, const ProcessGrid& grid, const RunState& st) {
  return MegatronPart{.config = model->config(), .tp = grid.tp_size(), .pp = grid.pp_size(), .tp_rank = grid.tp_rank(),
                      .pp_rank = grid.pp_rank(), .dp = grid.dp_size(), .iteration = st.iteration, .consumed_train = st.consumed_train,
                      .consumed_valid = st.consumed_valid};
}

// Megatron-LM's `optimizer` entry of one part, as megatron-core's optimizer saves it where it
// runs torch's AdamW (no Transformer Engine or apex): FP32Optimizer's state is AdamW's state dict
// (one entry per parameter, Megatron's two groups with megatron-core's keys, which its loader
// matches groups by); with --bf16/--fp16 Float16OptimizerWithFloat16Params' wraps it with the fp32
// master weights per group (and, for fp16, the grad scaler: its scale and trackers). With
// --use-distributed-optimizer, DistributedOptimizer's: the groups alone, each with the step (and
// the grad scaler); the weights and moments go to distrib_optim.pt.
std::shared_ptr<PyValue> megatron_optimizer_state(const PyValue& module, const PyValue& exp_avg, const PyValue& exp_avg_sq, const DeepSpeedRun& run) {
  const bool mixed = run.fp16 || run.bf16;
  std::shared_ptr<PyValue> masters;
  std::shared_ptr<PyValue> adam = adamw_part_state(module, exp_avg, exp_avg_sq, run, mixed ? &masters : nullptr);
  for (const auto& g : adam->at("param_groups").items) {
    auto put = [&](const char* k, std::shared_ptr<PyValue> v) { g->entries.emplace_back(py_str(k), std::move(v)); };
    put("is_expert_parallel", py_bool(false));
    put("default_config", py_bool(true));
    put("is_decoupled_lr", py_bool(false));
    put("max_lr", py_float(run.max_lr));
    put("min_lr", py_float(run.min_lr));
  }
  if (!mixed && !run.distributed_optimizer) return adam;
  auto out = py_dict();
  auto put = [&](const char* k, std::shared_ptr<PyValue> v) { out->entries.emplace_back(py_str(k), std::move(v)); };
  if (run.distributed_optimizer) {  // DistributedOptimizer's: the groups without their parameters, each with the step
    auto groups = py_list();
    for (const auto& g : adam->at("param_groups").items) {
      std::erase_if(g->entries, [](const auto& e) { return e.first->is(PyValue::Kind::Str) && e.first->s == "params"; });
      g->entries.emplace_back(py_str("step"), py_float(static_cast<double>(run.adam_step)));
      groups->items.push_back(g);
    }
    auto inner = py_dict();
    inner->entries.emplace_back(py_str("param_groups"), groups);
    put("optimizer", inner);
  } else {
    put("optimizer", adam);
  }
  if (run.fp16) {
    auto scaler = py_dict();
    scaler->entries.emplace_back(py_str("scale"), py_tensor(torch::tensor({static_cast<float>(run.loss_scale)})));
    scaler->entries.emplace_back(py_str("growth_tracker"), py_int(run.loss_scale_growth));
    scaler->entries.emplace_back(py_str("hysteresis_tracker"), py_int(run.hysteresis_left.value_or(run.hysteresis)));
    put("grad_scaler", scaler);
  }
  if (!run.distributed_optimizer) put("fp32_from_fp16_params", masters);
  return out;
}

// This rank's streams as Megatron's `rng_state` (megatron_rng_state) in `top`, and a CPU run's
// model-parallel stream under zerolm_rng_tracker; nothing for a converted model (no streams).
void put_rng_state(PyValue& top, const RngTracker& rng, uint64_t seed, const ProcessGrid& grid) {
  if (!rng.state().defined()) return;
  PartRng streams;
  streams.cpu = at::globalContext().defaultGenerator(torch::kCPU).get_state();
  if (rng.device().is_cpu()) {
    streams.cpu_tracker = rng.state();
  } else {
    streams.device = swap_rng_state(rng.device(), torch::Tensor());
    streams.tracker = rng.state();
  }
  top.entries.emplace_back(py_str("rng_state"), megatron_rng_state(streams, seed + 100ULL * static_cast<uint64_t>(grid.pp_rank()), grid.tp_rank()));
  if (streams.cpu_tracker.defined()) top.entries.emplace_back(py_str("zerolm_rng_tracker"), py_tensor(streams.cpu_tracker));
}

// This rank's part as Megatron-LM's model_optim_rng.pt (--ckpt-format torch): `model`
// under megatron-core's names, `args`, `iteration`, `checkpoint_version`, Megatron's own
// `optimizer` and `opt_param_scheduler` (megatron_optimizer_state; the scheduler's state counted
// in samples) and `rng_state` (megatron_rng_state: this rank's streams), so that Megatron-LM's
// loader resumes it without --no-load-* flags; with --use-distributed-optimizer, distrib_optim.pt
// beside it (megatron_distributed_optimizer_state). Adam's moments and step also go under a key of
// ours, "zerolm_optimizer", with the model's names, and a CPU run's model-parallel stream under
// "zerolm_rng_tracker" (Megatron ignores both): a zerolm run resumes from those.
void write_megatron_part(Gpt2& model, const ZeroEngine::FullState& full, const ProcessGrid& grid, const RngTracker& rng, const RunState& st,
                         DeepSpeedRun run, const fs::path& file) {
  const GlobalNamed named = by_global_name(model, full);
  MegatronPart part = part_of(model, grid, st);
  part.overlap_grad_reduce = run.overlap_grad_reduce, part.ddp_bucket_size = run.ddp_bucket_size;
  const std::shared_ptr<PyValue> module = megatron_part_state(named.params, part), m = megatron_part_state(named.exp_avg, part),
                                 v = megatron_part_state(named.exp_avg_sq, part);
  run.adam_step = full.step;
  auto opt = py_dict();
  opt->entries.emplace_back(py_str("exp_avg"), m);
  opt->entries.emplace_back(py_str("exp_avg_sq"), v);
  opt->entries.emplace_back(py_str("step"), py_int(full.step));
  PyValue top;
  top.kind = PyValue::Kind::Dict;
  const std::shared_ptr<PyValue> args = megatron_args(part);
  top.entries.emplace_back(py_str("args"), args);
  top.entries.emplace_back(py_str("checkpoint_version"), py_float(3.0));
  top.entries.emplace_back(py_str("iteration"), py_int(st.iteration));
  top.entries.emplace_back(py_str("model"), module);
  top.entries.emplace_back(py_str("optimizer"), megatron_optimizer_state(*module, *m, *v, run));
  if (run.lr_scheduler) top.entries.emplace_back(py_str("opt_param_scheduler"), run.lr_scheduler);
  put_rng_state(top, rng, run.seed, grid);
  top.entries.emplace_back(py_str("zerolm_optimizer"), opt);
  save_torch_file(file.string(), top);
  if (run.distributed_optimizer) {
    const std::string param_dtype = run.fp16 ? "torch.float16" : run.bf16 ? "torch.bfloat16" : "torch.float32";
    save_torch_file((file.parent_path() / "distrib_optim.pt").string(),
                    *megatron_distributed_optimizer_state(*module, *m, *v, grid.pp_size() > 1, megatron_bucket_size(*args, grid.pp_rank() == 0),
                                                          param_dtype, run.grad_reduce_fp32 ? "torch.float32" : param_dtype));
  }
}

// Through our own writer: LibTorch's file writer, on a failed write (disk
// full), throws from its destructor while the first error unwinds, which
// aborts the process. Here a failed write is remembered, the archive's
// remaining bytes are dropped, and the error is reported after it returns.
void write_archive(torch::serialize::OutputArchive& archive, const fs::path& file) {
  std::string failure;
  {
    OutputFile out(file.string());
    try {
      archive.save_to([&](const void* data, size_t n) -> size_t {
        if (failure.empty()) {
          try {
            out.write(data, n);
          } catch (const Error& e) {
            failure = e.what();
          }
        }
        return n;
      });
      if (failure.empty()) out.commit();
    } catch (const Error& e) {
      failure = e.what();
    } catch (const c10::Error& e) {
      failure = e.what_without_backtrace();
    }
  }
  if (!failure.empty()) throw Error(ErrorKind::Io, "cannot write the checkpoint (the previous one is kept): %s", failure.c_str());
}

// A save that fails on any rank (disk full, a rank lost) leaves no temporary
// behind: whichever rank sees the failure removes it, and the tracker still
// points at the previous complete checkpoint.
struct RemoveOnFailure {
  fs::path path;
  bool armed = true;
  ~RemoveOnFailure() {
    if (!armed) return;
    try {
      remove_tree(path.string());
    } catch (const std::exception& e) {
      ZLM_LOG_WRN("cannot remove the unfinished checkpoint %s: %s", path.c_str(), e.what());
    }
  }
};

// Rank 0: the complete directory under its final name first, then the
// trackers (Megatron's; DeepSpeed's `latest` before it), so that a crash never
// leaves a tracker pointing at a partial checkpoint; the same iteration saved
// again replaces its old copy only once the new one is in place.
void publish_checkpoint(const std::string& dir, const fs::path& tmp_dir, const std::string& name, int64_t iteration, bool deepspeed) {
  const fs::path final_dir = fs::path(dir) / name;
  const fs::path old = fs::path(dir) / (name + ".old." + std::to_string(::getpid()));
  const bool replacing = fs::exists(final_dir);
  if (replacing) fs::rename(final_dir, old);
  fs::rename(tmp_dir, final_dir);
  if (deepspeed) write_file_atomic((fs::path(dir) / "latest").string(), name);
  write_file_atomic((fs::path(dir) / "latest_checkpointed_iteration.txt").string(), std::to_string(iteration));
  if (replacing) remove_tree(old.string());
}

// This tensor-parallel rank's files of DeepSpeed's checkpoint (--ckpt-format deepspeed),
// every data-parallel rank's partition written from the gathered state.
void write_deepspeed_files(Gpt2& model, const ZeroEngine::FullState& full, const ProcessGrid& grid, const RngTracker& rng, const RunState& st,
                           DeepSpeedRun run, const fs::path& tag_dir) {
  const GlobalNamed named = by_global_name(model, full);
  const MegatronPart part = part_of(model, grid, st);
  run.dp_size = grid.dp_size();
  run.iteration = st.iteration;
  run.adam_step = full.step;
  run.client_state = py_dict();  // Megatron-DeepSpeed saves its rng_state in the engine's client state
  put_rng_state(*run.client_state, rng, run.seed, grid);
  write_deepspeed_part(tag_dir.string(), part, named.params, named.exp_avg, named.exp_avg_sq, run);
}

}  // namespace

DeepSpeedRun deepspeed_run(const TrainArgs& a, const RunState& st, int zero_stage, bool bf16) {
  DeepSpeedRun r;
  r.stage = zero_stage;
  r.micro_batch = a.micro_batch_size;
  r.global_batch = a.global_batch_size;
  r.lr = megatron_lr(a, st.scheduler_samples);
  r.max_lr = a.lr;
  r.min_lr = a.min_lr;
  r.weight_decay = a.weight_decay;
  r.beta1 = a.adam_beta1;
  r.beta2 = a.adam_beta2;
  r.eps = a.adam_eps;
  r.clip_grad = a.clip_grad;
  r.distributed_optimizer = a.use_distributed_optimizer;
  r.overlap_grad_reduce = a.overlap_grad_reduce;
  r.ddp_bucket_size = a.ddp_bucket_size;
  r.grad_reduce_fp32 = bf16 || a.grad_reduce_dtype == "fp32";
  r.bf16 = bf16;
  r.min_loss_scale = a.min_loss_scale;
  r.loss_scale_window = a.loss_scale_window;
  r.hysteresis = a.hysteresis;
  r.seed = static_cast<uint64_t>(a.seed);
  // megatron-core's OptimizerParamScheduler.state_dict(): its steps count samples.
  const int64_t gbs = a.global_batch_size;
  auto s = py_dict();
  auto put = [&](const char* k, std::shared_ptr<PyValue> v) { s->entries.emplace_back(py_str(k), std::move(v)); };
  put("max_lr", py_float(a.lr));
  put("lr_warmup_steps", a.lr_warmup_iters > 0 || a.lr_warmup_fraction <= 0 ? py_int(a.lr_warmup_iters * gbs) : py_float(a.warmup_samples()));
  put("num_steps", py_int(st.scheduler_samples));
  put("lr_decay_style", py_str(a.lr_decay_style));
  put("lr_decay_steps", py_int(a.decay_samples()));
  put("min_lr", py_float(a.min_lr));
  put("start_wd", py_float(a.weight_decay));
  put("end_wd", py_float(a.weight_decay));
  put("wd_incr_style", py_str("constant"));
  put("wd_incr_steps", py_int(a.train_samples_total()));
  r.lr_scheduler = s;
  return r;
}

CheckpointFormat checkpoint_format(const std::string& ckpt_format) {
  if (ckpt_format == "torch") return CheckpointFormat::kMegatron;
  if (ckpt_format == "deepspeed") return CheckpointFormat::kDeepSpeed;
  return CheckpointFormat::kZerolm;
}

void save_checkpoint(const std::string& dir, Gpt2& model, ZeroEngine& engine, ProcessGrid& grid, const RngTracker& rng,
                     const RunState& st, int save_number, CheckpointFormat format, const DeepSpeedRun* ds) {
  const bool deepspeed = format == CheckpointFormat::kDeepSpeed;
  if (deepspeed && !ds) throw Error(ErrorKind::Internal, "a DeepSpeed checkpoint needs the run's optimizer settings");
  if (format == CheckpointFormat::kMegatron && !ds) throw Error(ErrorKind::Internal, "a Megatron checkpoint needs the run's optimizer settings");
  ZeroEngine::FullState full = engine.gather_state();  // on data-parallel rank 0
  Comm& world = grid.world();
  const std::string name = deepspeed ? deepspeed_tag(st.iteration) : iter_name(st.iteration);
  // The temporary directory's name comes from rank 0 (a key of its own for every save of the run).
  const std::string tmp_name = world.exchange("checkpoint_" + std::to_string(save_number), name + ".tmp." + std::to_string(::getpid()))[0];
  const fs::path tmp_dir = fs::path(dir) / tmp_name;
  RemoveOnFailure cleanup{tmp_dir};
  if (world.rank() == 0) {
    fs::create_directories(dir);
    remove_tree(tmp_dir.string());
    fs::create_directories(tmp_dir);
    ZLM_LOG_INF("saving checkpoint at iteration %7ld to %s", (long)st.iteration, dir.c_str());
  }
  world.barrier();
  if (grid.dp_rank() == 0) {
    const Layout lay{grid.tp_size(), grid.pp_size(), static_cast<int64_t>(model->num_chunks())};
    const fs::path file = tmp_dir / shard_name(lay, grid.tp_rank(), grid.pp_rank()) / "model_optim_rng.pt";
    if (deepspeed) {
      write_deepspeed_files(model, full, grid, rng, st, *ds, tmp_dir);
    } else if (format == CheckpointFormat::kMegatron) {
      fs::create_directories(file.parent_path());
      write_megatron_part(model, full, grid, rng, st, *ds, file);
    } else {
      fs::create_directories(file.parent_path());
      torch::serialize::OutputArchive archive = part_archive(model, full, grid.tp_rank(), grid.pp_rank(), lay, rng, st, world.world());
      write_archive(archive, file);
    }
  }
  world.barrier();
  if (world.rank() != 0) cleanup.armed = false;  // every part is written: rank 0 finishes
  if (world.rank() == 0) {
    publish_checkpoint(dir, tmp_dir, name, st.iteration, deepspeed);
    cleanup.armed = false;
    ZLM_LOG_INF("  successfully saved checkpoint at iteration %7ld to %s", (long)st.iteration, dir.c_str());
  }
  world.barrier();
  cleanup.armed = false;
}

void save_model_checkpoint(const std::string& dir, Gpt2& model) {
  const DirLock lock(dir, "--save");  // a file there, or a run writing it, is refused naming --save
  const fs::path final_dir = fs::path(dir) / iter_name(0);
  if (fs::exists(fs::path(dir) / "latest_checkpointed_iteration.txt"))
    throw Error(ErrorKind::Usage, "--save %s already holds a checkpoint (%s): a converted model starts a new directory", dir.c_str(),
                (fs::path(dir) / "latest_checkpointed_iteration.txt").c_str());
  ZeroEngine::FullState full;
  for (const auto& item : model->named_parameters()) {
    torch::Tensor w = item.value().detach().to(torch::kFloat).contiguous();
    full.params[item.key()] = w;
    full.exp_avg[item.key()] = torch::zeros_like(w);  // Adam starts afresh, as from initial weights
    full.exp_avg_sq[item.key()] = torch::zeros_like(w);
  }
  full.step = 0;
  const Layout lay{1, 1, static_cast<int64_t>(model->num_chunks())};
  const fs::path tmp_dir = fs::path(dir) / (iter_name(0) + ".tmp." + std::to_string(::getpid()));
  RemoveOnFailure cleanup{tmp_dir};
  const fs::path file = tmp_dir / shard_name(lay, 0, 0) / "model_optim_rng.pt";
  fs::create_directories(file.parent_path());
  torch::serialize::OutputArchive archive = part_archive(model, full, 0, 0, lay, RngTracker{}, RunState{}, 1);
  write_archive(archive, file);
  publish_checkpoint(dir, tmp_dir, iter_name(0), 0, false);
  cleanup.armed = false;
}

bool load_checkpoint(const TrainArgs& a, Gpt2& model, ZeroEngine& engine, ProcessGrid& grid, RngTracker& rng, RunState& st) {
  // DeepSpeed's first: Megatron-DeepSpeed writes Megatron's tracker beside DeepSpeed's `latest`.
  if (is_deepspeed_checkpoint(a.load)) return load_imported_checkpoint(a, read_deepspeed_model(a.load), model, engine, grid, rng, st);
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
  if (is_megatron_checkpoint(a.load)) return load_imported_checkpoint(a, read_megatron_model(a.load), model, engine, grid, rng, st);
  CheckpointReader r(a.load);
  const Gpt2Config& c = model->config();
  const Gpt2Config& s = r.config;
  check_same_model(r.path(0, 0), "a checkpoint", s, c, r.layout.tp, a.make_vocab_size_divisible_by, grid.world().rank() == 0);
  ZeroEngine::FullState full;
  for (const auto& item : model->named_parameters()) {
    const std::string& local = item.key();
    const std::string g = model->global_name(local);
    const TpSplit split = Gpt2Impl::tp_split(local);
    std::map<std::string, torch::Tensor>* dest[3] = {&full.params, &full.exp_avg, &full.exp_avg_sq};
    for (int kind = 0; kind < 3; ++kind) {
      torch::Tensor t = r.full(g, kind);
      if (g == "wte.weight") t = fit_vocab(t, c.vocab_size, kind == 0);
      (*dest[kind])[local] = tp_slice(t, split, grid.tp_size(), grid.tp_rank());
    }
  }
  full.step = r.step;
  engine.load_state(full);
  st.iteration = r.iteration;
  st.consumed_train = r.consumed_train;
  st.scheduler_samples = r.scheduler_samples;
  st.loss_scale = r.loss_scale;
  st.consumed_valid = r.consumed_valid;
  // The RNG streams continue where they were when the layout is the same.
  const Layout now{grid.tp_size(), grid.pp_size(), static_cast<int64_t>(model->num_chunks())};
  if (r.layout == now) {
    ShardFile& f = r.file(grid.tp_rank(), grid.pp_rank());
    if (f.rng_cpu.defined()) swap_rng_state(torch::Device(torch::kCPU), f.rng_cpu);
    if (f.rng_tracker.defined() && rng.state().defined()) rng.set_state(f.rng_tracker);
    if (f.rng_device.defined() && !rng.device().is_cpu()) swap_rng_state(rng.device(), f.rng_device);
  } else if (grid.world().rank() == 0) {
    ZLM_LOG_INF(" > checkpoint saved with tensor-parallel %ld x pipeline %ld (x %ld chunks); dropout streams start from the seed",
                (long)r.layout.tp, (long)r.layout.pp, (long)r.layout.chunks);
  }
  ZLM_LOG_INF(" loading checkpoint from %s at iteration %ld (saved by %ld ranks)", a.load.c_str(), (long)r.iteration, (long)r.saved_world);
  return true;
}

Gpt2 load_model(const std::string& dir, int64_t* iteration) {
  if (is_deepspeed_checkpoint(dir) || is_megatron_checkpoint(dir)) {
    ImportedModel m = is_deepspeed_checkpoint(dir) ? read_deepspeed_model(dir) : read_megatron_model(dir);
    *iteration = m.iteration;
    return imported_model(std::move(m), dir);
  }
  CheckpointReader r(dir);
  *iteration = r.iteration;
  Gpt2 model(r.config, ModelPart{}, ParamInit::Empty);  // every parameter is read below
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) item.value().copy_(r.full(item.key(), 0));
  model->eval();
  return model;
}

}  // namespace zlm::trainer
