#include "trainer/checkpoint/megatron_format.h"

#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "common/core/error.h"
#include "common/core/files.h"
#include "common/core/log.h"
#include "common/core/output_file.h"
#include "trainer/checkpoint/torch_pickle.h"

namespace zlm::trainer {

namespace {

namespace fs = std::filesystem;

struct Tracked {
  int64_t iteration = 0;
  fs::path iter_dir;
};

// latest_checkpointed_iteration.txt: an iteration, or "release" (Megatron's released checkpoints).
std::optional<Tracked> tracked(const std::string& dir) {
  const fs::path tracker = fs::path(dir) / "latest_checkpointed_iteration.txt";
  if (!fs::exists(tracker)) return std::nullopt;
  std::string text = read_file(tracker.string());
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text == "release") return Tracked{0, fs::path(dir) / "release"};
  char* end = nullptr;
  errno = 0;
  const long it = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || it < 0 || errno == ERANGE) return std::nullopt;
  return Tracked{it, fs::path(dir) / megatron_iter_name(it)};
}

fs::path part_file(const fs::path& iter_dir, int64_t tp, int64_t pp, int64_t pp_size) {
  return iter_dir / megatron_part_name(tp, pp, pp_size) / "model_optim_rng.pt";
}

// A LibTorch archive (ours) has TorchScript's constants.pkl; a torch.save file does not.
bool is_torch_save(const fs::path& file) {
  try {
    caffe2::serialize::PyTorchStreamReader zip(file.string());
    return zip.hasRecord("data.pkl") && !zip.hasRecord("constants.pkl");
  } catch (const c10::Error&) {
    return false;
  }
}

// Megatron's args: a field, or nullptr when this version of Megatron did not have it (or it is None).
const PyValue* arg(const PyValue& args, const char* name) {
  const PyValue* v = args.find(name);
  return v && !v->is(PyValue::Kind::None) ? v : nullptr;
}

int64_t int_arg(const PyValue& args, const char* name, const std::string& file) {
  const PyValue* v = arg(args, name);
  if (!v) throw Error(ErrorKind::Format, "%s: its args have no %s, which gives the model's shape", file.c_str(), name);
  return v->as_int();
}

// The architecture zerolm trains (GPT-2's); anything else is refused by the argument that says so.
void check_architecture(const PyValue& args, const std::string& file) {
  auto refuse = [&](const char* what, const char* why) {
    throw Error(ErrorKind::Usage, "%s: a model with %s (%s), which zerolm does not train (it trains GPT-2: learned positions, LayerNorm, "
                "GELU, biases, tied embeddings)", file.c_str(), what, why);
  };
  auto flag = [&](const char* name) {
    const PyValue* v = arg(args, name);
    return v && v->is(PyValue::Kind::Bool) && v->b;
  };
  auto text = [&](const char* name) -> std::string {
    const PyValue* v = arg(args, name);
    return v && v->is(PyValue::Kind::Str) ? v->s : "";
  };
  const std::string pos = text("position_embedding_type");
  if (!pos.empty() && pos != "learned_absolute") refuse("position embeddings of another kind", ("--position-embedding-type " + pos).c_str());
  const std::string norm = text("normalization");
  if (!norm.empty() && norm != "LayerNorm") refuse("another normalization", ("--normalization " + norm).c_str());
  if (flag("swiglu")) refuse("a SwiGLU MLP", "--swiglu");
  if (flag("squared_relu")) refuse("a squared-ReLU MLP", "--squared-relu");
  if (flag("untie_embeddings_and_output_weights")) refuse("an output layer of its own", "--untie-embeddings-and-output-weights");
  if (const PyValue* b = arg(args, "add_bias_linear"); b && b->is(PyValue::Kind::Bool) && !b->b) refuse("no linear biases", "--disable-bias-linear");
  if (flag("apply_residual_connection_post_layernorm"))
    refuse("residuals after the LayerNorm", "--apply-residual-connection-post-layernorm");
  if (flag("group_query_attention") && int_arg(args, "num_query_groups", file) != int_arg(args, "num_attention_heads", file))
    refuse("grouped-query attention", "--group-query-attention");
  if (arg(args, "num_layers_per_virtual_pipeline_stage"))
    throw Error(ErrorKind::Usage, "%s: a checkpoint of an interleaved pipeline (--num-layers-per-virtual-pipeline-stage) is not read yet",
                file.c_str());
}

// Megatron's GELU: --bias-gelu-fusion (its default) and --openai-gelu compute the tanh
// approximation; plain F.gelu (--no-bias-gelu-fusion alone) is exact (erf).
bool erf_gelu(const PyValue& args) {
  const PyValue* fusion = arg(args, "bias_gelu_fusion");
  const PyValue* openai = arg(args, "openai_gelu");
  return fusion && fusion->is(PyValue::Kind::Bool) && !fusion->b && !(openai && openai->is(PyValue::Kind::Bool) && openai->b);
}

