#include "trainer/checkpoint/deepspeed_format.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>
#include <optional>
#include <regex>
#include <set>

#include "common/core/error.h"
#include "common/core/files.h"
#include "common/core/log.h"
#include "common/core/output_file.h"
#include "trainer/checkpoint/torch_pickle.h"

namespace zlm::trainer {

namespace {

namespace fs = std::filesystem;

// DIR/latest names the tag directory of the newest checkpoint.
std::optional<fs::path> tag_dir(const std::string& dir) {
  const fs::path latest = fs::path(dir) / "latest";
  if (!fs::is_regular_file(latest)) return std::nullopt;
  std::string tag = read_file(latest.string());
  while (!tag.empty() && std::isspace(static_cast<unsigned char>(tag.back()))) tag.pop_back();
  if (tag.empty() || tag.find('/') != std::string::npos) return std::nullopt;
  return fs::path(dir) / tag;
}

std::string model_file(int64_t tp, bool stage3, int64_t dp = 0) {
  return stage3 ? strprintf("zero_pp_rank_%ld_mp_rank_%02ld_model_states.pt", (long)dp, (long)tp)
                : strprintf("mp_rank_%02ld_model_states.pt", (long)tp);
}

// bf16: the name DeepSpeed gives the files of an engine with bf16 on (the only one its bf16 engine looks for).
std::string optim_file(int64_t tp, int64_t dp, bool bf16 = false) {
  return strprintf("%szero_pp_rank_%ld_mp_rank_%02ld_optim_states.pt", bf16 ? "bf16_" : "", (long)dp, (long)tp);
}

// Data-parallel rank D's optimizer file of tensor-parallel rank TT, for every D present, in rank order.
std::vector<fs::path> optim_files(const fs::path& tag, int64_t tp) {
  const std::regex name("(?:bf16_)?zero_pp_rank_([0-9]+)_mp_rank_([0-9]+)_optim_states\\.pt");  // bf16_: DeepSpeed's BF16 optimizer
  std::map<long, fs::path> found;
  bool bf16 = false;
  for (const auto& e : fs::directory_iterator(tag)) {
    std::smatch m;
    const std::string f = e.path().filename().string();
    if (std::regex_match(f, m, name) && std::stol(m[2]) == tp) found[std::stol(m[1])] = e.path(), bf16 = bf16 || f.starts_with("bf16_");
  }
  std::vector<fs::path> out;
  for (auto& [d, p] : found) {
    if (d != static_cast<long>(out.size()))
      throw Error(ErrorKind::Format, "%s: data-parallel rank %zu's file is missing (%s)", tag.c_str(), out.size(),
                  optim_file(tp, static_cast<int64_t>(out.size()), bf16).c_str());
    out.push_back(p);
  }
  return out;
}

// An int, or an int enum (ZeroStageEnum) kept as an inert object with its value as argument.
int64_t int_value(const PyValue& v, const std::string& what) {
  if (v.is(PyValue::Kind::Int) || v.is(PyValue::Kind::Bool)) return v.as_int();
  if (v.is(PyValue::Kind::Object) && v.items.size() == 1 && v.items[0]->is(PyValue::Kind::Int)) return v.items[0]->i;
  throw Error(ErrorKind::Format, "%s is %s, not a number", what.c_str(), v.describe().c_str());
}

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 1;
};

// param_shapes: a list (one entry per parameter group) of name -> torch.Size.
std::vector<std::vector<Param>> param_groups(const PyValue& model_states, const std::string& file) {
  const PyValue* shapes = model_states.find("param_shapes");
  if (!shapes || !shapes->is(PyValue::Kind::List))
    throw Error(ErrorKind::Format, "%s: no param_shapes (the parameters' order in the ZeRO partitions)", file.c_str());
  std::vector<std::vector<Param>> groups;
  for (const auto& g : shapes->items) {
    if (!g->is(PyValue::Kind::Dict)) throw Error(ErrorKind::Format, "%s: param_shapes holds %s", file.c_str(), g->describe().c_str());
    auto& out = groups.emplace_back();
    for (const auto& [k, v] : g->entries) {
      Param p{k->as_str(), {}, 1};
      for (const auto& d : v->items) p.shape.push_back(d->as_int()), p.numel *= d->as_int();
      out.push_back(std::move(p));
    }
  }
  return groups;
}

// How a ZeRO stage lays out the optimizer files: stages 1 and 2 hold one flat
// fp32 vector per parameter group, cut into one piece per rank; stage 3 cuts
// every parameter over the ranks. Decided once, from the stage.
enum class Partitioning { kFlatGroups, kPerParameter };

Partitioning partitioning_of(int64_t zero_stage, const std::string& where) {
  if (zero_stage < 1 || zero_stage > 3) throw Error(ErrorKind::Format, "%s: zero_stage %ld (DeepSpeed's are 1, 2 and 3)", where.c_str(), (long)zero_stage);
  return zero_stage == 3 ? Partitioning::kPerParameter : Partitioning::kFlatGroups;
}

// One data-parallel rank's optimizer file: its pieces of the fp32 weights and moments, one per group.
struct Partition {
  std::vector<torch::Tensor> kind[3];  // weights, exp_avg, exp_avg_sq
  int64_t step = 0;
  bool moments = true;
};

Partition read_partition(const PyValue& file_value, Partitioning layout, size_t groups, const std::string& file) {
  const bool flat = layout == Partitioning::kFlatGroups;
  const PyValue& osd = file_value.at("optimizer_state_dict");
  const PyValue& flats = osd.at(flat ? "single_partition_of_fp32_groups" : "fp32_flat_groups");
  // ZeRO 3 may split a group into sub-groups (sub_group_size), each a flat of its own.
  if (flat ? flats.items.size() != groups : flats.items.size() < groups)
    throw Error(ErrorKind::Format, "%s: %zu fp32 groups, param_shapes has %zu", file.c_str(), flats.items.size(), groups);
  Partition p;
  for (const auto& t : flats.items) p.kind[0].push_back(t->as_tensor().to(torch::kFloat).flatten());
  const PyValue* inner = osd.find(flat ? "base_optimizer_state" : "optimizer_state_dict");
  const PyValue* state = inner ? inner->find("state") : nullptr;
  for (size_t g = 0; g < p.kind[0].size() && p.moments; ++g) {
    const auto e = adam_entry(state, static_cast<int64_t>(g), p.kind[0][g].numel());
    if (!e) {
      p.moments = false;  // no Adam state (another optimizer, or not stepped yet)
      break;
    }
    p.kind[1].push_back(e->exp_avg);
    p.kind[2].push_back(e->exp_avg_sq);
    p.step = e->step;
  }
  return p;
}

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// ZeRO 1 and 2: each group's pieces, joined in rank order, are the parameters in order
// (with DeepSpeed's per-parameter alignment padding where it records one).
void merge_stage12(const std::vector<std::vector<Param>>& groups, const std::vector<Partition>& ranks, const PyValue* paddings,
                   int kind, const std::string& where, const std::function<void(const Param&, torch::Tensor)>& out) {
  const auto world = static_cast<int64_t>(ranks.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<torch::Tensor> pieces;
    for (const Partition& r : ranks) pieces.push_back(r.kind[kind][g]);
    const torch::Tensor full = torch::cat(pieces);
    const PyValue* pad = paddings && g < paddings->items.size() ? paddings->items[g].get() : nullptr;
    int64_t offset = 0;
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const Param& p = groups[g][i];
      if (offset + p.numel > full.numel())
        throw Error(ErrorKind::Format, "%s: group %zu's fp32 partitions hold %ld numbers, too few for %s", where.c_str(), g,
                    (long)full.numel(), p.name.c_str());
      out(p, full.narrow(0, offset, p.numel).reshape(p.shape).clone());
      offset += p.numel + (pad && i < pad->items.size() ? pad->items[i]->as_int() : 0);
    }
    if (align_up(offset, 2 * world) != align_up(full.numel(), 2 * world))
      throw Error(ErrorKind::Format, "%s: group %zu's parameters take %ld numbers of the %ld its partitions hold", where.c_str(), g,
                  (long)offset, (long)full.numel());
  }
}

