#include "trainer/model/gpt2_model.h"

#include <cmath>
#include <cstring>

#include <ATen/detail/CUDAHooksInterface.h>

#include "common/core/error.h"
#include "trainer/model/autograd_handle.h"
#include "trainer/model/fused_layer_norm.h"

namespace zlm::trainer {

namespace F = torch::nn::functional;

namespace {

torch::Tensor drop(const torch::Tensor& x, double p, bool training) {
  return F::dropout(x, F::DropoutFuncOptions().p(p).training(training));
}

// FNV-1a: a seed per parameter name, the same in every build.
uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

void save_for_recompute(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const RngTracker* rng) {
  ctx->saved_data["rng"] = swap_rng_state(x.device(), torch::Tensor());
  if (rng && rng->state().defined()) ctx->saved_data["tracker"] = rng->state();
  ctx->save_for_backward({x});
}

std::pair<torch::Tensor, torch::Tensor> recompute(torch::autograd::AutogradContext* ctx, Gpt2BlockImpl* block) {
  torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
  torch::Tensor rng_now = swap_rng_state(x.device(), ctx->saved_data["rng"].toTensor());
  RngTracker* tracker = block->tp().rng;
  torch::Tensor tracker_now;
  if (tracker && ctx->saved_data.count("tracker")) {
    tracker_now = tracker->state();
    tracker->set_state(ctx->saved_data["tracker"].toTensor());
  }
  torch::Tensor y;
  {
    torch::AutoGradMode enable(true);
    y = block->forward(x);
  }
  if (tracker_now.defined()) tracker->set_state(tracker_now);
  swap_rng_state(x.device(), rng_now);
  return {x, y};
}

namespace {

// Activation checkpointing: the block's forward runs without saving
// activations; backward recomputes it with autograd on and backpropagates.
struct CheckpointFn : public torch::autograd::Function<CheckpointFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, Gpt2BlockImpl* block) {
    ctx->saved_data["block"] = autograd_handle(block);
    save_for_recompute(ctx, x, block->tp().rng);
    torch::NoGradGuard no_grad;
    return block->forward(x);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    auto [x, y] = recompute(ctx, from_autograd_handle<Gpt2BlockImpl>(ctx->saved_data["block"]));
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

LayerParamsImpl::LayerParamsImpl(const std::vector<int64_t>& weight_shape, int64_t bias_size, ParamInit init) {
  auto make = [&](const std::vector<int64_t>& shape) {
    // Deferred: every stride 0, one element of storage, whatever the shape.
    return init == ParamInit::Deferred ? torch::empty_strided(shape, std::vector<int64_t>(shape.size(), 0)) : torch::empty(shape);
  };
  weight = register_parameter("weight", make(weight_shape));
  if (bias_size > 0) bias = register_parameter("bias", make({bias_size}));
}

Gpt2BlockImpl::Gpt2BlockImpl(const Gpt2Config& c, const TensorParallel* tp, ParamInit init, const MainGrads* main)
    : tp_(tp), main_grads_(main), heads_(c.heads / tp->size), hidden_dropout_(c.hidden_dropout), attention_dropout_(c.attention_dropout),
      gelu_(c.erf_gelu ? "none" : "tanh") {
  const int64_t C = c.hidden, n = tp->size;
  auto linear = [&](const char* name, int64_t in, int64_t out) { return register_module(name, LayerParams(std::vector<int64_t>{out, in}, out, init)); };
  ln1 = register_module("ln1", LayerParams(std::vector<int64_t>{C}, C, init));
  ln2 = register_module("ln2", LayerParams(std::vector<int64_t>{C}, C, init));
  attn_qkv = linear("attn_qkv", C, 3 * C / n);    // column-parallel
  attn_proj = linear("attn_proj", C / n, C);      // row-parallel
  mlp_fc = linear("mlp_fc", C, 4 * C / n);        // column-parallel
  mlp_proj = linear("mlp_proj", 4 * C / n, C);    // row-parallel
}

torch::Tensor Gpt2BlockImpl::forward(const torch::Tensor& x) {
  // Sequence parallelism: every random op of the block differs between TP ranks.
  if (tp_->sp() && tp_->rng) return tp_->rng->fork([&] { return compute(x); });
  return compute(x);
}

torch::Tensor Gpt2BlockImpl::compute(const torch::Tensor& x) {
  const TensorParallel& tp = *tp_;
  const bool sp = tp.sp();
  // Replicated parameters used on sequence chunks get different gradients on
  // each TP rank (tp_partial_grad): the ZeRO engine sums them over TP once
  // before their reduction, as Megatron does after backward.
  auto norm = [&](LayerParams& ln, const torch::Tensor& in) { return fused_layer_norm(in, ln->weight, ln->bias, 1e-5, main_grads_); };
  auto enter = [&](const torch::Tensor& h) { return sp ? gather_from_sp(h, tp) : copy_to_tp(h, tp); };    // into a split region
  auto leave = [&](const torch::Tensor& h) { return sp ? reduce_scatter_to_sp(h, tp) : reduce_from_tp(h, tp); };  // out of it

  // at::linear (through fused_linear, which adds the gradients into fp32 buffers when the engine has
  // registered them), not the C++ frontend's F::linear (which is matmul + add above 2-D): ATen folds
  // (B, T, C) into one GEMM that adds the bias (addmm; cuBLASLt's bias epilogue).
  auto linear = [&](const torch::Tensor& in, const torch::Tensor& w, const torch::Tensor& b) { return fused_linear(in, w, b, main_grads_); };
  auto qkv = linear(enter(norm(ln1, x)), attn_qkv->weight, attn_qkv->bias);  // (B, T, 3 * heads * hs), [q | k | v] by head
  const int64_t B = qkv.size(0), T = qkv.size(1), hs = qkv.size(2) / (3 * heads_);
  // unbind, not qkv[0..2]: each select's backward would zero-fill a qkv-sized gradient and add the three.
  // Unbound at qkv's own dimension 2 and transposed after: the backward stacks the three gradients
  // straight into qkv's (B, T, 3, nh, hs) layout. (Unbinding a permuted view stacked them into the
  // permuted order, which the view's backward then copied once more: 4% of a 124M step on an H100.)
  const std::vector<torch::Tensor> q_k_v = qkv.view({B, T, 3, heads_, hs}).unbind(2);  // 3 x (B, T, nh, hs)
  const double p_att = is_training() ? attention_dropout_ : 0.0;
  auto attend = [&] {
    return at::scaled_dot_product_attention(q_k_v[0].transpose(1, 2), q_k_v[1].transpose(1, 2), q_k_v[2].transpose(1, 2), {}, p_att,
                                            /*is_causal=*/true);  // (B, nh, T, hs) views
  };
  // Attention dropout acts on this rank's heads: Megatron draws it from the tracker.
  auto att = p_att > 0 && tp.rng ? tp.rng->fork(attend) : attend();  // (B, nh, T, hs)
  auto y = att.transpose(1, 2).contiguous().view({B, T, heads_ * hs});
  // A row-parallel layer: its bias is added once, after the partial products are summed over TP; on one
  // rank, by the GEMM.
  auto row_parallel = [&](const torch::Tensor& in, LayerParams& p) {
    return tp.active() ? leave(linear(in, p->weight, torch::Tensor())) + p->bias : linear(in, p->weight, p->bias);
  };
  auto o = row_parallel(y, attn_proj);
  auto h = x + drop(o, hidden_dropout_, is_training());
  auto f = F::gelu(linear(enter(norm(ln2, h)), mlp_fc->weight, mlp_fc->bias), F::GELUFuncOptions().approximate(gelu_));
  auto m = row_parallel(f, mlp_proj);
  return h + drop(m, hidden_dropout_, is_training());
}

torch::Tensor gpt2_embed(const torch::Tensor& idx, const torch::Tensor& wte, const torch::Tensor& wpe, const TensorParallel& tp) {
  auto pos = torch::arange(idx.size(1), torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
  torch::Tensor words;
  if (!tp.active()) {
    words = at::embedding(wte, idx);
  } else {  // vocab-parallel: rows outside this rank's range read row 0 and are zeroed, then summed over TP
    const int64_t lo = tp.rank * wte.size(0);
    auto outside = (idx < lo).logical_or(idx >= lo + wte.size(0));
    words = reduce_from_tp(at::embedding(wte, (idx - lo).masked_fill(outside, 0)).masked_fill(outside.unsqueeze(-1), 0), tp);
  }
  return words + at::embedding(wpe, pos);
}

void gpt2_embed_backward(const torch::Tensor& grad, const torch::Tensor& idx, torch::Tensor& wte_grad, torch::Tensor& wpe_grad,
                         const TensorParallel& tp) {
  auto pos = torch::arange(idx.size(1), idx.options());
  torch::Tensor g = grad, local = idx;
  if (tp.active()) {
    const int64_t lo = tp.rank * wte_grad.size(0);
    auto outside = (idx < lo).logical_or(idx >= lo + wte_grad.size(0));
    local = (idx - lo).masked_fill(outside, 0);
    g = grad.masked_fill(outside.unsqueeze(-1), 0);
  }
  wte_grad.add_(at::embedding_backward(g, local, wte_grad.size(0), -1, false, false));
  wpe_grad.add_(at::embedding_backward(at::sum_to(grad, c10::IntArrayRef{idx.size(1), grad.size(-1)}), pos, wpe_grad.size(0), -1, false, false));
}

torch::Tensor gpt2_head(const torch::Tensor& x, const torch::Tensor& wte, const torch::Tensor& ln_weight, const torch::Tensor& ln_bias,
                        const TensorParallel& tp) {
  const bool sp = tp.sp();
  auto h = at::layer_norm(x, {x.size(-1)}, ln_weight, ln_bias, 1e-5);  // sequence parallel: a partial gradient (tp_partial_grad)
  h = sp ? gather_from_sp(h, tp) : copy_to_tp(h, tp);
  return torch::matmul(h, wte.t());
}

torch::Tensor gpt2_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels, const TensorParallel& tp) {
  // The logits die with the loss (the callers keep none), so the fused loss writes its gradient over them.
  CeOptions o;
  o.logits_dead = true;
  return vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}), tp, o).mean();
}