// Megatron's name of one part's tensor -> ours (layer numbers made global), "" for
// entries without weights (_extra_state); throws for what zerolm has no place for.
std::string our_name(const std::string& name, int64_t layer_offset, bool last_of_stages, const std::string& file) {
  if (is_extra_state(name)) return "";
  // The last pipeline stage's copy of the tied embedding (megatron-core's output_layer, the legacy
  // word_embeddings_for_head): the first stage's is the one read.
  if (last_of_stages && (name == "output_layer.weight" || name == "word_embeddings_for_head.weight")) return "";
  auto strip = [&](std::initializer_list<const char*> prefixes, std::string& rest) {
    for (const char* p : prefixes)
      if (name.rfind(p, 0) == 0) {
        rest = name.substr(std::strlen(p));
        return true;
      }
    return false;
  };
  std::string rest;
  if (strip({"embedding.word_embeddings.", "language_model.embedding.word_embeddings."}, rest)) return "wte." + rest;
  if (strip({"embedding.position_embeddings.", "language_model.embedding.position_embeddings."}, rest)) return "wpe." + rest;
  if (strip({"decoder.final_layernorm.", "language_model.encoder.final_layernorm.", "language_model.transformer.final_layernorm."}, rest))
    return "ln_f." + rest;
  if (strip({"decoder.layers.", "language_model.encoder.layers.", "language_model.transformer.layers."}, rest)) {
    const size_t dot = rest.find('.');
    char* end = nullptr;
    const long layer = std::strtol(rest.c_str(), &end, 10);
    if (dot != std::string::npos && end == rest.c_str() + dot) {
      const std::string sub = rest.substr(dot + 1);
      static const std::pair<const char*, const char*> map[] = {
          {"input_layernorm.", "ln1."}, {"self_attention.linear_qkv.layer_norm_", "ln1."},  // Transformer Engine's fused LayerNorm
          {"self_attention.linear_qkv.", "attn_qkv."}, {"self_attention.query_key_value.", "attn_qkv."},
          {"attention.query_key_value.", "attn_qkv."}, {"self_attention.linear_proj.", "attn_proj."},
          {"self_attention.dense.", "attn_proj."}, {"attention.dense.", "attn_proj."},
          {"pre_mlp_layernorm.", "ln2."}, {"post_attention_layernorm.", "ln2."}, {"mlp.linear_fc1.layer_norm_", "ln2."},
          {"mlp.linear_fc1.", "mlp_fc."}, {"mlp.dense_h_to_4h.", "mlp_fc."}, {"mlp.linear_fc2.", "mlp_proj."}, {"mlp.dense_4h_to_h.", "mlp_proj."}};
      for (const auto& [theirs, ours] : map)
        if (sub.rfind(theirs, 0) == 0) return "blocks." + std::to_string(layer + layer_offset) + "." + ours + sub.substr(std::strlen(theirs));
    }
  }
  if (name == "output_layer.weight")
    throw Error(ErrorKind::Usage, "%s: an output layer of its own (untied embeddings), which zerolm does not train", file.c_str());
  throw Error(ErrorKind::Format, "%s: '%s' is no tensor of a GPT-2 that zerolm knows", file.c_str(), name.c_str());
}

// Nested state dicts (Megatron's legacy state_dict_for_save_checkpoint) flattened with dots.
void flatten(const PyValue& v, const std::string& prefix, std::vector<std::pair<std::string, const PyValue*>>& out) {
  if (!v.is(PyValue::Kind::Dict)) {
    out.emplace_back(prefix, &v);
    return;
  }
  for (const auto& [k, child] : v.entries) flatten(*child, prefix.empty() ? k->as_str() : prefix + "." + k->as_str(), out);
}

// Megatron's own optimizer state of one part, by the part's parameter names: Adam's moments and
// step, and the fp32 master weights where the optimizer keeps them apart from the model's. Empty
// (with `why` said) when the part has none or it is laid out otherwise.
struct PartOptimizer {
  std::map<std::string, torch::Tensor> master, exp_avg, exp_avg_sq;
  int64_t step = 0;
  std::string why;  // why there are no moments, when the part has an optimizer entry
};

// FP32Optimizer's state (torch's optimizer state dict) or Float16OptimizerWithFloat16Params'
// ({optimizer: that, fp32_from_fp16_params: the master weights per group}).
void read_torch_optimizer(const PyValue& opt, const std::vector<std::pair<std::string, torch::Tensor>>& params, PartOptimizer& out) {
  const PyValue* masters = opt.find("fp32_from_fp16_params");
  if (masters && !masters->is(PyValue::Kind::List))
    return void(out.why = "its fp32_from_fp16_params is " + masters->describe() + ", not one list per group");
  TorchOptimizerState s = read_torch_optimizer_state(masters ? opt.at("optimizer") : opt, masters, false, params);
  out.why = !s.why.empty() ? s.why : s.no_moments.empty() ? "" : "no Adam state of " + s.no_moments + "'s shape in its optimizer";
  out.master = std::move(s.master), out.exp_avg = std::move(s.exp_avg), out.exp_avg_sq = std::move(s.exp_avg_sq);
  out.step = s.step;
}

// The distributed optimizer's state (--use-distributed-optimizer): the groups (with the step) in
// the part's file and, in distrib_optim.pt beside it, each gradient buffer's fp32 weights and
// moments gathered from every data-parallel rank, as flat vectors in
// megatron_distributed_optimizer_layout's places (the buckets from the part's args). Read when
// the part's parameters make one buffer (one dtype); else `why` says so.
void read_distributed_optimizer(const PyValue& part, const PyValue& opt, const fs::path& file,
                                const std::vector<std::pair<std::string, torch::Tensor>>& params, PartOptimizer& out) {
  const PyValue* inner = opt.find("optimizer");  // {optimizer: {param_groups}}, and the grad scaler's state for fp16
  const PyValue* pg = (inner ? *inner : opt).find("param_groups");
  const PyValue* step = pg && pg->is(PyValue::Kind::List) && !pg->items.empty() ? pg->items[0]->find("step") : nullptr;
  if (!step) return void(out.why = "its optimizer's parameter groups say no step");
  out.step = step_value(*step);
  const PyValue dist = load_torch_file(file.string());
  std::vector<const PyValue*> buffers;
  for (const auto& [k, v] : dist.entries)
    if (k->is(PyValue::Kind::Int))
      for (const auto& [dtypes, b] : v->entries) buffers.push_back(b.get());
  if (buffers.size() != 1) return void(out.why = file.string() + " holds " + std::to_string(buffers.size()) + " gradient buffers, not one");
  const PyValue& b = *buffers[0];
  const torch::Tensor w = b.at("param").as_tensor().flatten(), m = b.at("exp_avg").as_tensor().flatten(), v = b.at("exp_avg_sq").as_tensor().flatten();
  std::vector<std::pair<std::string, int64_t>> sizes;
  bool first_stage = false;
  for (const auto& [name, p] : params) {
    sizes.emplace_back(name, p.numel());
    first_stage |= name == "embedding.word_embeddings.weight";
  }
  const PyValue* args = part.find("args");
  const PyValue* pp = args ? arg(*args, "pipeline_model_parallel_size") : nullptr;
  const bool pipelined = pp && pp->is(PyValue::Kind::Int) && pp->as_int() > 1;
  const DistributedOptimizerLayout lay = megatron_distributed_optimizer_layout(sizes, pipelined, args ? megatron_bucket_size(*args, first_stage) : 0);
  if (b.at("numel_unpadded").as_int() != lay.numel || w.numel() != lay.numel || m.numel() != lay.numel || v.numel() != lay.numel)
    return void(out.why = strprintf("%s holds %ld numbers, the buckets of these parameters %ld", file.c_str(), (long)b.at("numel_unpadded").as_int(),
                                    (long)lay.numel));
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    out.master[name] = w.narrow(0, lay.offset[i], p.numel()).view(p.sizes()).to(torch::kFloat);
    out.exp_avg[name] = m.narrow(0, lay.offset[i], p.numel()).view(p.sizes()).to(torch::kFloat);
    out.exp_avg_sq[name] = v.narrow(0, lay.offset[i], p.numel()).view(p.sizes()).to(torch::kFloat);
  }
}