// ZeRO 3: every parameter is cut into ceil(numel / ranks) pieces, rank D's piece at the same
// offset of its flat vector (its groups joined); the last piece padded.
void merge_stage3(const std::vector<std::vector<Param>>& groups, const std::vector<Partition>& ranks, int kind, const std::string& where,
                  const std::function<void(const Param&, torch::Tensor)>& out) {
  const auto world = static_cast<int64_t>(ranks.size());
  std::vector<torch::Tensor> flat;
  for (const Partition& r : ranks) flat.push_back(torch::cat(r.kind[kind]));
  int64_t offset = 0;
  for (const auto& group : groups)
    for (const Param& p : group) {
      const int64_t piece = (p.numel + world - 1) / world;
      std::vector<torch::Tensor> pieces;
      for (const torch::Tensor& f : flat) {
        if (offset + piece > f.numel())
          throw Error(ErrorKind::Format, "%s: a rank's fp32 partition holds %ld numbers, too few for %s", where.c_str(), (long)f.numel(),
                      p.name.c_str());
        pieces.push_back(f.narrow(0, offset, piece));
      }
      out(p, torch::cat(pieces).narrow(0, 0, p.numel).reshape(p.shape).clone());
      offset += piece;
    }
  if (offset != flat[0].numel())
    throw Error(ErrorKind::Format, "%s: the parameters take %ld numbers of the %ld each rank's partition holds", where.c_str(), (long)offset,
                (long)flat[0].numel());
}

// Megatron-DeepSpeed's GPTModelPipe under DeepSpeed's PipelineModule: spec 0 casts the input, 1 is
// the tied embedding, 2 + l transformer layer l (the legacy names), 2 + L the final LayerNorm and
// 3 + L the tied embedding again as the head (a function of the tied module, saved in no file).
constexpr int64_t kPipeFirstLayer = 2;

// The pipeline engine's checkpoint (PipelineModule, as Megatron-DeepSpeed's GPTModelPipe): one
// file per layer holding parameters, layer_XX[-model_TT]-model_states.pt (XX the layer's index in
// the module's list, global over the stages; TT the tensor-parallel rank), and parameter names
// "XX.<sub>" or "tied_modules.<key>.<sub>" in the ZeRO files. Each layer is told by what it holds:
// the embedding (word_embeddings), a transformer layer (input_layernorm), the final LayerNorm
// (just weight and bias); they become Megatron's legacy names.
class PipeLayers {
 public:
  // Each layer file is classified by its keys alone (a shapes-only read); the weights are read
  // only when asked for (weights()), since the ZeRO partitions usually hold them.
  PipeLayers(const fs::path& tag, int64_t tp) {
    const std::regex name("layer_([0-9]+)(?:-model_([0-9]+))?-model_states\\.pt");
    std::map<long, fs::path> files;
    for (const auto& e : fs::directory_iterator(tag)) {
      std::smatch m;
      const std::string f = e.path().filename().string();
      if (std::regex_match(f, m, name) && (m[2].matched ? std::stol(m[2]) : 0) == tp) files[std::stol(m[1])] = e.path();
    }
    int64_t blocks = 0;
    bool have_embedding = false;
    for (auto& [index, path] : files) {
      const PyValue v = load_torch_file(path.string(), TensorData::kShapesOnly);
      if (!v.is(PyValue::Kind::Dict)) throw Error(ErrorKind::Format, "%s: %s, not a layer's state dict", path.c_str(), v.describe().c_str());
      std::string prefix;
      if (v.find("word_embeddings.weight")) {
        if (have_embedding) continue;  // the last stage's copy of the tied embedding
        have_embedding = true;
        prefix = "language_model.embedding.";
      } else if (v.find("input_layernorm.weight")) {
        prefix = "language_model.encoder.layers." + std::to_string(blocks++) + ".";
      } else if (v.entries.size() == 2 && v.find("weight") && v.find("bias")) {
        prefix = "language_model.encoder.final_layernorm.";
      } else {
        throw Error(ErrorKind::Format, "%s: a layer of a GPT that zerolm does not know (%s)", path.c_str(),
                    v.entries.empty() ? "empty" : v.entries[0].first->as_str().c_str());
      }
      prefixes_[index] = prefix;
      files_.emplace_back(path.string(), prefix);
    }
    paths_ = std::move(files);
  }
  bool empty() const { return files_.empty(); }
  // The indices of the layer files, and one layer's weights under its own keys ("mlp.dense_h_to_4h.weight").
  std::vector<long> indices() const {
    std::vector<long> out;
    for (const auto& [index, path] : paths_) out.push_back(index);
    return out;
  }
  PyValue layer(long index) const { return load_torch_file(paths_.at(index).string()); }
  // The weights as the layer files hold them (the module's dtype), under Megatron's names.
  std::vector<std::pair<std::string, torch::Tensor>> weights() const {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& [file, prefix] : files_)
      for (auto& [k, t] : load_torch_file(file).entries)
        out.emplace_back(prefix + k->as_str(), t->is(PyValue::Kind::Tensor) ? t->as_tensor() : torch::Tensor());
    return out;
  }
  const std::string& file() const { return files_.front().first; }
  // A ZeRO parameter name ("3.mlp.dense_h_to_4h.weight", "tied_modules.embed.word_embeddings.weight") -> Megatron's.
  std::string megatron_name(const std::string& name, const std::string& where) const {
    if (name.starts_with("tied_modules.")) {
      const size_t dot = name.find('.', std::strlen("tied_modules."));
      if (dot != std::string::npos) return "language_model.embedding." + name.substr(dot + 1);
    }
    const size_t dot = name.find('.');
    char* end = nullptr;
    const long index = std::strtol(name.c_str(), &end, 10);
    auto it = prefixes_.find(index);
    if (dot == std::string::npos || end != name.c_str() + dot || it == prefixes_.end())
      throw Error(ErrorKind::Format, "%s: parameter '%s' belongs to no layer file", where.c_str(), name.c_str());
    return it->second + name.substr(dot + 1);
  }

 private:
  std::map<long, std::string> prefixes_;
  std::map<long, fs::path> paths_;
  std::vector<std::pair<std::string, std::string>> files_;  // (file, its Megatron name prefix), in layer order
};

}  // namespace

bool is_deepspeed_checkpoint(const std::string& dir) {
  const auto tag = tag_dir(dir);
  if (!tag || !fs::is_directory(*tag)) return false;
  // Megatron-DeepSpeed writes Megatron's tracker beside `latest`, naming the same step, but no
  // iter_N directory. One that exists was saved later into the same directory (pretrain_gpt
  // continuing with --load X --save X): the newer checkpoint is that one.
  if (const auto tracked = megatron_tracked_dir(dir); tracked && fs::is_directory(*tracked)) return false;
  if (fs::exists(*tag / model_file(0, false)) || fs::exists(*tag / model_file(0, true))) return true;
  for (const auto& e : fs::directory_iterator(*tag))
    if (e.path().filename().string().starts_with("layer_") && e.path().filename().string().ends_with("model_states.pt")) return true;
  return false;
}

namespace {

// What the optimizer of an engine without ZeRO saved in the model file: torch's state dict, or
// DeepSpeed's fp16/bf16 wrapper of it with fp32 master weights, one per parameter
// (FP16_UnfusedOptimizer's fp32_groups) or one flat vector per group (FP16_Optimizer's
// fp32_groups_flat), read by read_torch_optimizer_state; without master weights a state of
// another layout is no error (Adam starts afresh, as said at resume).
TorchOptimizerState module_optimizer(const PyValue& module, const PyValue* opt) {
  TorchOptimizerState out;
  if (!opt || !opt->is(PyValue::Kind::Dict)) return out;
  const PyValue* masters = opt->find("fp32_groups");
  bool flat = false;
  if (!masters) {
    masters = opt->find("fp32_groups_flat");
    flat = masters != nullptr;
  }
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& [k, v] : module.entries)
    if (v->is(PyValue::Kind::Tensor) && !is_extra_state(k->as_str())) params.emplace_back(k->as_str(), v->tensor);
  try {
    if (masters && !masters->is(PyValue::Kind::List)) throw Error(ErrorKind::Format, "its fp32 master weights are %s", masters->describe().c_str());
    out = read_torch_optimizer_state(masters ? opt->at("optimizer_state_dict") : *opt, masters, flat, params);
  } catch (const Error& e) {
    out.why = e.what();
  }
  if (!out.why.empty()) out.master.clear(), out.exp_avg.clear(), out.exp_avg_sq.clear();
  if (!masters) out.why.clear();  // torch's own state of another layout: Adam starts afresh, as said at resume
  return out;
}