Gpt2Impl::Gpt2Impl(const Gpt2Config& c, ModelPart part, ParamInit init) : config_(c), part_(std::move(part)), init_(init) {
  if (part_.chunks.empty()) {
    part_.chunks.emplace_back();
    for (int64_t l = 0; l < c.num_layers; ++l) part_.chunks[0].push_back(l);
  }
  const int64_t n = part_.tp.size;
  if (c.heads % n != 0 || c.vocab_size % n != 0 || c.hidden % c.heads != 0)
    throw Error(ErrorKind::Usage, "%ld attention heads, hidden size %ld and padded vocabulary %ld cannot be split over %ld tensor-parallel ranks",
                (long)c.heads, (long)c.hidden, (long)c.vocab_size, (long)n);
  if (part_.pre || part_.post) wte = register_module("wte", LayerParams(std::vector<int64_t>{c.vocab_size / n, c.hidden}, 0, init));
  if (part_.pre) wpe = register_module("wpe", LayerParams(std::vector<int64_t>{c.max_positions, c.hidden}, 0, init));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (const auto& chunk : part_.chunks) {
    chunk_blocks_.emplace_back();
    for (int64_t l : chunk) {
      chunk_blocks_.back().push_back(layers_.size());
      layers_.push_back(l);
      blocks->push_back(Gpt2Block(c, &part_.tp, init, &main_grads_));
    }
  }
  if (part_.post) ln_f = register_module("ln_f", LayerParams(std::vector<int64_t>{c.hidden}, c.hidden, init));
  if (init == ParamInit::Draw) {
    torch::NoGradGuard no_grad;
    for (auto& item : named_parameters()) item.value().copy_(initial_value(item.key(), torch::kCPU));
  }
}