PartOptimizer megatron_part_optimizer(const PyValue& part, const fs::path& file, const std::vector<std::pair<std::string, const PyValue*>>& flat) {
  PartOptimizer out;
  const PyValue* opt = part.find("optimizer");
  if (!opt || opt->is(PyValue::Kind::None)) return out;
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& [name, value] : flat)
    if (value->is(PyValue::Kind::Tensor) && !is_extra_state(name)) params.emplace_back(name, value->tensor);
  try {
    if (!opt->is(PyValue::Kind::Dict)) {
      out.why = "its optimizer is " + opt->describe() + " (several optimizers)";
    } else if (opt->find("state") || opt->find("fp32_from_fp16_params")) {
      read_torch_optimizer(*opt, params, out);
    } else if (const fs::path dist = file.parent_path() / "distrib_optim.pt"; fs::exists(dist)) {
      read_distributed_optimizer(part, *opt, dist, params, out);
    } else {
      out.why = "its optimizer entry has no state, and there is no distrib_optim.pt beside it";
    }
  } catch (const Error& e) {  // a layout of another shape than these: say what did not fit
    out.why = e.what();
  }
  if (!out.why.empty()) out.master.clear(), out.exp_avg.clear(), out.exp_avg_sq.clear();
  return out;
}

// Megatron's fused QKV rows, per head [q_h | k_h | v_h], -> ours, [q of every head | k | v].
torch::Tensor qkv_to_ours(const torch::Tensor& t, int64_t heads) {
  std::vector<int64_t> shape = t.sizes().vec(), split{heads, 3, t.size(0) / (3 * heads)};
  split.insert(split.end(), shape.begin() + 1, shape.end());
  return t.reshape(split).transpose(0, 1).reshape(shape).contiguous();
}

// Ours, [q of every head | k | v], -> Megatron's, per head [q_h | k_h | v_h].
torch::Tensor qkv_to_megatron(const torch::Tensor& t, int64_t heads) {
  std::vector<int64_t> shape = t.sizes().vec(), split{3, heads, t.size(0) / (3 * heads)};
  split.insert(split.end(), shape.begin() + 1, shape.end());
  return t.reshape(split).transpose(0, 1).reshape(shape).contiguous();
}

}  // namespace

int64_t megatron_bucket_size(const PyValue& args, bool first_stage) {
  const PyValue* overlap = arg(args, "overlap_grad_reduce");
  if (!first_stage || !overlap || !overlap->is(PyValue::Kind::Bool) || !overlap->b) return 0;
  if (const PyValue* size = arg(args, "ddp_bucket_size"); size && size->is(PyValue::Kind::Int)) return size->as_int();
  const PyValue* dp = arg(args, "data_parallel_size");
  return std::max<int64_t>(40000000, 1000000 * (dp && dp->is(PyValue::Kind::Int) ? dp->as_int() : 1));
}

DistributedOptimizerLayout megatron_distributed_optimizer_layout(const std::vector<std::pair<std::string, int64_t>>& params, bool pipelined,
                                                                 int64_t bucket_size) {
  auto own_bucket = [&](const std::string& name) { return pipelined && (name == "embedding.word_embeddings.weight" || name == "output_layer.weight"); };
  DistributedOptimizerLayout out;
  out.offset.assign(params.size(), 0);
  int64_t bucket = 0, at = 0;  // the open bucket's start in the file's vectors, and the next number's place in the bucket
  for (size_t i = params.size(); i-- > 0;) {
    at = (at + 63) / 64 * 64;
    const bool own = own_bucket(params[i].first);
    if (own && at > 0) bucket += at, at = 0;  // the open bucket ends where this parameter would have started
    out.offset[i] = bucket + at;
    at += params[i].second;
    if (own || (bucket_size > 0 && at >= bucket_size)) bucket += at, at = 0;
  }
  out.numel = bucket + at;
  return out;
}