// fp16's dynamic loss scale where a DeepSpeed optimizer state keeps it (ZeRO's and FP16_Optimizer's
// `loss_scaler`, a DynamicLossScaler whose attributes are read, or FP16_Optimizer's own cur_scale),
// into m as Megatron's grad scaler counts it. Nothing for a static scale (bf16's, --loss-scale).
void read_loss_scale(const PyValue& osd, ImportedModel& m) {
  if (const PyValue* d = osd.find("dynamic_loss_scale"); !d || !d->is(PyValue::Kind::Bool) || !d->b) return;
  const PyValue* holder = osd.find("loss_scaler");
  if (!holder || !holder->is(PyValue::Kind::Object)) holder = &osd;
  auto number = [&](const char* key) -> std::optional<double> {
    const PyValue* v = holder->find(key);
    if (!v || !(v->is(PyValue::Kind::Float) || v->is(PyValue::Kind::Int))) return std::nullopt;
    return v->as_float();
  };
  const std::optional<double> scale = number("cur_scale");
  if (!scale || !(*scale > 0) || !std::isfinite(*scale)) return;
  const auto it = number("cur_iter"), last = number("last_overflow_iter"), hysteresis = number("cur_hysteresis");
  m.loss_scale = {.scale = *scale,
                  .growth_tracker = it && last ? std::max<int64_t>(0, static_cast<int64_t>(*it - *last) - 1) : 0,
                  .hysteresis_tracker = hysteresis ? static_cast<int64_t>(*hysteresis) : std::numeric_limits<int64_t>::max()};  // unsaid: all of it
}

// Reads one DeepSpeed checkpoint directory into an ImportedModel, tensor-parallel
// rank by rank: from the ZeRO partitions where there are any, else from the
// pipeline's layer files or the module.
class DeepSpeedReader {
  // Runs fn; an error about a file's content that names no file of the checkpoint (a missing
  // key, a value of another type) is said again with `file`'s path.
  template <class F>
  auto naming(const fs::path& file, F&& fn) -> decltype(fn()) {
    try {
      return fn();
    } catch (const Error& e) {
      if (std::string_view(e.what()).find(tag_->string()) != std::string_view::npos) throw;
      throw Error(e.kind(), "%s: %s", file.c_str(), e.what());
    }
  }

 public:
  explicit DeepSpeedReader(const std::string& dir) : tag_(open_tag(dir)), join_(m_) {}

  ImportedModel read() {
    PyValue head = read_head();
    for (int64_t tp = 0; tp < m_.tp; ++tp) {
      const fs::path mfile = *tag_ / model_file(tp, stage3_);
      if (!fs::exists(mfile)) throw Error(ErrorKind::Format, "%s: missing (the checkpoint was saved with TP %ld)", mfile.c_str(), (long)m_.tp);
      naming(mfile, [&] { read_rank(tp, tp == 0 ? std::move(head) : load_torch_file(mfile.string()), mfile); });
    }
    join_.finish(tag_->string());
    if (!moments_) m_.exp_avg.clear(), m_.exp_avg_sq.clear();
    return std::move(m_);
  }

 private:
  static fs::path open_tag(const std::string& dir) {
    const auto tag = tag_dir(dir);
    if (!tag || !fs::is_directory(*tag)) throw Error(ErrorKind::Usage, "%s: no DeepSpeed checkpoint (no `latest` naming a tag directory)", dir.c_str());
    return *tag;
  }

  // The first model-states file: the counters and Megatron's args (the model's shape).
  PyValue read_head() {
    stage3_ = !fs::exists(*tag_ / model_file(0, false));
    const fs::path first = *tag_ / model_file(0, stage3_);
    if (!fs::exists(first))
      throw Error(ErrorKind::Format, "%s: no %s or %s (the file with the engine's state and Megatron's args)", tag_->c_str(),
                  model_file(0, false).c_str(), model_file(0, true).c_str());
    m_.format = "DeepSpeed";
    PyValue head = load_torch_file(first.string());
    const PyValue* it = head.find("iteration");
    m_.iteration = naming(first, [&] { return it ? it->as_int() : head.at("global_steps").as_int(); });
    const PyValue* args = head.find("args");
    if (!args || args->is(PyValue::Kind::None))
      throw Error(ErrorKind::Usage, "%s: no Megatron args beside the model (Megatron-DeepSpeed saves them): the model's attention heads are "
                  "in no tensor's shape, so zerolm cannot tell its architecture", first.c_str());
    read_megatron_args(*args, first.string(), m_);
    if (!args->find("consumed_train_samples"))
      if (const PyValue* s = head.find("global_samples")) m_.consumed_train = s->as_int();
    m_.scheduler_samples = scheduler_samples_of(head, m_);
    return head;
  }

  void read_rank(int64_t tp, const PyValue& states, const fs::path& mfile) {
    if (PartRng rng = read_megatron_rng(states, mfile.string()); rng.cpu.defined()) m_.rng[{tp, 0}] = std::move(rng);
    const std::vector<fs::path> files = optim_files(*tag_, tp);
    const PipeLayers pipe(*tag_, tp);
    if (pipe.empty() && m_.pp > 1)
      throw Error(ErrorKind::Format, "%s: args say %ld pipeline stages, but there are no layer files for tensor-parallel rank %ld", tag_->c_str(),
                  (long)m_.pp, (long)tp);
    if (!pipe.empty()) return read_pipeline_rank(tp, states, files, pipe);
    if (files.empty()) {  // no ZeRO partitions: the weights are the module's
      if (stage3_) throw Error(ErrorKind::Format, "%s: a ZeRO-3 checkpoint without its optim_states files (they hold the weights)", tag_->c_str());
      return from_module(tp, states, mfile);
    }
    from_partitions(tp, states, mfile, files, [](const std::string& name) { return name; });
  }

  // Without ZeRO the weights are the module's, or the fp32 master weights that DeepSpeed's fp16
  // and bf16 optimizers keep beside it, and Adam's state is in the model file too
  // (module_optimizer).
  void from_module(int64_t tp, const PyValue& states, const fs::path& mfile) {
    const PyValue& module = states.at("module");
    const TorchOptimizerState o = module_optimizer(module, states.find("optimizer"));
    if (const PyValue* opt = states.find("optimizer"); opt && opt->is(PyValue::Kind::Dict)) read_loss_scale(*opt, m_);
    if (!o.why.empty())
      ZLM_LOG_WRN("%s: the optimizer's fp32 master weights are not read (%s); the module's 16-bit weights are", mfile.c_str(), o.why.c_str());
    if (o.exp_avg.empty()) moments_ = false;
    if (!o.exp_avg.empty()) m_.adam_step = o.step;
    for (const auto& [k, v] : module.entries) {
      const std::string name = k->as_str();
      const auto w = o.master.find(name);
      const auto m = o.exp_avg.find(name), sq = o.exp_avg_sq.find(name);
      const torch::Tensor weight = w != o.master.end() ? w->second : v->is(PyValue::Kind::Tensor) ? v->as_tensor() : torch::Tensor();
      join_.add(tp, 0, name, weight, mfile.string(), m != o.exp_avg.end() ? m->second : torch::Tensor(),
                sq != o.exp_avg_sq.end() ? sq->second : torch::Tensor());
    }
  }