TpSplit Gpt2Impl::tp_split(const std::string& name) {
  auto ends = [&](const char* s) { return name.size() >= std::strlen(s) && name.compare(name.size() - std::strlen(s), std::string::npos, s) == 0; };
  if (ends("attn_qkv.weight") || ends("attn_qkv.bias")) return {0, 3};
  if (name == "wte.weight" || ends("mlp_fc.weight") || ends("mlp_fc.bias")) return {0, 1};
  if (ends("attn_proj.weight") || ends("mlp_proj.weight")) return {1, 1};
  return {};
}

std::string Gpt2Impl::global_name(const std::string& local) const {
  if (local.rfind("blocks.", 0) != 0) return local;
  const size_t dot = local.find('.', 7);
  const size_t i = std::stoul(local.substr(7, dot - 7));
  return "blocks." + std::to_string(layers_.at(i)) + local.substr(dot);
}

bool Gpt2Impl::counts_in_grad_norm(const std::string& local) const {
  if (local == "wte.weight" && !part_.pre) return false;  // the last stage's copy of the tied embedding
  return tp_split(local).dim >= 0 || part_.tp.rank == 0;
}

bool Gpt2Impl::tp_partial_grad(const std::string& local) const {
  if (!part_.tp.sp() || tp_split(local).dim >= 0) return false;
  return local.rfind("ln_f.", 0) == 0 || local.find(".ln") != std::string::npos || local.ends_with("attn_proj.bias") ||
         local.ends_with("mlp_proj.bias");
}