std::shared_ptr<PyValue> megatron_distributed_optimizer_state(const PyValue& module, const PyValue& exp_avg, const PyValue& exp_avg_sq,
                                                              bool pipelined, int64_t bucket_size, const std::string& param_dtype,
                                                              const std::string& grad_dtype) {
  std::vector<std::pair<std::string, int64_t>> sizes;
  for (const auto& [k, t] : module.entries)
    if (t->is(PyValue::Kind::Tensor)) sizes.emplace_back(k->as_str(), t->tensor.numel());
  const DistributedOptimizerLayout lay = megatron_distributed_optimizer_layout(sizes, pipelined, bucket_size);
  auto buffer = py_dict();
  for (const auto& [key, from] : {std::pair{"param", &module}, {"exp_avg", &exp_avg}, {"exp_avg_sq", &exp_avg_sq}}) {
    torch::Tensor flat = torch::zeros({lay.numel}, torch::kFloat);
    for (size_t i = 0; i < sizes.size(); ++i)
      flat.narrow(0, lay.offset[i], sizes[i].second).copy_(from->at(sizes[i].first).as_tensor().detach().to(torch::kFloat).flatten());
    buffer->entries.emplace_back(py_str(key), py_tensor(flat));
  }
  buffer->entries.emplace_back(py_str("numel_unpadded"), py_int(lay.numel));
  auto by_dtype = py_dict();
  by_dtype->entries.emplace_back(py_tuple({py_global(param_dtype), py_global(grad_dtype)}), buffer);
  auto state = py_dict();
  state->entries.emplace_back(py_str("buckets_coalesced"), py_bool(true));
  state->entries.emplace_back(py_int(0), by_dtype);
  return state;
}

std::string megatron_iter_name(int64_t iteration) { return strprintf("iter_%07ld", static_cast<long>(iteration)); }

std::string megatron_part_name(int64_t tp_rank, int64_t pp_rank, int64_t pp_size) {
  return pp_size > 1 ? strprintf("mp_rank_%02ld_%03ld", static_cast<long>(tp_rank), static_cast<long>(pp_rank))
                     : strprintf("mp_rank_%02ld", static_cast<long>(tp_rank));
}

std::optional<fs::path> megatron_tracked_dir(const std::string& dir) {
  const auto t = tracked(dir);
  return t ? std::optional<fs::path>(t->iter_dir) : std::nullopt;
}

bool is_megatron_checkpoint(const std::string& dir) {
  const auto t = tracked(dir);
  if (!t) return false;
  for (const fs::path& f : {part_file(t->iter_dir, 0, 0, 1), part_file(t->iter_dir, 0, 0, 2)})
    if (fs::exists(f)) return is_torch_save(f);
  return false;
}

void read_megatron_args(const PyValue& args, const std::string& where, ImportedModel& m) {
  check_architecture(args, where);
  m.tp = int_arg(args, "tensor_model_parallel_size", where);
  m.pp = int_arg(args, "pipeline_model_parallel_size", where);
  Gpt2Config& c = m.config;
  c.num_layers = int_arg(args, "num_layers", where);
  c.hidden = int_arg(args, "hidden_size", where);
  c.heads = int_arg(args, "num_attention_heads", where);
  c.max_positions = int_arg(args, "max_position_embeddings", where);
  c.vocab_size = int_arg(args, "padded_vocab_size", where);
  if (const PyValue* v = arg(args, "zerolm_vocab_entries")) m.vocab_entries = v->as_int();
  if (const PyValue* v = arg(args, "make_vocab_size_divisible_by")) m.vocab_divisible_by = v->as_int();
  c.hidden_dropout = c.attention_dropout = 0;
  c.erf_gelu = erf_gelu(args);
  auto samples = [&](const char* name, int64_t per_iteration) {
    const PyValue* v = arg(args, name);
    return v ? v->as_int() : m.iteration * per_iteration;
  };
  const PyValue* gbs = arg(args, "global_batch_size");
  m.consumed_train = samples("consumed_train_samples", gbs ? gbs->as_int() : 0);
  m.consumed_valid = samples("consumed_valid_samples", 0);
  if (m.tp < 1 || m.pp < 1 || c.num_layers % m.pp != 0 || c.heads % m.tp != 0)
    throw Error(ErrorKind::Format, "%s: %ld layers and %ld heads do not split over TP %ld x PP %ld", where.c_str(), (long)c.num_layers,
                (long)c.heads, (long)m.tp, (long)m.pp);
}

void MegatronJoin::add(int64_t tp_rank, int64_t pp_rank, const std::string& name, const torch::Tensor& weight, const std::string& file,
                       const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) {
  const int64_t per_stage = m_.config.num_layers / m_.pp;
  const std::string ours = our_name(name, pp_rank * per_stage, m_.pp > 1 && pp_rank == m_.pp - 1, file);
  if (ours.empty()) return;
  if (!weight.defined()) throw Error(ErrorKind::Format, "%s: %s is not a tensor", file.c_str(), name.c_str());
  Parts& p = parts_[ours];
  if (p.kind[0].count(tp_rank)) throw Error(ErrorKind::Format, "%s: %s appears twice", file.c_str(), name.c_str());
  const torch::Tensor* given[3] = {&weight, &exp_avg, &exp_avg_sq};
  for (int k = 0; k < 3; ++k)
    if (given[k]->defined()) p.kind[k][tp_rank] = given[k]->to(torch::kFloat);
}

void MegatronJoin::finish(const std::string& where) {
  bool moments = true;
  for (auto& [name, p] : parts_) {
    if (static_cast<int64_t>(p.kind[0].size()) != m_.tp)
      throw Error(ErrorKind::Format, "%s: %s is in %zu of the %ld tensor-parallel parts", where.c_str(), name.c_str(), p.kind[0].size(),
                  (long)m_.tp);
    const TpSplit split = Gpt2Impl::tp_split(name);
    for (int k = 0; k < 3; ++k) {
      if (static_cast<int64_t>(p.kind[k].size()) != m_.tp) {
        moments = false;
        continue;
      }
      std::vector<torch::Tensor> cut;
      for (auto& [rank, t] : p.kind[k]) cut.push_back(t);
      torch::Tensor whole = split.dim < 0 ? cut[0] : torch::cat(cut, split.dim);  // Megatron's parts are plain cuts of its order
      if (name.find("attn_qkv.") != std::string::npos) whole = qkv_to_ours(whole, m_.config.heads);
      (k == 0 ? m_.params : k == 1 ? m_.exp_avg : m_.exp_avg_sq)[name] = whole;
    }
  }
  if (!moments) m_.exp_avg.clear(), m_.exp_avg_sq.clear();
  parts_.clear();
}