  // The pipeline engine's model-states and optim files are per model-parallel rank of its grid,
  // stage s and tensor-parallel rank t being rank s x TP + t (DeepSpeed's grid orders the
  // ranks of a data-parallel replica so): mp_rank_MM, zero_pp_rank_D_mp_rank_MM. Without them
  // the weights are the layer files' and Adam starts afresh.
  int64_t pipe_mp_rank(int64_t stage, int64_t tp) const { return stage * m_.tp + tp; }
  void read_pipeline_rank(int64_t tp, const PyValue& states, const std::vector<fs::path>& files, const PipeLayers& pipe) {
    std::vector<std::vector<fs::path>> stage_files;  // per stage, its data-parallel ranks' optim files
    bool partitions = states.find("param_shapes") != nullptr;
    for (int64_t s = 0; s < m_.pp && partitions; ++s) {
      stage_files.push_back(s == 0 ? files : optim_files(*tag_, pipe_mp_rank(s, tp)));
      partitions = fs::exists(*tag_ / model_file(pipe_mp_rank(s, tp), false)) && !stage_files.back().empty();
    }
    if (!partitions) {
      if (files.empty() && pipeline_stage_optimizers(tp, states, pipe)) return;
      moments_ = false;
      for (const auto& [name, w] : pipe.weights()) join_.add(tp, 0, name, w, pipe.file());
      return;
    }
    for (int64_t s = 0; s < m_.pp; ++s) {
      const fs::path sfile = *tag_ / model_file(pipe_mp_rank(s, tp), false);
      auto rename = [&](const std::string& name) { return pipe.megatron_name(name, sfile.string()); };
      from_partitions(tp, s == 0 ? states : load_torch_file(sfile.string()), sfile, stage_files[static_cast<size_t>(s)], rename);
    }
  }

  // Without ZeRO each stage's model file holds the optimizer of the stage's parameters, which
  // that file does not name: they are the pipeline module's, in its order (the tied embedding on
  // the first and the last stage, then the stage's layers by index), the layers cut evenly over
  // the stages as Megatron-DeepSpeed's partition of its transformer layers does. Their weights
  // are the layer files'; read_torch_optimizer_state (module_optimizer) numbers them through
  // Megatron's groups. False (nothing added) when a stage's optimizer state does not fit.
  bool pipeline_stage_optimizers(int64_t tp, const PyValue& stage0, const PipeLayers& pipe) {
    const std::vector<long> indices = pipe.indices();
    const int64_t per_stage = m_.config.num_layers / m_.pp;
    // the embedding (kPipeFirstLayer - 1), the layers and the final LayerNorm after them, each in a file
    if (m_.config.num_layers % m_.pp != 0 || static_cast<int64_t>(indices.size()) != m_.config.num_layers + 2) return false;
    for (size_t i = 0; i < indices.size(); ++i)
      if (indices[i] != static_cast<long>(i) + kPipeFirstLayer - 1) return false;
    const PyValue embedding = pipe.layer(kPipeFirstLayer - 1);
    std::vector<std::pair<std::string, TorchOptimizerState>> stages;
    for (int64_t s = 0; s < m_.pp; ++s) {
      const fs::path sfile = *tag_ / model_file(pipe_mp_rank(s, tp), false);
      if (s > 0 && !fs::exists(sfile)) return false;
      const PyValue states = s == 0 ? PyValue() : load_torch_file(sfile.string());
      auto module = std::make_shared<PyValue>();
      module->kind = PyValue::Kind::Dict;
      auto add = [&](const std::string& prefix, const PyValue& layer) {
        for (const auto& [k, t] : layer.entries) module->entries.emplace_back(py_str(prefix + k->as_str()), t);
      };
      if (s == 0 || s == m_.pp - 1) add("tied_modules.embed.", embedding);
      for (int64_t l = s * per_stage; l < (s + 1) * per_stage; ++l)
        add(std::to_string(kPipeFirstLayer + l) + ".", pipe.layer(kPipeFirstLayer + l));
      const int64_t norm = kPipeFirstLayer + m_.config.num_layers;
      if (s == m_.pp - 1) add(std::to_string(norm) + ".", pipe.layer(norm));
      TorchOptimizerState o = module_optimizer(*module, (s == 0 ? stage0 : states).find("optimizer"));
      if (o.exp_avg.size() != o.exp_avg_sq.size() || o.exp_avg.empty() || !o.why.empty()) return false;
      for (const auto& [k, t] : module->entries)
        if (!o.exp_avg.count(k->as_str())) return false;
      for (const auto& [k, t] : module->entries) o.master.try_emplace(k->as_str(), t->as_tensor());  // fp32 runs keep no masters
      stages.emplace_back(sfile.string(), std::move(o));
    }
    read_loss_scale(stage0.at("optimizer"), m_);
    std::set<std::string> seen;  // the last stage's copy of the tied embedding is skipped
    for (const auto& [file, o] : stages)
      for (const auto& [name, w] : o.master) {
        const std::string theirs = pipe.megatron_name(name, file);
        if (!seen.insert(theirs).second) continue;
        join_.add(tp, 0, theirs, w, file, o.exp_avg.at(name), o.exp_avg_sq.at(name));
      }
    m_.adam_step = stages.front().second.step;
    return true;
  }

  // Every data-parallel rank's partition of one model-states file.
  std::vector<Partition> read_partitions(const std::vector<fs::path>& files, size_t groups, Partitioning* layout, PyValue* rank0) {
    std::vector<Partition> ranks;
    for (size_t d = 0; d < files.size(); ++d) naming(files[d], [&] {
      PyValue f = load_torch_file(files[d].string());
      const PyValue& osd = f.at("optimizer_state_dict");
      if (d == 0) {
        // DeepSpeed's BF16_Optimizer (ZeRO 1's layout, padding kept in the weights) records no stage.
        const PyValue* stage = osd.find("zero_stage");
        *layout = !stage && osd.find("single_partition_of_fp32_groups")
                      ? Partitioning::kFlatGroups
                      : partitioning_of(int_value(osd.at("zero_stage"), files[d].string() + ": zero_stage"), files[d].string());
        const PyValue& count = osd.at("partition_count");
        int64_t world = 0;
        if (count.is(PyValue::Kind::List))
          for (const auto& c : count.items) world = std::max(world, c->as_int());
        else
          world = count.as_int();
        if (world != static_cast<int64_t>(files.size()))
          throw Error(ErrorKind::Format, "%s: saved by %ld data-parallel ranks, but %zu optim_states files are there (an overwritten or "
                      "incomplete checkpoint?)", tag_->c_str(), (long)world, files.size());
      }
      ranks.push_back(read_partition(f, *layout, groups, files[d].string()));
      moments_ = moments_ && ranks.back().moments;
      if (d == 0) *rank0 = std::move(f);
    });
    return ranks;
  }

  // One model-states file's parameters rebuilt from its ZeRO partitions (zero_to_fp32's
  // rules), added under Megatron's names; a name seen before (the tied embedding's copy on
  // another pipeline stage) is skipped.
  void from_partitions(int64_t tp, const PyValue& states, const fs::path& mfile, const std::vector<fs::path>& files,
                       const std::function<std::string(const std::string&)>& rename) {
    const auto groups = param_groups(states, mfile.string());
    Partitioning layout = Partitioning::kFlatGroups;
    PyValue rank0;
    const std::vector<Partition> ranks = read_partitions(files, groups.size(), &layout, &rank0);
    const PyValue* paddings = layout == Partitioning::kFlatGroups ? rank0.at("optimizer_state_dict").find("param_alignment_paddings") : nullptr;
    if (paddings && !paddings->is(PyValue::Kind::List)) paddings = nullptr;
    read_loss_scale(rank0.at("optimizer_state_dict"), m_);
    m_.adam_step = ranks[0].step;
    std::map<std::string, torch::Tensor> found[3];
    for (int kind = 0; kind < (moments_ ? 3 : 1); ++kind) {
      auto out = [&](const Param& p, torch::Tensor t) { found[kind][p.name] = std::move(t); };
      if (layout == Partitioning::kFlatGroups)
        merge_stage12(groups, ranks, paddings, kind, tag_->string(), out);
      else
        merge_stage3(groups, ranks, kind, tag_->string(), out);
    }
    for (auto& [name, w] : found[0]) {
      const std::string theirs = rename(name);
      if (!added_.insert(std::to_string(tp) + " " + theirs).second) continue;
      join_.add(tp, 0, theirs, w, mfile.string(), moments_ ? found[1].at(name) : torch::Tensor(), moments_ ? found[2].at(name) : torch::Tensor());
    }
  }

