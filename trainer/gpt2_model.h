// GPT-2 as Megatron and Hugging Face define it: learned absolute positions,
// pre-LayerNorm blocks, causal self-attention through
// scaled_dot_product_attention (flash/efficient kernels on GPU), tanh-GELU MLP
// of 4h, final LayerNorm, output projection tied to the token embedding, vocab
// padded to a multiple of --make-vocab-size-divisible-by. Initialisation as
// Megatron: normal(0, init_method_std) for every weight, output projections of
// attention and MLP scaled by 1/sqrt(2 * num_layers), biases and LayerNorm
// shifts 0, LayerNorm scales 1.
//
// Shapes (B batch, T sequence, C hidden, Vp padded vocab):
//   forward(idx: (B, T) int64) -> logits (B, T, Vp) float
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace zlm::trainer {

class Gpt2BlockImpl;

// For autograd functions that run a block without autograd in forward and
// recompute it in backward (activation checkpointing, ZeRO-3).
// save_for_recompute keeps the input, the RNG state (the dropout masks must be
// the same) and the autocast state of its device, which LibTorch keeps per thread while
// backward runs on the autograd engine's threads. recompute reruns `block` on
// the saved input, which now requires grad, under those states: returns
// (input, output) with a graph between them.
void save_for_recompute(torch::autograd::AutogradContext* ctx, const torch::Tensor& x);
std::pair<torch::Tensor, torch::Tensor> recompute(torch::autograd::AutogradContext* ctx, Gpt2BlockImpl* block);

// The layers outside the blocks, as functions of their weights (the module
// runs them on its parameters, ZeRO-3 on gathered copies; the same operations
// either way): token + position embedding of idx (B, T) -> (B, T, C), and the
// final LayerNorm with the output projection tied to the token embedding
// (B, T, C) -> logits (B, T, Vp).
torch::Tensor gpt2_embed(const torch::Tensor& idx, const torch::Tensor& wte, const torch::Tensor& wpe);
torch::Tensor gpt2_head(const torch::Tensor& x, const torch::Tensor& wte, const torch::Tensor& ln_weight, const torch::Tensor& ln_bias);

struct Gpt2Config {
  int64_t vocab_size = 50304;  // padded
  int64_t max_positions = 1024;
  int64_t num_layers = 12, hidden = 768, heads = 12;
  double init_std = 0.02, hidden_dropout = 0.1, attention_dropout = 0.1;
  bool checkpoint_activations = false;
};

class Gpt2BlockImpl : public torch::nn::Module {
 public:
  explicit Gpt2BlockImpl(const Gpt2Config& c);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear attn_qkv{nullptr}, attn_proj{nullptr}, mlp_fc{nullptr}, mlp_proj{nullptr};

 private:
  int64_t heads_;
  double hidden_dropout_, attention_dropout_;
};
TORCH_MODULE(Gpt2Block);

class Gpt2Impl : public torch::nn::Module {
 public:
  explicit Gpt2Impl(const Gpt2Config& c);
  torch::Tensor forward(const torch::Tensor& idx);
  // Mean cross-entropy of the next token: tokens (B, T), labels (B, T).
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& labels);
  int64_t num_parameters() const;
  const Gpt2Config& config() const { return config_; }
  // When set, block l runs as block_fn(l, x) instead of blocks[l](x) (ZeRO-3
  // gathers the block's parameters around it; see trainer/zero.h).
  std::function<torch::Tensor(size_t, const torch::Tensor&)> block_fn;
  // When set, they replace gpt2_embed / gpt2_head on the module's parameters
  // (ZeRO-3 shards the embeddings and the final LayerNorm too).
  std::function<torch::Tensor(const torch::Tensor&)> embed_fn, head_fn;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};

 private:
  Gpt2Config config_;
};
TORCH_MODULE(Gpt2);

}  // namespace zlm::trainer