int64_t step_value(const PyValue& v) { return v.is(PyValue::Kind::Tensor) ? static_cast<int64_t>(v.tensor.item<double>()) : static_cast<int64_t>(v.as_float()); }

std::optional<AdamEntry> adam_entry(const PyValue* state, int64_t index, int64_t numel) {
  const PyValue* s = state ? state->find_int(index) : nullptr;
  const PyValue* m = s ? s->find("exp_avg") : nullptr;
  const PyValue* v = s ? s->find("exp_avg_sq") : nullptr;
  if (!m || !v || !m->is(PyValue::Kind::Tensor) || !v->is(PyValue::Kind::Tensor) || m->tensor.numel() < numel || v->tensor.numel() < numel)
    return std::nullopt;
  if (m->tensor.sizes() != v->tensor.sizes()) return std::nullopt;
  AdamEntry e{m->tensor.to(torch::kFloat).flatten().narrow(0, 0, numel), v->tensor.to(torch::kFloat).flatten().narrow(0, 0, numel), 0,
              m->tensor.sizes().vec()};
  if (const PyValue* st = s->find("step")) {
    e.step = step_value(*st);
    e.has_step = true;
  }
  return e;
}

TorchOptimizerState read_torch_optimizer_state(const PyValue& torch_opt, const PyValue* masters, bool flat,
                                               const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  TorchOptimizerState out;
  const PyValue& pg = torch_opt.at("param_groups");
  std::vector<std::vector<size_t>> groups;
  if (pg.is(PyValue::Kind::List) && pg.items.size() == 1) groups.emplace_back(params.size()), std::iota(groups[0].begin(), groups[0].end(), size_t{0});
  else groups = megatron_optimizer_groups(params);
  if (!pg.is(PyValue::Kind::List) || pg.items.size() != groups.size() || (masters && masters->items.size() != groups.size()))
    return out.why = "its parameter groups (" + pg.describe() + ") are not Megatron's " + std::to_string(groups.size()), out;
  const PyValue* state = torch_opt.find("state");
  for (size_t g = 0; g < groups.size(); ++g) {
    const PyValue& members = pg.items[g]->at("params");
    if (members.items.size() != (flat ? 1 : groups[g].size()))
      return out.why = strprintf("its parameter group %zu has %s parameters, the rule gives %zu", g, members.describe().c_str(), groups[g].size()), out;
    int64_t total = 0;
    for (size_t i : groups[g]) total += params[i].second.numel();
    // Only 16-bit parameters have a copy there: a group that also holds fp32 ones would not line up.
    const PyValue* group_masters = masters ? masters->items[g].get() : nullptr;
    if (group_masters && (flat ? group_masters->as_tensor().numel() != total : !group_masters->is(PyValue::Kind::List) || group_masters->items.size() != groups[g].size()))
      return out.why = strprintf("its fp32 master weights of group %zu are %s, for %zu parameters of %ld numbers", g, group_masters->describe().c_str(),
                                 groups[g].size(), (long)total), out;
    const PyValue* group_step = pg.items[g]->find("step");
    const std::optional<AdamEntry> group_entry = flat ? adam_entry(state, members.items[0]->as_int(), total) : std::nullopt;
    int64_t offset = 0;
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const auto& [name, w] = params[groups[g][i]];
      const int64_t n = w.numel();
      if (group_masters) {
        const torch::Tensor m = (flat ? group_masters->as_tensor().flatten().narrow(0, offset, n) : group_masters->items[i]->as_tensor()).to(torch::kFloat);
        if (flat ? m.numel() != n : m.sizes() != w.sizes())
          return out.why = "its fp32 master weight of " + name + " is " + c10::str(m.sizes()) + ", the parameter " + c10::str(w.sizes()), out;
        out.master[name] = m.reshape(w.sizes());
      }
      const std::optional<AdamEntry> e = flat ? group_entry : adam_entry(state, members.items[i]->as_int(), n);
      if (!e || !(flat || e->shaped_as(w.sizes()))) {
        if (out.no_moments.empty()) out.no_moments = name;
      } else {
        const int64_t at = flat ? offset : 0;
        out.exp_avg[name] = e->exp_avg.narrow(0, at, n).view(w.sizes()), out.exp_avg_sq[name] = e->exp_avg_sq.narrow(0, at, n).view(w.sizes());
        if (e->has_step || group_step) out.step = e->has_step ? e->step : step_value(*group_step);
      }
      offset += n;
    }
  }
  if (!out.no_moments.empty()) out.exp_avg.clear(), out.exp_avg_sq.clear();
  return out;
}

bool megatron_no_weight_decay(const std::string& name, const torch::Tensor& t) { return name.ends_with(".bias") || t.dim() == 1; }

std::vector<std::vector<size_t>> megatron_optimizer_groups(const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  std::vector<std::vector<size_t>> g(2);
  for (size_t i = 0; i < params.size(); ++i) g[megatron_no_weight_decay(params[i].first, params[i].second) ? 1 : 0].push_back(i);
  std::erase_if(g, [](const auto& v) { return v.empty(); });
  return g;
}