  std::optional<fs::path> tag_;
  ImportedModel m_;
  MegatronJoin join_;
  bool stage3_ = false;  // ZeRO 3's per-rank model-states files
  bool moments_ = true;
  std::set<std::string> added_;
};

constexpr const char* kDeepSpeedVersion = "0.19.8";  // the DeepSpeed whose layout we write
constexpr int64_t kSubGroupSize = 1000000000;        // DeepSpeed's default zero_optimization.sub_group_size

// A part's parameters in the engine's two groups, as Megatron's optimizer forms them: decay on
// matrices, none on biases and LayerNorms (1-D); each in the module's order.
struct Group {
  std::vector<std::string> names;
  std::vector<torch::Tensor> w, m, v;  // flat fp32, in `names` order
  double weight_decay = 0, wd_mult = 1;
};

// Megatron's two groups (megatron_optimizer_groups: weight decay on the matrices, none on the
// biases and LayerNorms), both kept even if one were empty.
std::vector<Group> groups_of(const PyValue& module, const PyValue& exp_avg, const PyValue& exp_avg_sq, double weight_decay) {
  std::vector<Group> g(2);
  g[0].weight_decay = weight_decay;
  g[1].wd_mult = 0;
  for (const auto& [k, t] : module.entries) {
    if (!t->is(PyValue::Kind::Tensor)) continue;  // _extra_state
    Group& to = g[megatron_no_weight_decay(k->as_str(), t->tensor) ? 1 : 0];
    to.names.push_back(k->as_str());
    to.w.push_back(t->tensor.flatten());
    to.m.push_back(exp_avg.at(k->as_str()).as_tensor().flatten());
    to.v.push_back(exp_avg_sq.at(k->as_str()).as_tensor().flatten());
  }
  return g;
}

// One data-parallel rank's pieces: weights and moments per (sub-)group, and what the file records about them.
struct RankPieces {
  std::vector<torch::Tensor> w, m, v;
  std::vector<int64_t> group_padding;                     // ZeRO 1-2: the padding this rank holds, per group
  std::vector<std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>>> slices;  // ZeRO 1-2: name -> (start, numel) in the piece
  std::vector<size_t> sub_group_of;                        // ZeRO 3: each flat's group
};

// [start, start + len) of a flat vector, zeros past its end (the alignment padding): a new tensor
// of `len` numbers, so that no rank's piece copies the whole vector.
torch::Tensor padded_slice(const torch::Tensor& flat, int64_t start, int64_t len) {
  torch::Tensor out = torch::zeros({len});
  const int64_t have = std::clamp<int64_t>(flat.numel() - start, 0, len);
  if (have > 0) out.narrow(0, 0, have).copy_(flat.narrow(0, start, have));
  return out;
}

// Each group's weights and moments as one flat vector each (ZeRO 1-2 cut these), made once for all ranks.
struct GroupFlats {
  torch::Tensor w, m, v;
};
std::vector<GroupFlats> group_flats(const std::vector<Group>& groups) {
  std::vector<GroupFlats> out;
  for (const Group& g : groups) out.push_back({torch::cat(g.w), torch::cat(g.m), torch::cat(g.v)});
  return out;
}

// ZeRO 1 and 2: each group's flat vector padded to a multiple of 2 x ranks and cut evenly; each
// rank holds the padding inside its piece (the last rank's, or several ranks' when there are
// more ranks than numbers to spare). Weights are saved without it, the moments with it (as
// DeepSpeed does).
RankPieces flat_pieces(const std::vector<Group>& groups, const std::vector<GroupFlats>& flats, int64_t d, int64_t dp) {
  RankPieces r;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Group& g = groups[gi];
    const GroupFlats& f = flats[gi];
    const int64_t numel = f.w.numel();
    const int64_t padded = align_up(numel, 2 * dp), piece = padded / dp, start = d * piece;
    const int64_t padding = std::clamp<int64_t>(start + piece - numel, 0, piece);
    r.w.push_back(padded_slice(f.w, start, piece - padding));
    r.m.push_back(padded_slice(f.m, start, piece));
    r.v.push_back(padded_slice(f.v, start, piece));
    r.group_padding.push_back(padding);
    auto& slices = r.slices.emplace_back();
    int64_t offset = 0;
    for (size_t i = 0; i < g.names.size(); ++i) {
      const int64_t lo = std::max(offset, start), hi = std::min(offset + g.w[i].numel(), start + piece);
      if (lo < hi) slices.emplace_back(g.names[i], std::make_pair(lo - start, hi - lo));
      offset += g.w[i].numel();
    }
  }
  return r;
}

// ZeRO 3: every parameter cut into ceil(numel / ranks) pieces (the last padded), rank D's pieces
// joined per sub-group: a group's parameters split where their pieces reach sub_group_size.
RankPieces per_parameter_pieces(const std::vector<Group>& groups, int64_t d, int64_t dp) {
  RankPieces r;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Group& g = groups[gi];
    std::vector<torch::Tensor> w, m, v;
    int64_t local = 0;
    auto close = [&] {
      r.w.push_back(torch::cat(w)), r.m.push_back(torch::cat(m)), r.v.push_back(torch::cat(v));
      r.sub_group_of.push_back(gi);
      w.clear(), m.clear(), v.clear(), local = 0;
    };
    for (size_t i = 0; i < g.names.size(); ++i) {
      const int64_t n = g.w[i].numel(), piece = (n + dp - 1) / dp;
      auto cut = [&](const torch::Tensor& t) { return padded_slice(t, d * piece, piece); };
      w.push_back(cut(g.w[i])), m.push_back(cut(g.m[i])), v.push_back(cut(g.v[i]));
      local += piece;
      if (local >= kSubGroupSize) close();
    }
    if (!w.empty()) close();
  }
  return r;
}

// torch.optim.AdamW's state_dict() over one flat parameter per (sub-)group: Adam's state, and the
// groups with AdamW's hyperparameters and Megatron's multipliers (its scheduler reads wd_mult).
std::shared_ptr<PyValue> adamw_state(const std::vector<Group>& groups, const RankPieces& r, const DeepSpeedRun& run) {
  auto state = py_dict();
  for (size_t i = 0; i < r.m.size(); ++i) {
    auto s = py_dict();
    s->entries.emplace_back(py_str("step"), py_tensor(torch::tensor(static_cast<float>(run.adam_step))));
    s->entries.emplace_back(py_str("exp_avg"), py_tensor(r.m[i]));
    s->entries.emplace_back(py_str("exp_avg_sq"), py_tensor(r.v[i]));
    state->entries.emplace_back(py_int(static_cast<int64_t>(i)), s);
  }
  auto param_groups = py_list();
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    auto g = py_dict();
    auto put = [&](const char* k, std::shared_ptr<PyValue> v) { g->entries.emplace_back(py_str(k), std::move(v)); };
    put("weight_decay", py_float(groups[gi].weight_decay));
    put("lr", py_float(run.lr));
    put("betas", py_tuple({py_float(run.beta1), py_float(run.beta2)}));
    put("eps", py_float(run.eps));
    for (const char* off : {"amsgrad", "maximize"}) put(off, py_bool(false));
    put("foreach", py_none());
    for (const char* off : {"capturable", "differentiable"}) put(off, py_bool(false));
    put("fused", py_none());
    put("decoupled_weight_decay", py_bool(true));
    put("wd_mult", py_float(groups[gi].wd_mult));
    put("lr_mult", py_float(1.0));
    auto params = py_list();
    for (size_t i = 0; i < r.m.size(); ++i)
      if ((r.sub_group_of.empty() ? i : r.sub_group_of[i]) == gi) params->items.push_back(py_int(static_cast<int64_t>(i)));
    put("params", params);
    param_groups->items.push_back(g);
  }
  auto out = py_dict();
  out->entries.emplace_back(py_str("state"), state);
  out->entries.emplace_back(py_str("param_groups"), param_groups);
  return out;
}

