// GPT-2 as Megatron and Hugging Face define it: learned absolute positions,
// pre-LayerNorm blocks, causal self-attention through
// scaled_dot_product_attention (flash/efficient kernels on GPU), tanh-GELU MLP
// of 4h, final LayerNorm, output projection tied to the token embedding, vocab
// padded to a multiple of --make-vocab-size-divisible-by (x TP). Initialisation
// as Megatron: normal(0, init_method_std) for every weight, output projections
// of attention and MLP scaled by 1/sqrt(2 * num_layers), biases and LayerNorm
// shifts 0, LayerNorm scales 1. Each parameter is drawn from its own generator
// (seeded by the run's seed and the parameter's name) as a full tensor and then
// cut, so the initial model is the same for every TP/PP layout (Megatron's
// --use-cpu-initialization property). For training, the parameters are
// created without storage (ParamInit::Deferred) and drawn one at a time
// straight into the buffers that hold them (trainer/zero/engine.h), on the training
// device: no whole fp32 copy of the model exists anywhere. A GPU draws with its
// own generator (Philox), so a GPU run starts from other values than a CPU run
// (the same on every layout of one GPU type); Gpt2Config::cpu_initialization
// draws on the CPU instead.
//
// Precision: the module computes in its parameters' dtype. In mixed precision
// the ZeRO engine makes them 16-bit (trainer/zero/engine.h), so activations, the
// residual stream and logits are 16-bit, as under Megatron's Float16Module;
// LayerNorm and the attention softmax accumulate in fp32 inside their kernels,
// and the loss is computed in fp32 over chunks of the 16-bit logits
// (vocab_parallel_cross_entropy).
//
// One object is the part of the model a rank holds (ModelPart): the layers of
// its pipeline stage (one list per virtual-pipeline chunk), the embeddings on
// the first stage, the final LayerNorm and the loss on the last, every split
// weight cut for its tensor-parallel rank (Megatron's 1D scheme: column-parallel
// QKV and MLP up-projection, row-parallel attention and MLP output, heads split,
// vocab-parallel embedding, output projection and cross-entropy). With
// ModelPart{} it is the whole model, as one process trains and as checkpoints,
// export and generation see it.
//
// Parameter names are local ("blocks.<i>" counts this part's blocks from 0);
// global_name() gives the whole model's name ("blocks.<layer>"), which
// checkpoints use.
//
// Shapes (B batch, T sequence, C hidden, Vp padded vocab):
//   forward(idx: (B, T) int64) -> logits (B, T, Vp / TP) of the parameters' dtype
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "trainer/model/fused_linear.h"
#include "trainer/model/tensor_parallel.h"

namespace zlm::trainer {

class Gpt2BlockImpl;

// For autograd functions that run a block without autograd in forward and
// recompute it in backward (activation checkpointing, ZeRO-3).
// save_for_recompute keeps the input and the RNG states (the default
// generator's and the model-parallel tracker's: the dropout masks must be the
// same). recompute reruns `block` on the saved input, which now requires grad,
// under those states: returns (input, output) with a graph between them.
// (No autocast anywhere: in mixed precision the parameters themselves are
// 16-bit, so the recomputation needs no per-thread precision state.)
void save_for_recompute(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const RngTracker* rng);
std::pair<torch::Tensor, torch::Tensor> recompute(torch::autograd::AutogradContext* ctx, Gpt2BlockImpl* block);

// The layers outside the blocks, as functions of their weights (the module
// runs them on its parameters, ZeRO-3 on gathered copies; the same operations
// either way): token + position embedding of idx (B, T) -> (B, T, C) (wte: this
// rank's vocabulary rows), and the final LayerNorm with the output projection
// tied to the token embedding (B, T or T/TP, C) -> logits (B, T, Vp/TP).
torch::Tensor gpt2_embed(const torch::Tensor& idx, const torch::Tensor& wte, const torch::Tensor& wpe, const TensorParallel& tp);
// The embedding's backward into gradient buffers shaped like wte and wpe
// (added to them): what autograd computes for gpt2_embed, without its weights.
void gpt2_embed_backward(const torch::Tensor& grad, const torch::Tensor& idx, torch::Tensor& wte_grad, torch::Tensor& wpe_grad,
                         const TensorParallel& tp);
torch::Tensor gpt2_head(const torch::Tensor& x, const torch::Tensor& wte, const torch::Tensor& ln_weight, const torch::Tensor& ln_bias,
                        const TensorParallel& tp);
// Mean cross-entropy of logits (B, T, Vp/TP) against labels (B, T).
torch::Tensor gpt2_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels, const TensorParallel& tp);

struct Gpt2Config {
  int64_t vocab_size = 50304;  // padded
  int64_t vocab_entries = 0;   // of those rows, the tokens of the vocabulary file (0: not known); the rest is padding
  int64_t max_positions = 1024;
  int64_t num_layers = 12, hidden = 768, heads = 12;
  double init_std = 0.02, hidden_dropout = 0.1, attention_dropout = 0.1;
  bool checkpoint_activations = false;
  uint64_t seed = 1234;             // initial weights
  bool cpu_initialization = false;  // initial_value() draws on the CPU, not on the device asked for
  // The MLP's GELU: the tanh approximation (Megatron's default fused bias-GELU,
  // GPT-2's gelu_new), or exact with erf (Megatron's --no-bias-gelu-fusion).
  bool erf_gelu = false;
};

// How a model's parameters are created.
enum class ParamInit {
  Draw,      // on the CPU, with their initial values (the whole-model uses: tests, benchmarks)
  Empty,     // on the CPU, uninitialised (the caller loads weights into them)
  Deferred,  // shape only, no storage: the owner of the parameters' memory
             // (the ZeRO engine) gives them storage and fills it from initial_value()
};