namespace {

// Megatron's dynamic grad scaler in a part's `optimizer` (Float16OptimizerWithFloat16Params'
// grad_scaler: the scale as a one-element tensor, growth_tracker, hysteresis_tracker) into m;
// nothing when absent (fp32, bf16, a constant scale: its state is empty).
void read_grad_scaler(const PyValue& top, ImportedModel& m) {
  const PyValue* opt = top.find("optimizer");
  const PyValue* g = opt && opt->is(PyValue::Kind::Dict) ? opt->find("grad_scaler") : nullptr;
  const PyValue* scale = g && g->is(PyValue::Kind::Dict) ? g->find("scale") : nullptr;
  if (!scale) return;
  double s = 0;
  if (scale->is(PyValue::Kind::Tensor) && scale->as_tensor().numel() == 1) s = scale->as_tensor().item<double>();
  else if (scale->is(PyValue::Kind::Float) || scale->is(PyValue::Kind::Int)) s = scale->as_float();
  if (!(s > 0) || !std::isfinite(s)) return;
  const PyValue* growth = g->find("growth_tracker");
  const PyValue* hysteresis = g->find("hysteresis_tracker");
  m.loss_scale = {.scale = s,
                  .growth_tracker = growth && growth->is(PyValue::Kind::Int) ? growth->as_int() : 0,
                  .hysteresis_tracker = hysteresis && hysteresis->is(PyValue::Kind::Int) ? hysteresis->as_int()
                                                                                         : std::numeric_limits<int64_t>::max()};  // unsaid: all of it
}

}  // namespace

ImportedModel read_megatron_model(const std::string& dir) {
  const auto t = tracked(dir);
  if (!t) throw Error(ErrorKind::Usage, "%s: no Megatron checkpoint (no readable latest_checkpointed_iteration.txt)", dir.c_str());
  ImportedModel m;
  m.format = "Megatron-LM";
  m.iteration = t->iteration;
  fs::path first = part_file(t->iter_dir, 0, 0, 1);
  if (!fs::exists(first)) first = part_file(t->iter_dir, 0, 0, 2);
  PyValue head = load_torch_file(first.string());
  const std::string where = first.string();
  read_megatron_args(head.at("args"), where, m);
  m.scheduler_samples = scheduler_samples_of(head, m);
  read_grad_scaler(head, m);
  if (const PyValue* v = head.find("checkpoint_version"); v && v->as_float() < 2.0)
    throw Error(ErrorKind::Usage, "%s: checkpoint_version %g stores the fused QKV in an older order; convert it with Megatron's tools first",
                where.c_str(), v->as_float());
  MegatronJoin join(m);
  std::string why_no_moments;
  for (int64_t pp = 0; pp < m.pp; ++pp)
    for (int64_t tp = 0; tp < m.tp; ++tp) {
      const fs::path file = part_file(t->iter_dir, tp, pp, m.pp);
      if (!fs::exists(file)) throw Error(ErrorKind::Format, "%s: missing (the checkpoint was saved with TP %ld x PP %ld)", file.c_str(), (long)m.tp, (long)m.pp);
      const PyValue part = tp == 0 && pp == 0 ? std::move(head) : load_torch_file(file.string());
      if (part.find("model0")) throw Error(ErrorKind::Usage, "%s: an interleaved pipeline's checkpoint (model0, model1, ...) is not read yet", file.c_str());
      std::vector<std::pair<std::string, const PyValue*>> flat;
      flatten(part.at("model"), "", flat);
      // Adam's state: the one zerolm's --ckpt-format torch keeps beside Megatron's keys, else
      // Megatron's own optimizer's (with its fp32 master weights, where it keeps them apart).
      const PyValue* ours = part.find("zerolm_optimizer");
      const PartOptimizer theirs = ours ? PartOptimizer{} : megatron_part_optimizer(part, file, flat);
      if (!theirs.why.empty() && why_no_moments.empty()) why_no_moments = file.string() + ": " + theirs.why;
      auto moment = [&](const char* kind, const std::string& name) {
        if (!ours) {
          const auto& from = std::string_view(kind) == "exp_avg" ? theirs.exp_avg : theirs.exp_avg_sq;
          const auto it = from.find(name);
          return it != from.end() ? it->second : torch::Tensor();
        }
        const PyValue* d = ours->find(kind);
        const PyValue* t = d ? d->find(name) : nullptr;
        return t && t->is(PyValue::Kind::Tensor) ? t->as_tensor() : torch::Tensor();
      };
      if (ours) m.adam_step = ours->at("step").as_int();
      else if (!theirs.exp_avg.empty()) m.adam_step = theirs.step;
      if (PartRng rng = read_megatron_rng(part, file.string()); rng.cpu.defined()) m.rng[{tp, pp}] = std::move(rng);
      for (const auto& [name, value] : flat) {
        const auto master = theirs.master.find(name);
        const torch::Tensor weight = master != theirs.master.end() ? master->second : value->is(PyValue::Kind::Tensor) ? value->as_tensor() : torch::Tensor();
        join.add(tp, pp, name, weight, file.string(), moment("exp_avg", name), moment("exp_avg_sq", name));
      }
    }
  join.finish(dir);
  if (!why_no_moments.empty()) ZLM_LOG_WRN("Megatron's optimizer state is not read (%s): Adam starts afresh", why_no_moments.c_str());
  return m;
}

Gpt2 imported_model(ImportedModel m, const std::string& dir) {
  Gpt2 model(m.config, ModelPart{}, ParamInit::Empty);
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    auto it = m.params.find(item.key());
    if (it == m.params.end()) throw Error(ErrorKind::Format, "%s: the checkpoint has no %s", dir.c_str(), item.key().c_str());
    if (it->second.sizes() != item.value().sizes())
      throw Error(ErrorKind::Format, "%s: %s is %s in the checkpoint, %s by its args", dir.c_str(), item.key().c_str(),
                  c10::str(it->second.sizes()).c_str(), c10::str(item.value().sizes()).c_str());
    item.value().copy_(it->second);
    m.params.erase(it);
  }
  if (!m.params.empty()) throw Error(ErrorKind::Format, "%s: %s has no place in the model its args describe", dir.c_str(), m.params.begin()->first.c_str());
  ZLM_LOG_INF(" read %s checkpoint %s at iteration %ld (saved with TP %ld x PP %ld)", m.format.c_str(), dir.c_str(), (long)m.iteration,
              (long)m.tp, (long)m.pp);
  model->eval();
  return model;
}