// DeepSpeed's loss scaler as its optimizers pickle it: static (scale 1 without fp16), or dynamic
// with fp16, starting its window afresh.
std::shared_ptr<PyValue> loss_scaler(const DeepSpeedRun& run) {
  auto f = py_dict();
  auto put = [&](const char* k, std::shared_ptr<PyValue> v) { f->entries.emplace_back(py_str(k), std::move(v)); };
  put("cur_scale", py_float(run.loss_scale));
  if (!run.dynamic_loss_scale) {
    put("dynamic", py_bool(false));
    return py_object("deepspeed.runtime.fp16.loss_scaler.LossScaler", f);
  }
  put("cur_iter", py_int(run.iteration));
  // DeepSpeed grows the scale when (cur_iter - last_overflow_iter) reaches its window at an
  // update: after the clean steps counted so far, as Megatron's growth tracker does.
  put("last_overflow_iter", py_int(run.iteration - 1 - run.loss_scale_growth));
  put("scale_factor", py_float(2.0));
  put("scale_window", py_int(run.loss_scale_window));
  put("min_scale", py_float(run.min_loss_scale));
  put("delayed_shift", py_int(run.hysteresis));
  // DeepSpeed's hysteresis stops at 1 (the next overflow scales down), where Megatron's tracker goes below.
  put("cur_hysteresis", py_int(std::max<int64_t>(1, run.hysteresis_left.value_or(run.hysteresis))));
  put("consecutive_hysteresis", py_bool(false));
  put("raise_error_at_min_scale", py_bool(true));
  put("dynamic", py_bool(true));
  put("dtype", py_global("torch.float16"));
  return py_object("deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler", f);
}

// Without ZeRO, the fp32 engine saves torch's AdamW state as it is: one entry per parameter, in
// its shape, numbered through the groups.
std::shared_ptr<PyValue> per_parameter_adamw_state(const std::vector<Group>& groups, const PyValue& module, const DeepSpeedRun& run) {
  RankPieces whole;
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].names.size(); ++i) {
      const auto shape = module.at(groups[g].names[i]).tensor.sizes();
      whole.m.push_back(groups[g].m[i].view(shape)), whole.v.push_back(groups[g].v[i].view(shape)), whole.sub_group_of.push_back(g);
    }
  return adamw_state(groups, whole, run);
}

// Without ZeRO, an fp16 or bf16 engine over a fused Adam (Megatron-DeepSpeed's, apex's or
// DeepSpeed's FusedAdam) wraps it in FP16_Optimizer, which saves in the model file's `optimizer`
// the loss scale (fp16 only), the inner optimizer's state over one flat fp32 vector per group, and
// those vectors: the master weights.
std::shared_ptr<PyValue> fused_fp16_optimizer_state(const std::vector<Group>& groups, const DeepSpeedRun& run) {
  auto o = py_dict();
  auto put = [&](const char* k, std::shared_ptr<PyValue> v) { o->entries.emplace_back(py_str(k), std::move(v)); };
  if (run.fp16) {
    put("dynamic_loss_scale", py_bool(run.dynamic_loss_scale));
    put("cur_scale", py_float(run.loss_scale));
    put("cur_iter", py_int(run.iteration));
    if (run.dynamic_loss_scale) {
      put("last_overflow_iter", py_int(run.iteration - 1));  // the scale's window starts at the next step
      put("scale_factor", py_float(2.0));
      put("scale_window", py_int(run.loss_scale_window));
      // Not DeepSpeed's (FP16_Optimizer keeps no hysteresis; its loader ignores the key): ours, so
      // that pretrain_gpt resumes its own files with the scale's hysteresis where it was.
      put("cur_hysteresis", py_int(std::max<int64_t>(1, run.hysteresis_left.value_or(run.hysteresis))));
    }
  }
  RankPieces flats;  // one flat parameter per group: the state's entry g is group g's
  for (const GroupFlats& f : group_flats(groups)) flats.w.push_back(f.w), flats.m.push_back(f.m), flats.v.push_back(f.v);
  put("optimizer_state_dict", adamw_state(groups, flats, run));
  auto masters = py_list();
  for (const torch::Tensor& w : flats.w) masters->items.push_back(py_tensor(w));
  put("fp32_groups_flat", masters);
  put("clip_grad", py_float(run.clip_grad));
  return o;
}

// Rank D's optim-states file.
PyValue optim_states(const std::vector<Group>& groups, const RankPieces& r, const DeepSpeedRun& run, const std::shared_ptr<PyValue>& ds_config) {
  const bool flat = run.stage < 3;
  auto osd = py_dict();
  auto put = [&](const char* k, std::shared_ptr<PyValue> v) { osd->entries.emplace_back(py_str(k), std::move(v)); };
  auto tensors = [](const std::vector<torch::Tensor>& ts) {
    auto l = py_list();
    for (const torch::Tensor& t : ts) l->items.push_back(py_tensor(t));
    return l;
  };
  if (!flat) put("zero_stage", py_int(run.stage));
  put("loss_scaler", loss_scaler(run));
  put("dynamic_loss_scale", py_bool(run.dynamic_loss_scale));
  put("overflow", py_bool(false));
  if (flat) {
    put("clip_grad", py_float(run.clip_grad));
    put("base_optimizer_state", adamw_state(groups, r, run));
    put("single_partition_of_fp32_groups", tensors(r.w));
    put("zero_stage", py_int(run.stage));
    auto paddings = py_list(), alignment = py_list(), counts = py_list(), slices = py_list();
    for (size_t g = 0; g < groups.size(); ++g) {
      paddings->items.push_back(py_int(r.group_padding[g]));
      auto zeros = py_list();
      for (size_t i = 0; i < groups[g].names.size(); ++i) zeros->items.push_back(py_int(0));
      alignment->items.push_back(zeros);
      counts->items.push_back(py_int(run.dp_size));
      auto map = py_dict();  // DeepSpeed's fragment_address(numel, start) of each parameter this rank holds a piece of
      for (const auto& [name, at] : r.slices[g]) {
        auto addr = py_dict();
        addr->entries.emplace_back(py_str("numel"), py_int(at.second));
        addr->entries.emplace_back(py_str("start"), py_int(at.first));
        map->entries.emplace_back(py_str(name), py_object("deepspeed.utils.tensor_fragment.fragment_address", addr));
      }
      slices->items.push_back(map);
    }
    put("group_paddings", paddings);
    put("param_alignment_paddings", alignment);
    put("partition_count", counts);
    put("ds_version", py_str(kDeepSpeedVersion));
    put("param_slice_mappings", slices);
  } else {
    put("partition_count", py_int(run.dp_size));
    put("optimizer_state_dict", adamw_state(groups, r, run));
    put("fp32_flat_groups", tensors(r.w));
  }
  PyValue top;
  top.kind = PyValue::Kind::Dict;
  top.entries.emplace_back(py_str("optimizer_state_dict"), osd);
  top.entries.emplace_back(py_str("ds_config"), ds_config);
  top.entries.emplace_back(py_str("ds_version"), py_str(kDeepSpeedVersion));
  return top;
}