// Every parameter from a generator of its own, drawn whole and cut for this rank.
torch::Tensor Gpt2Impl::initial_value(const std::string& local, const torch::Device& device) const {
  const torch::Tensor* p = named_parameters().find(local);
  if (!p) throw Error(ErrorKind::Internal, "no parameter %s", local.c_str());
  const std::string global = global_name(local);
  auto ends = [&](const char* suffix) {
    return global.size() >= std::strlen(suffix) && global.compare(global.size() - std::strlen(suffix), std::string::npos, suffix) == 0;
  };
  auto on = torch::TensorOptions().dtype(torch::kFloat).device(device);
  if (ends(".bias")) return torch::zeros(p->sizes(), on);
  if (global.rfind("ln_f.", 0) == 0 || global.find(".ln") != std::string::npos) return torch::ones(p->sizes(), on);
  const TpSplit split = tp_split(local);
  std::vector<int64_t> full = p->sizes().vec();
  if (split.dim >= 0) full[static_cast<size_t>(split.dim)] *= part_.tp.size;
  const torch::Device where = config_.cpu_initialization || !device.is_cuda() ? torch::Device(torch::kCPU) : device;
  const uint64_t seed = name_seed(config_.seed, global);
  at::Generator gen;
  if (where.is_cuda()) {
    gen = at::detail::getCUDAHooks().getNewGenerator(where.index());
    gen.set_current_seed(seed);
  } else {
    gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  }
  const double out_std = config_.init_std / std::sqrt(2.0 * static_cast<double>(config_.num_layers));
  const double std = ends("attn_proj.weight") || ends("mlp_proj.weight") ? out_std : config_.init_std;
  torch::Tensor v = torch::empty(full, on.device(where)).normal_(0.0, std, gen);
  return tp_slice(v, split, part_.tp.size, part_.tp.rank).to(device);
}

torch::Tensor Gpt2Impl::forward_chunk(size_t v, const torch::Tensor& input, const torch::Tensor& labels) {
  const TensorParallel& tp = part_.tp;
  torch::Tensor x = input;
  if (v == 0 && part_.pre) {
    x = embed_fn ? embed_fn(input) : gpt2_embed(input, wte->weight, wpe->weight, tp);
    x = scatter_to_sp(x, tp);
    auto embed_dropout = [&] { return drop(x, config_.hidden_dropout, is_training()); };
    x = tp.sp() && tp.rng ? tp.rng->fork(embed_dropout) : embed_dropout();
  }
  for (size_t l : chunk_blocks_.at(v)) {
    auto* block = blocks[l]->as<Gpt2BlockImpl>();
    if (block_fn)
      x = block_fn(l, x);
    else if (config_.checkpoint_activations && is_training() && x.requires_grad())
      x = CheckpointFn::apply(x, block);
    else
      x = block->forward(x);
  }
  if (v + 1 < chunk_blocks_.size() || !part_.post) return x;
  auto logits = head_fn ? head_fn(x) : gpt2_head(x, wte->weight, ln_f->weight, ln_f->bias, tp);
  return labels.defined() ? gpt2_lm_loss(logits, labels, tp) : logits;
}

torch::Tensor Gpt2Impl::forward(const torch::Tensor& idx) {
  if (!part_.pre || !part_.post || chunk_blocks_.size() != 1) throw Error(ErrorKind::Internal, "forward() needs the whole model");
  return forward_chunk(0, idx, torch::Tensor());
}

torch::Tensor Gpt2Impl::loss(const torch::Tensor& tokens, const torch::Tensor& labels) {
  if (!part_.pre || !part_.post || chunk_blocks_.size() != 1) throw Error(ErrorKind::Internal, "loss() needs the whole model");
  return forward_chunk(0, tokens, labels);
}

std::vector<int64_t> Gpt2Impl::activation_shape(int64_t batch, int64_t seq) const {
  return {batch, part_.tp.sp() ? seq / part_.tp.size : seq, config_.hidden};
}

int64_t Gpt2Impl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace zlm::trainer