std::shared_ptr<PyValue> megatron_part_state(const std::map<std::string, torch::Tensor>& ours, const MegatronPart& part) {
  const Gpt2Config& c = part.config;
  const int64_t per_stage = c.num_layers / part.pp, first_layer = part.pp_rank * per_stage;
  const bool first_stage = part.pp_rank == 0, last_stage = part.pp_rank == part.pp - 1;
  auto state = py_dict();
  auto put = [&](const std::string& name, const std::shared_ptr<PyValue>& v) { state->entries.emplace_back(py_str(name), v); };
  auto weights = [&](const std::string& theirs, const std::string& mine, bool extra) {
    for (const char* kind : {"weight", "bias"}) {
      auto it = ours.find(mine + "." + kind);
      if (it == ours.end()) continue;
      const torch::Tensor t = it->second.detach().to(torch::kFloat);
      put(theirs + "." + kind, py_tensor(mine.ends_with("attn_qkv") ? qkv_to_megatron(t, c.heads / part.tp) : t));
    }
    if (extra) put(theirs + "._extra_state", py_none());  // what megatron-core's linear layers save
  };
  if (first_stage) {
    weights("embedding.word_embeddings", "wte", false);
    weights("embedding.position_embeddings", "wpe", false);
  }
  for (int64_t l = first_layer; l < first_layer + per_stage; ++l) {
    const std::string t = "decoder.layers." + std::to_string(l - first_layer) + ".", o = "blocks." + std::to_string(l) + ".";
    weights(t + "input_layernorm", o + "ln1", false);
    weights(t + "self_attention.linear_proj", o + "attn_proj", true);
    weights(t + "self_attention.linear_qkv", o + "attn_qkv", true);
    weights(t + "pre_mlp_layernorm", o + "ln2", false);
    weights(t + "mlp.linear_fc1", o + "mlp_fc", true);
    weights(t + "mlp.linear_fc2", o + "mlp_proj", true);
  }
  if (last_stage) {
    weights("decoder.final_layernorm", "ln_f", false);
    if (!first_stage) weights("output_layer", "wte", false);  // the last stage's copy of the tied embedding
    put("output_layer._extra_state", py_none());
  }
  return state;
}

std::shared_ptr<PyValue> megatron_state_dict(Gpt2& model) {
  std::map<std::string, torch::Tensor> ours;
  for (const auto& item : model->named_parameters()) ours[item.key()] = item.value();
  return megatron_part_state(ours, MegatronPart{.config = model->config()});
}

std::shared_ptr<PyValue> megatron_args(const MegatronPart& part) {
  const Gpt2Config& c = part.config;
  auto args = py_dict();
  auto arg_of = [&](const char* name, const std::shared_ptr<PyValue>& v) { args->entries.emplace_back(py_str(name), v); };
  arg_of("num_layers", py_int(c.num_layers));
  arg_of("hidden_size", py_int(c.hidden));
  arg_of("ffn_hidden_size", py_int(4 * c.hidden));
  arg_of("num_attention_heads", py_int(c.heads));
  arg_of("kv_channels", py_int(c.hidden / c.heads));
  arg_of("max_position_embeddings", py_int(c.max_positions));
  arg_of("seq_length", py_int(c.max_positions));
  arg_of("padded_vocab_size", py_int(c.vocab_size));
  if (c.vocab_entries > 0) arg_of("zerolm_vocab_entries", py_int(c.vocab_entries));  // ours: Megatron ignores it
  arg_of("tensor_model_parallel_size", py_int(part.tp));
  arg_of("pipeline_model_parallel_size", py_int(part.pp));
  arg_of("data_parallel_size", py_int(part.dp));
  arg_of("overlap_grad_reduce", py_bool(part.overlap_grad_reduce));
  arg_of("ddp_bucket_size", part.ddp_bucket_size > 0 ? py_int(part.ddp_bucket_size) : py_none());
  arg_of("position_embedding_type", py_str("learned_absolute"));
  arg_of("normalization", py_str("LayerNorm"));
  arg_of("layernorm_epsilon", py_float(1e-5));
  arg_of("add_bias_linear", py_bool(true));
  arg_of("bias_gelu_fusion", py_bool(!c.erf_gelu));
  arg_of("openai_gelu", py_bool(false));
  arg_of("swiglu", py_bool(false));
  arg_of("untie_embeddings_and_output_weights", py_bool(false));
  arg_of("group_query_attention", py_bool(false));
  arg_of("apply_residual_connection_post_layernorm", py_bool(false));
  arg_of("params_dtype", py_global("torch.float32"));
  arg_of("iteration", py_int(part.iteration));
  arg_of("consumed_train_samples", py_int(part.consumed_train));
  arg_of("consumed_valid_samples", py_int(part.consumed_valid));
  return py_namespace(args);
}

namespace {

// MT19937 as Python's `random` and numpy's legacy RandomState seed it (Matsumoto and Nishimura's
// init_genrand and init_by_array).
std::vector<uint32_t> mt_init_genrand(uint32_t s) {
  std::vector<uint32_t> mt(624);
  mt[0] = s;
  for (uint32_t i = 1; i < 624; ++i) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
  return mt;
}

std::vector<uint32_t> mt_init_by_array(const std::vector<uint32_t>& key) {
  std::vector<uint32_t> mt = mt_init_genrand(19650218u);
  size_t i = 1, j = 0;
  for (size_t k = std::max<size_t>(624, key.size()); k > 0; --k) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<uint32_t>(j);
    if (++i >= 624) mt[0] = mt[623], i = 1;
    if (++j >= key.size()) j = 0;
  }
  for (size_t k = 623; k > 0; --k) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    if (++i >= 624) mt[0] = mt[623], i = 1;
  }
  mt[0] = 0x80000000u;
  return mt;
}