// What DeepSpeed's universal-checkpoint converter (ds_to_universal) needs to merge the
// tensor-parallel slices: the tensors every TP rank holds whole (LayerNorms, position
// embeddings, the row-parallel layers' biases) and those cut along their rows' inputs (the
// row-parallel weights); the rest are cut along dimension 0. Under megatron-core's names, or
// the pipeline module's (a layer's spec index first; the final LayerNorm is "N.weight"), where
// the tied embedding, which the first and the last stage both hold, is also named as
// replicated over the stages so that the converter takes the first stage's. The converter
// (strict, its default) fails on a pattern that names no parameter: each list names only
// parameters the files have. No vocabulary patterns: with them the converter cuts the padded
// rows, which training updates, and a resume would start them from zero.
std::shared_ptr<PyValue> universal_checkpoint_info(bool pipeline) {
  auto patterns = [](std::initializer_list<const char*> ps) {
    auto l = py_list();
    for (const char* p : ps) l->items.push_back(py_str(p));
    return l;
  };
  auto info = py_dict();
  auto put = [&](const char* key, std::shared_ptr<PyValue> list) { info->entries.emplace_back(py_str(key), std::move(list)); };
  put("universal_checkpoint_version", py_float(0.4));
  if (pipeline) {
    put("tp_replicated_parameter_patterns",
        patterns({R"(tied_modules\.embed\.position_embeddings\.weight$)", R"(\d+\.input_layernorm\.)", R"(\d+\.post_attention_layernorm\.)",
                  R"(\d+\.(weight|bias)$)", R"(\d+\.self_attention\.dense\.bias$)", R"(\d+\.mlp\.dense_4h_to_h\.bias$)"}));
    put("parameter_with_row_parallelism_patterns", patterns({R"(\d+\.self_attention\.dense\.weight$)", R"(\d+\.mlp\.dense_4h_to_h\.weight$)"}));
    put("pipeline_replicated_parameter_patterns", patterns({R"(tied_modules\.embed\.)"}));
    return info;
  }
  put("tp_replicated_parameter_patterns",
      patterns({R"(embedding\.position_embeddings\.weight$)", R"(decoder\.layers\.\d+\.input_layernorm\.)",
                R"(decoder\.layers\.\d+\.pre_mlp_layernorm\.)", R"(decoder\.final_layernorm\.)",
                R"(decoder\.layers\.\d+\.self_attention\.linear_proj\.bias$)", R"(decoder\.layers\.\d+\.mlp\.linear_fc2\.bias$)"}));
  put("parameter_with_row_parallelism_patterns",
      patterns({R"(decoder\.layers\.\d+\.self_attention\.linear_proj\.weight$)", R"(decoder\.layers\.\d+\.mlp\.linear_fc2\.weight$)"}));
  return info;
}

// The engine's model-states file: the module (ZeRO 3: empty tensors, the weights being in the
// partitions), the groups' parameter shapes in order, counters, the scheduler, the config, and
// Megatron-DeepSpeed's client state (args, iteration, and run.client_state's: its rng_state).
PyValue model_states(const std::shared_ptr<PyValue>& module, const std::vector<Group>& groups, const MegatronPart& part,
                     const DeepSpeedRun& run, const std::shared_ptr<PyValue>& ds_config, const std::shared_ptr<PyValue>& optimizer, bool pipeline) {
  const bool stage3 = run.stage == 3, zero = run.stage > 0;
  PyValue top;
  top.kind = PyValue::Kind::Dict;
  auto put = [&](const char* k, std::shared_ptr<PyValue> v) { top.entries.emplace_back(py_str(k), std::move(v)); };
  // The module in the training dtype (ZeRO 3: empty tensors). megatron-core's _extra_state
  // entries are empty byte tensors, as Transformer Engine's layers save theirs: its local layers
  // ignore the value, and DeepSpeed's universal-checkpoint converter calls .float() on every
  // module entry, which a None stops.
  const auto dtype = run.bf16 ? torch::kBFloat16 : run.fp16 ? torch::kHalf : torch::kFloat;
  auto mod = py_dict();
  for (const auto& [k, v] : module->entries) {
    if (!v->is(PyValue::Kind::Tensor)) mod->entries.emplace_back(k, is_extra_state(k->as_str()) ? py_tensor(torch::empty({0}, torch::kUInt8)) : v);
    else mod->entries.emplace_back(k, py_tensor(stage3 ? torch::empty({0}, dtype) : v->tensor.to(dtype)));
  }
  put("module", pipeline ? py_none() : mod);  // the pipeline engine keeps its weights in the layer files
  put("buffer_names", py_list());
  put("optimizer", optimizer ? optimizer : py_none());
  auto shapes = py_list();
  for (const Group& g : groups) {
    auto d = py_dict();
    for (size_t i = 0; i < g.names.size(); ++i) d->entries.emplace_back(py_str(g.names[i]), py_size(module->at(g.names[i]).tensor.sizes().vec()));
    shapes->items.push_back(d);
  }
  put("param_shapes", zero ? shapes : py_none());  // ZeRO's flat groups' layout; without ZeRO, none
  put("frozen_param_shapes", stage3 ? py_dict() : py_none());
  put("shared_params", zero ? py_dict() : py_none());
  put("frozen_param_fragments", stage3 ? py_dict() : py_none());
  put("lr_scheduler", run.lr_scheduler ? run.lr_scheduler : py_none());
  for (const char* none : {"data_sampler", "random_ltd"}) put(none, py_none());
  put("skipped_steps", py_int(0));
  put("global_steps", py_int(part.iteration));
  put("global_samples", py_int(part.consumed_train));
  put("dp_world_size", py_int(run.dp_size));
  put("mp_world_size", py_int(pipeline ? part.tp * part.pp : part.tp));  // the pipeline grid's model-parallel group: every stage
  auto dims = py_dict();
  dims->entries.emplace_back(py_str("pp_degree"), py_int(part.pp));
  dims->entries.emplace_back(py_str("tp_degree"), py_int(part.tp));
  put("checkpoint_parallel_dimensions", dims);
  put("ds_config", ds_config);
  put("ds_version", py_str(kDeepSpeedVersion));
  put("args", megatron_args(part));
  put("universal_checkpoint_info", universal_checkpoint_info(pipeline));
  put("checkpoint_version", py_float(3.0));
  put("iteration", py_int(part.iteration));
  if (run.client_state)
    for (const auto& [k, v] : run.client_state->entries) put(k->as_str().c_str(), v);
  return top;
}

// A stage's tensors (megatron_part_state's dict: megatron-core's names, layers numbered from 0 on
// the stage) under the pipeline module's names, in its parameters' order: the tied module
// (tied_modules.embed.*, on the first and the last stage) first, then each layer's by spec index.
// The last stage's copy of the position embedding, which no forward pass reads, is zeros.
std::shared_ptr<PyValue> pipe_stage_state(const PyValue& core, const MegatronPart& part) {
  const Gpt2Config& c = part.config;
  const int64_t per_stage = c.num_layers / part.pp, first_layer = part.pp_rank * per_stage;
  const bool first_stage = part.pp_rank == 0, last_stage = part.pp_rank == part.pp - 1;
  auto out = py_dict();
  auto put = [&](const std::string& name, const torch::Tensor& t) { out->entries.emplace_back(py_str(name), py_tensor(t)); };
  if (first_stage || last_stage) {
    put("tied_modules.embed.word_embeddings.weight", core.at(first_stage ? "embedding.word_embeddings.weight" : "output_layer.weight").as_tensor());
    put("tied_modules.embed.position_embeddings.weight",
        first_stage ? core.at("embedding.position_embeddings.weight").as_tensor() : torch::zeros({c.max_positions, c.hidden}));
  }
  static const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm", "input_layernorm"},     {"self_attention.linear_qkv", "self_attention.query_key_value"},
      {"self_attention.linear_proj", "self_attention.dense"}, {"pre_mlp_layernorm", "post_attention_layernorm"},
      {"mlp.linear_fc1", "mlp.dense_h_to_4h"},    {"mlp.linear_fc2", "mlp.dense_4h_to_h"}};
  for (int64_t k = 0; k < per_stage; ++k)
    for (const auto& [theirs, pipe] : kLayer)
      for (const char* kind : {".weight", ".bias"})
        put(std::to_string(kPipeFirstLayer + first_layer + k) + "." + pipe + kind,
            core.at("decoder.layers." + std::to_string(k) + "." + theirs + kind).as_tensor());
  if (last_stage)
    for (const char* kind : {"weight", "bias"})
      put(std::to_string(kPipeFirstLayer + c.num_layers) + "." + kind, core.at(std::string("decoder.final_layernorm.") + kind).as_tensor());
  return out;
}

