#include "trainer/checkpoint/deepspeed_format.h"

#include <algorithm>
#include <filesystem>
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

std::string optim_file(int64_t tp, int64_t dp) { return strprintf("zero_pp_rank_%ld_mp_rank_%02ld_optim_states.pt", (long)dp, (long)tp); }

// Data-parallel rank D's optimizer file of tensor-parallel rank TT, for every D present, in rank order.
std::vector<fs::path> optim_files(const fs::path& tag, int64_t tp) {
  const std::regex name("(?:bf16_)?zero_pp_rank_([0-9]+)_mp_rank_([0-9]+)_optim_states\\.pt");  // bf16_: DeepSpeed's BF16 optimizer
  std::map<long, fs::path> found;
  for (const auto& e : fs::directory_iterator(tag)) {
    std::smatch m;
    const std::string f = e.path().filename().string();
    if (std::regex_match(f, m, name) && std::stol(m[2]) == tp) found[std::stol(m[1])] = e.path();
  }
  std::vector<fs::path> out;
  for (auto& [d, p] : found) {
    if (d != static_cast<long>(out.size()))
      throw Error(ErrorKind::Format, "%s: data-parallel rank %zu's file is missing (%s)", tag.c_str(), out.size(),
                  optim_file(tp, static_cast<int64_t>(out.size())).c_str());
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

// A dict's value for an int key (torch optimizers key their state by parameter index).
const PyValue* int_key(const PyValue& d, int64_t key) {
  if (!d.is(PyValue::Kind::Dict)) return nullptr;
  for (const auto& [k, v] : d.entries)
    if (k->is(PyValue::Kind::Int) && k->i == key) return v.get();
  return nullptr;
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
  if (flats.items.size() != groups)
    throw Error(ErrorKind::Format, "%s: %zu fp32 groups, param_shapes has %zu", file.c_str(), flats.items.size(), groups);
  Partition p;
  for (const auto& t : flats.items) p.kind[0].push_back(t->as_tensor().to(torch::kFloat).flatten());
  const PyValue* inner = osd.find(flat ? "base_optimizer_state" : "optimizer_state_dict");
  const PyValue* state = inner ? inner->find("state") : nullptr;
  for (size_t g = 0; g < groups && p.moments; ++g) {
    const PyValue* s = state ? int_key(*state, static_cast<int64_t>(g)) : nullptr;
    const PyValue* m = s ? s->find("exp_avg") : nullptr;
    const PyValue* v = s ? s->find("exp_avg_sq") : nullptr;
    if (!m || !v || !m->is(PyValue::Kind::Tensor) || m->tensor.numel() != p.kind[0][g].numel()) {
      p.moments = false;  // no Adam state (another optimizer, or not stepped yet)
      break;
    }
    p.kind[1].push_back(m->tensor.to(torch::kFloat).flatten());
    p.kind[2].push_back(v->tensor.to(torch::kFloat).flatten());
    if (const PyValue* st = s->find("step"))
      p.step = st->is(PyValue::Kind::Tensor) ? static_cast<int64_t>(st->tensor.item<double>()) : st->as_int();
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

// The pipeline engine's checkpoint (PipelineModule, as Megatron-DeepSpeed's GPTModelPipe): one
// file per layer holding parameters, layer_XX[-model_TT]-model_states.pt (XX the layer's index in
// the module's list, global over the stages; TT the tensor-parallel rank), and parameter names
// "XX.<sub>" or "tied_modules.<key>.<sub>" in the ZeRO files. Each layer is told by what it holds:
// the embedding (word_embeddings), a transformer layer (input_layernorm), the final LayerNorm
// (just weight and bias); they become Megatron's legacy names.
class PipeLayers {
 public:
  PipeLayers(const fs::path& tag, int64_t tp) {
    const std::regex name("layer_([0-9]+)(?:-model_([0-9]+))?-model_states\\.pt");
    std::map<long, fs::path> files;
    for (const auto& e : fs::directory_iterator(tag)) {
      std::smatch m;
      const std::string f = e.path().filename().string();
      if (std::regex_match(f, m, name) && (m[2].matched ? std::stol(m[2]) : 0) == tp) files[std::stol(m[1])] = e.path();
    }
    int64_t blocks = 0;
    for (auto& [index, path] : files) {
      PyValue v = load_torch_file(path.string());
      if (!v.is(PyValue::Kind::Dict)) throw Error(ErrorKind::Format, "%s: %s, not a layer's state dict", path.c_str(), v.describe().c_str());
      std::string prefix;
      if (v.find("word_embeddings.weight")) {
        if (have_embedding_) continue;  // the last stage's copy of the tied embedding
        have_embedding_ = true;
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
      for (auto& [k, t] : v.entries) weights_.emplace_back(prefix + k->as_str(), t->is(PyValue::Kind::Tensor) ? t->as_tensor() : torch::Tensor());
      files_.push_back(path.string());
    }
  }
  bool empty() const { return files_.empty(); }
  // The weights as the layer files hold them (the module's dtype), under Megatron's names.
  const std::vector<std::pair<std::string, torch::Tensor>>& weights() const { return weights_; }
  const std::string& file() const { return files_.front(); }
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
  std::vector<std::pair<std::string, torch::Tensor>> weights_;
  std::vector<std::string> files_;
  bool have_embedding_ = false;
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

// Reads one DeepSpeed checkpoint directory into an ImportedModel, tensor-parallel
// rank by rank: from the ZeRO partitions where there are any, else from the
// pipeline's layer files or the module.
class DeepSpeedReader {
 public:
  explicit DeepSpeedReader(const std::string& dir) : tag_(open_tag(dir)), join_(m_) {}

  ImportedModel read() {
    PyValue head = read_head();
    for (int64_t tp = 0; tp < m_.tp; ++tp) {
      const fs::path mfile = *tag_ / model_file(tp, stage3_);
      if (!fs::exists(mfile)) throw Error(ErrorKind::Format, "%s: missing (the checkpoint was saved with TP %ld)", mfile.c_str(), (long)m_.tp);
      read_rank(tp, tp == 0 ? std::move(head) : load_torch_file(mfile.string()), mfile);
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
    m_.iteration = it ? it->as_int() : head.at("global_steps").as_int();
    const PyValue* args = head.find("args");
    if (!args || args->is(PyValue::Kind::None))
      throw Error(ErrorKind::Usage, "%s: no Megatron args beside the model (Megatron-DeepSpeed saves them): the model's attention heads are "
                  "in no tensor's shape, so zerolm cannot tell its architecture", first.c_str());
    read_megatron_args(*args, first.string(), m_);
    if (!args->find("consumed_train_samples"))
      if (const PyValue* s = head.find("global_samples")) m_.consumed_train = s->as_int();
    return head;
  }

  void read_rank(int64_t tp, const PyValue& states, const fs::path& mfile) {
    const std::vector<fs::path> files = optim_files(*tag_, tp);
    const PipeLayers pipe(*tag_, tp);
    if (pipe.empty() && m_.pp > 1)
      throw Error(ErrorKind::Format, "%s: args say %ld pipeline stages, but there are no layer files for tensor-parallel rank %ld", tag_->c_str(),
                  (long)m_.pp, (long)tp);
    if (!pipe.empty()) return read_pipeline_rank(tp, states, files, pipe);
    if (files.empty()) {  // no ZeRO partitions: the weights are the module's
      if (stage3_) throw Error(ErrorKind::Format, "%s: a ZeRO-3 checkpoint without its optim_states files (they hold the weights)", tag_->c_str());
      moments_ = false;
      for (const auto& [k, v] : states.at("module").entries)
        join_.add(tp, 0, k->as_str(), v->is(PyValue::Kind::Tensor) ? v->as_tensor() : torch::Tensor(), mfile.string());
      return;
    }
    from_partitions(tp, states, mfile, files, [](const std::string& name) { return name; });
  }

  // The pipeline engine's model-states and optim files are per model-parallel rank, which
  // is the stage when there is no tensor parallelism: mp_rank_SS, zero_pp_rank_D_mp_rank_SS.
  // Else (or without them) the weights are the layer files' and Adam starts afresh.
  void read_pipeline_rank(int64_t tp, const PyValue& states, const std::vector<fs::path>& files, const PipeLayers& pipe) {
    std::vector<std::vector<fs::path>> stage_files;  // per stage, its data-parallel ranks' optim files
    bool partitions = m_.tp == 1 && states.find("param_shapes");
    for (int64_t s = 0; s < m_.pp && partitions; ++s) {
      stage_files.push_back(s == 0 ? files : optim_files(*tag_, s));
      partitions = fs::exists(*tag_ / model_file(s, false)) && !stage_files.back().empty();
    }
    if (!partitions) {
      moments_ = false;
      for (const auto& [name, w] : pipe.weights()) join_.add(tp, 0, name, w, pipe.file());
      return;
    }
    for (int64_t s = 0; s < m_.pp; ++s) {
      const fs::path sfile = *tag_ / model_file(s, false);
      auto rename = [&](const std::string& name) { return pipe.megatron_name(name, sfile.string()); };
      from_partitions(tp, s == 0 ? states : load_torch_file(sfile.string()), sfile, stage_files[static_cast<size_t>(s)], rename);
    }
  }

  // Every data-parallel rank's partition of one model-states file.
  std::vector<Partition> read_partitions(const std::vector<fs::path>& files, size_t groups, Partitioning* layout, PyValue* rank0) {
    std::vector<Partition> ranks;
    for (size_t d = 0; d < files.size(); ++d) {
      PyValue f = load_torch_file(files[d].string());
      const PyValue& osd = f.at("optimizer_state_dict");
      if (d == 0) {
        *layout = partitioning_of(int_value(osd.at("zero_stage"), files[d].string() + ": zero_stage"), files[d].string());
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
    }
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

// Data-parallel rank D's piece of the fp32 weights, as ZeRO partitions them; for
// flat groups, the padding the last rank holds.
std::vector<torch::Tensor> partition_weights(const std::vector<torch::Tensor>& params, Partitioning layout, int64_t dp_size,
                                             int64_t* group_padding) {
  std::vector<torch::Tensor> pieces;
  *group_padding = 0;
  if (layout == Partitioning::kFlatGroups) {
    torch::Tensor flat = torch::cat(params);
    const int64_t padded = align_up(flat.numel(), 2 * dp_size);
    *group_padding = padded - flat.numel();
    flat = torch::cat({flat, torch::zeros({*group_padding})});
    for (int64_t d = 0; d < dp_size; ++d) pieces.push_back(flat.narrow(0, d * (padded / dp_size), padded / dp_size).clone());
    return pieces;
  }
  for (int64_t d = 0; d < dp_size; ++d) {
    std::vector<torch::Tensor> mine;
    for (const torch::Tensor& p : params) {
      const int64_t piece = (p.numel() + dp_size - 1) / dp_size;
      torch::Tensor padded = torch::cat({p, torch::zeros({piece * dp_size - p.numel()})});
      mine.push_back(padded.narrow(0, d * piece, piece));
    }
    pieces.push_back(torch::cat(mine));
  }
  return pieces;
}

std::shared_ptr<PyValue> list_of(std::shared_ptr<PyValue> v) {
  auto l = py_list();
  l->items.push_back(std::move(v));
  return l;
}

// The engine's model-states file: the module (ZeRO 3: empty tensors, the weights
// being in the partitions), the parameters' shapes and order, counters, the
// config, and Megatron-DeepSpeed's client state (args, iteration).
PyValue model_states(const std::shared_ptr<PyValue>& module, const std::shared_ptr<PyValue>& shapes, const std::shared_ptr<PyValue>& ds_config,
                     const Gpt2Config& config, int64_t iteration, int64_t dp_size, bool empty_module) {
  PyValue top;
  top.kind = PyValue::Kind::Dict;
  auto put = [&](const char* k, std::shared_ptr<PyValue> v) { top.entries.emplace_back(py_str(k), std::move(v)); };
  std::shared_ptr<PyValue> mod = module;
  if (empty_module) {
    mod = py_dict();
    for (const auto& [k, v] : module->entries) mod->entries.emplace_back(k, v->is(PyValue::Kind::Tensor) ? py_tensor(torch::empty({0})) : v);
  }
  put("module", mod);
  put("buffer_names", py_list());
  put("optimizer", py_none());
  put("param_shapes", list_of(shapes));
  for (const char* empty : {"frozen_param_shapes", "shared_params", "frozen_param_fragments"}) put(empty, py_dict());
  for (const char* none : {"lr_scheduler", "data_sampler", "random_ltd"}) put(none, py_none());
  put("sparse_tensor_module_names", py_list());
  put("skipped_steps", py_int(0));
  put("global_steps", py_int(iteration));
  put("global_samples", py_int(0));
  put("dp_world_size", py_int(dp_size));
  put("mp_world_size", py_int(1));
  put("ds_config", ds_config);
  put("ds_version", py_str(kDeepSpeedVersion));
  put("args", megatron_args(MegatronPart{.config = config, .iteration = iteration}));
  put("checkpoint_version", py_float(3.0));
  put("iteration", py_int(iteration));
  return top;
}

// Rank D's optim-states file: its weights' piece, Adam's moments (zero) for it,
// and the partitioning's bookkeeping.
PyValue optim_states(const torch::Tensor& w, Partitioning layout, int stage, int64_t d, int64_t dp_size, int64_t group_padding,
                     const std::shared_ptr<PyValue>& ds_config) {
  auto adam = py_dict();
  adam->entries.emplace_back(py_str("step"), py_tensor(torch::zeros({})));
  adam->entries.emplace_back(py_str("exp_avg"), py_tensor(torch::zeros_like(w)));
  adam->entries.emplace_back(py_str("exp_avg_sq"), py_tensor(torch::zeros_like(w)));
  auto state = py_dict();
  state->entries.emplace_back(py_int(0), adam);
  auto group = py_dict();
  group->entries.emplace_back(py_str("params"), list_of(py_int(0)));
  auto inner = py_dict();
  inner->entries.emplace_back(py_str("state"), state);
  inner->entries.emplace_back(py_str("param_groups"), list_of(group));
  auto osd = py_dict();
  auto put = [&](const char* k, std::shared_ptr<PyValue> v) { osd->entries.emplace_back(py_str(k), std::move(v)); };
  put("zero_stage", py_int(stage));
  put("dynamic_loss_scale", py_bool(false));
  put("overflow", py_bool(false));
  if (layout == Partitioning::kFlatGroups) {
    put("base_optimizer_state", inner);
    put("single_partition_of_fp32_groups", list_of(py_tensor(w)));
    put("group_paddings", list_of(py_int(d == dp_size - 1 ? group_padding : 0)));
    put("partition_count", list_of(py_int(dp_size)));
  } else {
    put("optimizer_state_dict", inner);
    put("fp32_flat_groups", list_of(py_tensor(w)));
    put("partition_count", py_int(dp_size));
  }
  put("ds_version", py_str(kDeepSpeedVersion));
  PyValue top;
  top.kind = PyValue::Kind::Dict;
  top.entries.emplace_back(py_str("optimizer_state_dict"), osd);
  top.entries.emplace_back(py_str("ds_config"), ds_config);
  top.entries.emplace_back(py_str("ds_version"), py_str(kDeepSpeedVersion));
  return top;
}

}  // namespace

ImportedModel read_deepspeed_model(const std::string& dir) { return DeepSpeedReader(dir).read(); }

void save_deepspeed_checkpoint(const std::string& dir, Gpt2& model, int64_t iteration, ZeroStage zero_stage, int64_t dp_size) {
  const int stage = static_cast<int>(zero_stage);
  const Partitioning layout = partitioning_of(stage, "--zero-stage");
  if (dp_size < 1) throw Error(ErrorKind::Usage, "a DeepSpeed checkpoint for %ld data-parallel ranks", (long)dp_size);
  if (fs::exists(fs::path(dir) / "latest"))
    throw Error(ErrorKind::Usage, "%s already holds a DeepSpeed checkpoint: an exported model starts a new directory", dir.c_str());
  const std::string tag = "global_step" + std::to_string(iteration);
  const fs::path tag_path = fs::path(dir) / tag;
  fs::create_directories(tag_path);

  const std::shared_ptr<PyValue> module = megatron_state_dict(model);
  auto shapes = py_dict();  // one parameter group: every parameter, in the module's order
  std::vector<torch::Tensor> params;
  for (const auto& [k, v] : module->entries)
    if (v->is(PyValue::Kind::Tensor)) {
      shapes->entries.emplace_back(k, py_size(v->tensor.sizes().vec()));
      params.push_back(v->tensor.flatten());
    }
  auto zero = py_dict();
  zero->entries.emplace_back(py_str("stage"), py_int(stage));
  auto ds_config = py_dict();
  ds_config->entries.emplace_back(py_str("zero_optimization"), zero);
  int64_t group_padding = 0;
  const std::vector<torch::Tensor> pieces = partition_weights(params, layout, dp_size, &group_padding);
  if (layout == Partitioning::kFlatGroups) {
    save_torch_file((tag_path / model_file(0, false)).string(), model_states(module, shapes, ds_config, model->config(), iteration, dp_size, false));
  } else {
    for (int64_t d = 0; d < dp_size; ++d)
      save_torch_file((tag_path / model_file(0, true, d)).string(), model_states(module, shapes, ds_config, model->config(), iteration, dp_size, true));
  }
  for (int64_t d = 0; d < dp_size; ++d)
    save_torch_file((tag_path / optim_file(0, d)).string(),
                    optim_states(pieces[static_cast<size_t>(d)], layout, stage, d, dp_size, group_padding, ds_config));
  // Last: the checkpoint is complete before the tag file names it.
  write_file_atomic((fs::path(dir) / "latest").string(), tag);
}

}  // namespace zlm::trainer
