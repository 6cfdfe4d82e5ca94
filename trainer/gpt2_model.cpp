#include "trainer/gpt2_model.h"

#include <ATen/autocast_mode.h>

#include <cmath>

namespace zlm::trainer {

namespace F = torch::nn::functional;

namespace {

// The autocast state of a device type, applied for a scope and restored after it.
struct AutocastState {
  c10::DeviceType device = c10::DeviceType::CUDA;
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;
  static AutocastState current(c10::DeviceType device) {
    return {device, at::autocast::is_autocast_enabled(device), at::autocast::get_autocast_dtype(device)};
  }
  void apply() const {
    at::autocast::set_autocast_dtype(device, dtype);
    at::autocast::set_autocast_enabled(device, enabled);
  }
};

// Sets the default generator of `device` to `state` and returns the state it had.
torch::Tensor swap_rng_state(const torch::Device& device, const torch::Tensor& state) {
  auto gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  torch::Tensor before = gen.get_state();
  if (state.defined()) gen.set_state(state);
  return before;
}

}  // namespace

void save_for_recompute(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
  ctx->saved_data["rng"] = swap_rng_state(x.device(), torch::Tensor());
  AutocastState a = AutocastState::current(x.device().type());
  ctx->saved_data["autocast"] = a.enabled;
  ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(a.dtype);
  ctx->save_for_backward({x});
}

std::pair<torch::Tensor, torch::Tensor> recompute(torch::autograd::AutogradContext* ctx, Gpt2BlockImpl* block) {
  torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
  torch::Tensor rng_now = swap_rng_state(x.device(), ctx->saved_data["rng"].toTensor());
  const AutocastState autocast_now = AutocastState::current(x.device().type());
  AutocastState{x.device().type(), ctx->saved_data["autocast"].toBool(), static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt())}
      .apply();
  torch::Tensor y;
  {
    torch::AutoGradMode enable(true);
    y = block->forward(x);
  }
  autocast_now.apply();
  swap_rng_state(x.device(), rng_now);
  return {x, y};
}

namespace {

// Activation checkpointing: the block's forward runs without saving
// activations; backward recomputes it with autograd on and backpropagates.
struct CheckpointFn : public torch::autograd::Function<CheckpointFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, Gpt2BlockImpl* block) {
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    save_for_recompute(ctx, x);
    torch::NoGradGuard no_grad;
    return block->forward(x);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    auto [x, y] = recompute(ctx, reinterpret_cast<Gpt2BlockImpl*>(ctx->saved_data["block"].toInt()));
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

Gpt2BlockImpl::Gpt2BlockImpl(const Gpt2Config& c)
    : heads_(c.heads), hidden_dropout_(c.hidden_dropout), attention_dropout_(c.attention_dropout) {
  const int64_t C = c.hidden;
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C}).eps(1e-5)));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C}).eps(1e-5)));
  attn_qkv = register_module("attn_qkv", torch::nn::Linear(C, 3 * C));
  attn_proj = register_module("attn_proj", torch::nn::Linear(C, C));
  mlp_fc = register_module("mlp_fc", torch::nn::Linear(C, 4 * C));
  mlp_proj = register_module("mlp_proj", torch::nn::Linear(4 * C, C));
  const double out_std = c.init_std / std::sqrt(2.0 * static_cast<double>(c.num_layers));
  torch::NoGradGuard no_grad;
  for (auto* l : {&attn_qkv, &mlp_fc}) {
    (*l)->weight.normal_(0.0, c.init_std);
    (*l)->bias.zero_();
  }
  for (auto* l : {&attn_proj, &mlp_proj}) {
    (*l)->weight.normal_(0.0, out_std);
    (*l)->bias.zero_();
  }
}

torch::Tensor Gpt2BlockImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / heads_;
  auto qkv = attn_qkv(ln1(x)).view({B, T, 3, heads_, hs}).permute({2, 0, 3, 1, 4});  // (3, B, nh, T, hs)
  auto att = at::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], {}, is_training() ? attention_dropout_ : 0.0,
                                              /*is_causal=*/true);                                   // (B, nh, T, hs)
  auto y = att.transpose(1, 2).contiguous().view({B, T, C});
  auto h = x + F::dropout(attn_proj(y), F::DropoutFuncOptions().p(hidden_dropout_).training(is_training()));
  auto m = mlp_proj(F::gelu(mlp_fc(ln2(h)), F::GELUFuncOptions().approximate("tanh")));
  return h + F::dropout(m, F::DropoutFuncOptions().p(hidden_dropout_).training(is_training()));
}

torch::Tensor gpt2_embed(const torch::Tensor& idx, const torch::Tensor& wte, const torch::Tensor& wpe) {
  auto pos = torch::arange(idx.size(1), torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
  return at::embedding(wte, idx) + at::embedding(wpe, pos);
}

torch::Tensor gpt2_head(const torch::Tensor& x, const torch::Tensor& wte, const torch::Tensor& ln_weight, const torch::Tensor& ln_bias) {
  return torch::matmul(at::layer_norm(x, {x.size(-1)}, ln_weight, ln_bias, 1e-5), wte.t());
}

Gpt2Impl::Gpt2Impl(const Gpt2Config& c) : config_(c) {
  wte = register_module("wte", torch::nn::Embedding(c.vocab_size, c.hidden));
  wpe = register_module("wpe", torch::nn::Embedding(c.max_positions, c.hidden));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t l = 0; l < c.num_layers; ++l) blocks->push_back(Gpt2Block(c));
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden}).eps(1e-5)));
  torch::NoGradGuard no_grad;
  wte->weight.normal_(0.0, c.init_std);
  wpe->weight.normal_(0.0, c.init_std);
}

torch::Tensor Gpt2Impl::forward(const torch::Tensor& idx) {
  auto x = embed_fn ? embed_fn(idx) : gpt2_embed(idx, wte->weight, wpe->weight);
  x = F::dropout(x, F::DropoutFuncOptions().p(config_.hidden_dropout).training(is_training()));
  for (size_t l = 0; l < blocks->size(); ++l) {
    auto* block = blocks[l]->as<Gpt2BlockImpl>();
    if (block_fn)
      x = block_fn(l, x);
    else if (config_.checkpoint_activations && is_training() && x.requires_grad())
      x = CheckpointFn::apply(x, block);
    else
      x = block->forward(x);
  }
  return head_fn ? head_fn(x) : gpt2_head(x, wte->weight, ln_f->weight, ln_f->bias);
}

torch::Tensor Gpt2Impl::loss(const torch::Tensor& tokens, const torch::Tensor& labels) {
  auto logits = forward(tokens);
  return F::cross_entropy(logits.view({-1, logits.size(-1)}).to(torch::kFloat), labels.reshape({-1}));
}

int64_t Gpt2Impl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace zlm::trainer