// The stage's layer files, as PipelineModule.save_state_dict writes them: layer_XX-model_TT-model_states.pt
// (XX the spec index, TT the tensor-parallel rank: Megatron-DeepSpeed's topology has that axis) with
// the layer's state dict in the training dtype; the embedding from the first stage only.
void write_pipe_layers(const fs::path& tag, const PyValue& stage, const MegatronPart& part, const DeepSpeedRun& run) {
  const auto dtype = run.bf16 ? torch::kBFloat16 : run.fp16 ? torch::kHalf : torch::kFloat;
  std::map<int64_t, std::shared_ptr<PyValue>> layers;
  for (const auto& [k, t] : stage.entries) {
    const std::string& name = k->as_str();
    constexpr std::string_view kTied = "tied_modules.embed.";
    int64_t index = kPipeFirstLayer - 1;  // the embedding's spec
    std::string key;
    if (name.starts_with(kTied)) {
      if (part.pp_rank != 0) continue;  // the head's copy: its spec is a function, not saved
      key = name.substr(kTied.size());
    } else {
      const size_t dot = name.find('.');
      index = std::stoll(name.substr(0, dot));
      key = name.substr(dot + 1);
    }
    auto& layer = layers[index];
    if (!layer) layer = py_dict();
    layer->entries.emplace_back(py_str(key), py_tensor(t->tensor.to(dtype)));
  }
  for (const auto& [index, layer] : layers)
    save_torch_file((tag / strprintf("layer_%02ld-model_%02ld-model_states.pt", (long)index, (long)part.tp_rank)).string(), *layer);
}

// What DeepSpeed's JSON would have said for this run (its engine keeps it in every file).
std::shared_ptr<PyValue> ds_config_of(const DeepSpeedRun& run) {
  auto c = py_dict();
  auto put = [&](const char* k, std::shared_ptr<PyValue> v) { c->entries.emplace_back(py_str(k), std::move(v)); };
  if (run.micro_batch > 0) {
    put("train_batch_size", py_int(run.global_batch));
    put("train_micro_batch_size_per_gpu", py_int(run.micro_batch));
    put("gradient_accumulation_steps", py_int(run.global_batch / (run.micro_batch * run.dp_size)));
  }
  auto zero = py_dict();
  zero->entries.emplace_back(py_str("stage"), py_int(run.stage));
  put("zero_optimization", zero);
  put("gradient_clipping", py_float(run.clip_grad));
  for (const auto& [name, on] : {std::pair{"fp16", run.fp16}, std::pair{"bf16", run.bf16}}) {
    auto e = py_dict();
    e->entries.emplace_back(py_str("enabled"), py_bool(on));
    put(name, e);
  }
  return c;
}

}  // namespace

ImportedModel read_deepspeed_model(const std::string& dir) { return DeepSpeedReader(dir).read(); }

std::shared_ptr<PyValue> adamw_part_state(const PyValue& module, const PyValue& exp_avg, const PyValue& exp_avg_sq, const DeepSpeedRun& run,
                                          std::shared_ptr<PyValue>* masters) {
  const std::vector<Group> groups = groups_of(module, exp_avg, exp_avg_sq, run.weight_decay);
  if (masters) {
    *masters = py_list();
    for (const Group& g : groups) {
      auto list = py_list();
      for (const std::string& name : g.names) list->items.push_back(py_tensor(module.at(name).as_tensor().to(torch::kFloat)));
      (*masters)->items.push_back(list);
    }
  }
  return per_parameter_adamw_state(groups, module, run);
}

std::string deepspeed_tag(int64_t iteration) { return "global_step" + std::to_string(iteration); }

void write_deepspeed_part(const std::string& tag_dir, const MegatronPart& part, const std::map<std::string, torch::Tensor>& params,
                          const std::map<std::string, torch::Tensor>& exp_avg, const std::map<std::string, torch::Tensor>& exp_avg_sq,
                          const DeepSpeedRun& run) {
  if (run.stage != 0) partitioning_of(run.stage, "--ckpt-format deepspeed with ZeRO stage " + std::to_string(run.stage));
  const bool pipeline = part.pp > 1;
  if (pipeline && run.stage > 1)
    throw Error(ErrorKind::Internal, "DeepSpeed's pipeline files are written at ZeRO 0 or 1 (stage %d)", run.stage);
  auto names = [&](const std::map<std::string, torch::Tensor>& t) {
    const std::shared_ptr<PyValue> core = megatron_part_state(t, part);
    return pipeline ? pipe_stage_state(*core, part) : core;
  };
  const std::shared_ptr<PyValue> module = names(params);
  const std::vector<Group> groups = groups_of(*module, *names(exp_avg), *names(exp_avg_sq), run.weight_decay);
  const std::shared_ptr<PyValue> config = ds_config_of(run);
  const fs::path tag(tag_dir);
  // The pipeline grid's model-parallel rank names a stage's files; the layers go to files of their own.
  const int64_t mp_rank = pipeline ? part.pp_rank * part.tp + part.tp_rank : part.tp_rank;
  if (pipeline) write_pipe_layers(tag, *module, part, run);
  if (run.stage == 0) {  // no partitions: the optimizer's state is in the model file
    const auto optimizer = run.fp16 || run.bf16 ? fused_fp16_optimizer_state(groups, run) : per_parameter_adamw_state(groups, *module, run);
    save_torch_file((tag / model_file(mp_rank, false)).string(), model_states(module, groups, part, run, config, optimizer, pipeline));
    return;
  }
  if (run.stage < 3)
    save_torch_file((tag / model_file(mp_rank, false)).string(), model_states(module, groups, part, run, config, nullptr, pipeline));
  const std::vector<GroupFlats> flats = run.stage < 3 ? group_flats(groups) : std::vector<GroupFlats>{};
  for (int64_t d = 0; d < run.dp_size; ++d) {
    if (run.stage == 3)
      save_torch_file((tag / model_file(mp_rank, true, d)).string(), model_states(module, groups, part, run, config, nullptr, false));
    const RankPieces r = run.stage == 3 ? per_parameter_pieces(groups, d, run.dp_size) : flat_pieces(groups, flats, d, run.dp_size);
    save_torch_file((tag / optim_file(mp_rank, d, run.bf16)).string(), optim_states(groups, r, run, config));
  }
}

void save_deepspeed_checkpoint(const std::string& dir, Gpt2& model, int64_t iteration, ZeroStage zero_stage, int64_t dp_size) {
  if (dp_size < 1) throw Error(ErrorKind::Usage, "a DeepSpeed checkpoint for %ld data-parallel ranks", (long)dp_size);
  if (fs::exists(fs::path(dir) / "latest"))
    throw Error(ErrorKind::Usage, "%s already holds a DeepSpeed checkpoint: an exported model starts a new directory", dir.c_str());
  const fs::path tag_path = fs::path(dir) / deepspeed_tag(iteration);
  fs::create_directories(tag_path);
  std::map<std::string, torch::Tensor> params, zeros;
  for (const auto& item : model->named_parameters()) {
    params[item.key()] = item.value().detach().to(torch::kFloat).contiguous();
    zeros[item.key()] = torch::zeros_like(params[item.key()]);
  }
  const MegatronPart part{.config = model->config(), .iteration = iteration};
  DeepSpeedRun run;
  run.stage = static_cast<int>(zero_stage);
  run.dp_size = dp_size;
  run.iteration = iteration;
  write_deepspeed_part(tag_path.string(), part, params, zeros, zeros, run);
  // Last: the checkpoint is complete before the tag file names it.
  write_file_atomic((fs::path(dir) / "latest").string(), deepspeed_tag(iteration));
}

}  // namespace zlm::trainer