// random.seed(n) for an int n >= 0: its 32-bit words, least significant first (0 gives [0]).
std::vector<uint32_t> python_seed_key(uint64_t n) {
  std::vector<uint32_t> key{static_cast<uint32_t>(n)};
  if (n >> 32) key.push_back(static_cast<uint32_t>(n >> 32));
  return key;
}

std::shared_ptr<PyValue> int_tuple(const std::vector<uint32_t>& words) {
  std::vector<std::shared_ptr<PyValue>> items;
  for (uint32_t w : words) items.push_back(py_int(w));
  return py_tuple(std::move(items));
}

// A CUDA generator's state as torch's get_state() gives it: the seed (u64) and the Philox offset (i64).
torch::Tensor cuda_seed_state(uint64_t seed) {
  torch::Tensor t = torch::zeros({16}, torch::kUInt8);
  std::memcpy(t.data_ptr<uint8_t>(), &seed, sizeof seed);
  return t;
}

torch::Tensor byte_state(const PyValue* v, const char* key, const std::string& file) {
  if (!v || v->is(PyValue::Kind::None)) return {};
  if (!v->is(PyValue::Kind::Tensor) || v->as_tensor().scalar_type() != torch::kUInt8)
    throw Error(ErrorKind::Format, "%s: rng_state's %s is a %s, not a byte tensor", file.c_str(), key, v->describe().c_str());
  return v->as_tensor();
}

}  // namespace

int64_t scheduler_samples_of(const PyValue& top, const ImportedModel& m) {
  for (const char* key : {"opt_param_scheduler", "lr_scheduler"}) {
    const PyValue* s = top.find(key);
    const PyValue* n = s && s->is(PyValue::Kind::Dict) ? s->find("num_steps") : nullptr;
    if (!n || !(n->is(PyValue::Kind::Int) || n->is(PyValue::Kind::Float))) continue;
    const double steps = n->as_float();
    return steps >= 0 && steps <= static_cast<double>(m.consumed_train) ? static_cast<int64_t>(steps) : -1;
  }
  return -1;
}

std::shared_ptr<PyValue> megatron_rng_state(const PartRng& streams, uint64_t seed, int64_t tp_rank) {
  auto s = py_dict();
  auto put = [&](const char* k, std::shared_ptr<PyValue> v) { s->entries.emplace_back(py_str(k), std::move(v)); };
  std::vector<uint32_t> py = mt_init_by_array(python_seed_key(seed));
  py.push_back(624);  // the index: the next draw regenerates the block
  put("random_rng_state", py_tuple({py_int(3), int_tuple(py), py_none()}));
  auto key = py_list();
  for (uint32_t w : mt_init_genrand(static_cast<uint32_t>(seed))) key->items.push_back(py_int(w));
  put("np_rng_state", py_tuple({py_str("MT19937"), key, py_int(624), py_int(0), py_float(0.0)}));
  put("torch_rng_state", py_tensor(streams.cpu));
  put("cuda_rng_state", py_tensor(streams.device.defined() ? streams.device : cuda_seed_state(seed)));
  auto trackers = py_dict();
  const uint64_t tp_seed = seed + 2718 + static_cast<uint64_t>(tp_rank);
  trackers->entries.emplace_back(py_str("data-parallel-rng"), py_tensor(cuda_seed_state(seed)));
  trackers->entries.emplace_back(py_str("model-parallel-rng"), py_tensor(streams.tracker.defined() ? streams.tracker : cuda_seed_state(tp_seed)));
  trackers->entries.emplace_back(py_str("expert-parallel-rng"), py_tensor(cuda_seed_state(seed + 1024)));
  put("rng_tracker_states", trackers);
  auto list = py_list();
  list->items.push_back(s);
  return list;
}

PartRng read_megatron_rng(const PyValue& part, const std::string& file) {
  PartRng r;
  r.file = file;
  const PyValue* states = &part;  // before 2022 the keys were at the top level
  if (const PyValue* list = part.find("rng_state"); list && !list->is(PyValue::Kind::None)) {
    if (!(list->is(PyValue::Kind::List) || list->is(PyValue::Kind::Tuple)) || list->items.empty() || !list->items[0]->is(PyValue::Kind::Dict))
      throw Error(ErrorKind::Format, "%s: rng_state is a %s, not a list of dicts", file.c_str(), list->describe().c_str());
    states = list->items[0].get();
  }
  r.cpu = byte_state(states->find("torch_rng_state"), "torch_rng_state", file);
  r.device = byte_state(states->find("cuda_rng_state"), "cuda_rng_state", file);
  if (const PyValue* t = states->find("rng_tracker_states"); t && t->is(PyValue::Kind::Dict))
    r.tracker = byte_state(t->find("model-parallel-rng"), "model-parallel-rng", file);
  r.cpu_tracker = byte_state(part.find("zerolm_rng_tracker"), "zerolm_rng_tracker", file);
  return r;
}

void save_megatron_checkpoint(const std::string& dir, Gpt2& model, int64_t iteration) {
  if (fs::exists(fs::path(dir) / "latest_checkpointed_iteration.txt"))
    throw Error(ErrorKind::Usage, "%s already holds a checkpoint: an exported model starts a new directory", dir.c_str());
  PyValue top;
  top.kind = PyValue::Kind::Dict;
  top.entries.emplace_back(py_str("args"), megatron_args(MegatronPart{.config = model->config(), .iteration = iteration}));
  top.entries.emplace_back(py_str("checkpoint_version"), py_float(3.0));
  top.entries.emplace_back(py_str("iteration"), py_int(iteration));
  top.entries.emplace_back(py_str("model"), megatron_state_dict(model));
  const fs::path file = part_file(fs::path(dir) / megatron_iter_name(iteration), 0, 0, 1);
  fs::create_directories(file.parent_path());
  save_torch_file(file.string(), top);
  // Last: the checkpoint is complete before the tracker names it.
  write_file_atomic((fs::path(dir) / "latest_checkpointed_iteration.txt").string(), std::to_string(iteration));
}

}  // namespace zlm::trainer