// One layer's parameters under the names LibTorch's Linear, LayerNorm and
// Embedding use (weight, and bias when bias_size > 0), created as ParamInit says.
class LayerParamsImpl : public torch::nn::Module {
 public:
  LayerParamsImpl(const std::vector<int64_t>& weight_shape, int64_t bias_size, ParamInit init);
  torch::Tensor weight, bias;
};
TORCH_MODULE(LayerParams);

// The part of the model one rank holds.
struct ModelPart {
  TensorParallel tp;
  bool pre = true, post = true;              // embeddings (first stage) / final LayerNorm, head and loss (last stage)
  std::vector<std::vector<int64_t>> chunks;  // the layers of each virtual-pipeline chunk; empty: all layers, one chunk
};

class Gpt2BlockImpl : public torch::nn::Module {
 public:
  // main: the fp32 gradient buffers its linear layers' backward adds into (trainer/model/fused_linear.h).
  Gpt2BlockImpl(const Gpt2Config& c, const TensorParallel* tp, ParamInit init, const MainGrads* main = nullptr);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T or T/TP, C) -> the same
  const TensorParallel& tp() const { return *tp_; }
  LayerParams ln1{nullptr}, ln2{nullptr};                                     // LayerNorm: weight, bias (C)
  LayerParams attn_qkv{nullptr}, attn_proj{nullptr}, mlp_fc{nullptr}, mlp_proj{nullptr};  // Linear: weight (out, in), bias (out)

 private:
  torch::Tensor compute(const torch::Tensor& x);
  const TensorParallel* tp_;
  const MainGrads* main_grads_;
  int64_t heads_;  // on this rank
  double hidden_dropout_, attention_dropout_;
  const char* gelu_;  // F::gelu's approximate: "tanh" or "none" (erf)
};
TORCH_MODULE(Gpt2Block);

class Gpt2Impl : public torch::nn::Module {
 public:
  explicit Gpt2Impl(const Gpt2Config& c, ModelPart part = {}, ParamInit init = ParamInit::Draw);
  // The whole model (one chunk holding the embeddings and the head): logits.
  torch::Tensor forward(const torch::Tensor& idx);
  // Mean cross-entropy of the next token: tokens (B, T), labels (B, T).
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& labels);
  // Chunk v's forward: `input` is the tokens (B, T) on the first chunk of the
  // first stage, else the activation the previous chunk produced; returns the
  // activation, or on the last chunk of the last stage the mean loss on `labels`.
  torch::Tensor forward_chunk(size_t v, const torch::Tensor& input, const torch::Tensor& labels);
  size_t num_chunks() const { return chunk_blocks_.size(); }
  // The local blocks of chunk v (consecutive indices, in model order).
  const std::vector<size_t>& chunk_blocks(size_t v) const { return chunk_blocks_.at(v); }
  // The activation a chunk passes on: (B, T or T/TP with sequence parallelism, C).
  std::vector<int64_t> activation_shape(int64_t batch, int64_t seq) const;

  int64_t num_parameters() const;
  // Parameter `local`'s initial value on this rank (its tensor-parallel part),
  // fp32 on `device`: drawn there, or on the CPU with cpu_initialization. The
  // values do not depend on the device's layout, only on the seed, the name
  // and where they are drawn.
  torch::Tensor initial_value(const std::string& local, const torch::Device& device) const;
  bool deferred() const { return init_ == ParamInit::Deferred; }
  const Gpt2Config& config() const { return config_; }
  const ModelPart& part() const { return part_; }
  const TensorParallel& tp() const { return part_.tp; }
  // Names: local <-> the whole model's; how each is split over TP ranks.
  std::string global_name(const std::string& local) const;
  static TpSplit tp_split(const std::string& name);
  // Whether a parameter's gradient counts in the global gradient norm on this
  // rank: split ones always, replicated ones on TP rank 0, the last stage's
  // copy of the tied embedding never (Megatron's rules).
  bool counts_in_grad_norm(const std::string& local) const;
  // Whether a parameter's gradient on this rank is a partial sum over the TP
  // ranks: with sequence parallelism, the replicated parameters used on each
  // rank's own tokens (LayerNorms, the row-parallel layers' biases). The ZeRO
  // engine sums them over TP once before reducing them (ZeroConfig::tp_partial).
  bool tp_partial_grad(const std::string& local) const;

  // When set, block l runs as block_fn(l, x) instead of blocks[l](x) (ZeRO-3
  // gathers the block's parameters around it; see trainer/zero/engine.h).
  std::function<torch::Tensor(size_t, const torch::Tensor&)> block_fn;
  // When set, they replace gpt2_embed / gpt2_head on the module's parameters
  // (ZeRO-3 shards the embeddings and the final LayerNorm too).
  std::function<torch::Tensor(const torch::Tensor&)> embed_fn, head_fn;
  LayerParams wte{nullptr}, wpe{nullptr};  // Embedding: weight (rows, C)
  torch::nn::ModuleList blocks{nullptr};
  LayerParams ln_f{nullptr};
  // Where the blocks' linear layers add their gradients in backward, when the
  // ZeRO engine registers fp32 buffers (Megatron's gradient-accumulation fusion).
  MainGrads& main_grads() { return main_grads_; }

 private:
  MainGrads main_grads_;
  Gpt2Config config_;
  ModelPart part_;
  ParamInit init_;
  std::vector<int64_t> layers_;                    // global layer of each local block
  std::vector<std::vector<size_t>> chunk_blocks_;  // local blocks of each chunk
};
TORCH_MODULE(Gpt2);

}  // namespace zlm::trainer
