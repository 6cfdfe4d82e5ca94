// Tensor parallelism inside the model, as Megatron-LM does it (docs/design.md,
// "Tensor parallelism"): the mappings between replicated and split regions,
// the vocab-parallel cross-entropy, how each parameter is split, and the
// model-parallel RNG tracker. The groups come from trainer/parallel/grid.h.
//
//   TensorParallel tp{&grid.tp(), grid.tp_size(), grid.tp_rank(), sequence_parallel, &rng};
//   y = reduce_from_tp(matmul(copy_to_tp(x, tp), w_part), tp);   // a column- then row-parallel pair
#pragma once

#include <torch/torch.h>

#include <vector>

#include "trainer/parallel/comm.h"

namespace zlm::trainer {

// Megatron's model-parallel RNG: a second generator state for the work that
// differs between tensor-parallel ranks (attention dropout on split heads;
// everything in sequence-parallel regions). fork() swaps it in as the device's
// default generator around a computation, so any random op (dropout inside
// scaled_dot_product_attention too) draws from it.
class RngTracker {
 public:
  // The default generator of `device` starts from `seed`, the tracker from `tracker_seed`.
  void seed(const torch::Device& device, uint64_t seed, uint64_t tracker_seed);
  template <class F>
  auto fork(F&& f) {
    if (forked_) return f();  // already inside (sequence parallel wraps whole blocks)
    Fork guard(*this);
    return f();
  }
  torch::Tensor state() const { return state_; }
  void set_state(const torch::Tensor& s) { state_ = s; }
  const torch::Device& device() const { return device_; }

 private:
  struct Fork {
    explicit Fork(RngTracker& t);
    ~Fork();
    RngTracker& t;
    torch::Tensor before;
  };
  torch::Device device_{torch::kCPU};
  torch::Tensor state_;
  bool forked_ = false;
};

// Sets the default generator of `device` to `state` (when defined) and returns the state it had.
torch::Tensor swap_rng_state(const torch::Device& device, const torch::Tensor& state);

// What a layer needs of tensor parallelism. size 1: every mapping is the identity.
struct TensorParallel {
  Comm* comm = nullptr;
  int size = 1, rank = 0;
  bool sequence_parallel = false;  // activations outside the split regions are split along the sequence (dim 1)
  RngTracker* rng = nullptr;
  bool active() const { return size > 1; }
  bool sp() const { return sequence_parallel && size > 1; }
};

// Megatron's mappings (f, g and the sequence-parallel ones); tensors are (B, T, ...), the sequence is dim 1.
// A sequence-parallel rank holds a run of B * T / TP tokens in memory order (rank r the r-th), viewed as
// (B, T / TP, ...): the cut that makes every gather and reduce-scatter a plain concatenation. The
// all-reduces work in place on their input (forward) or gradient (backward), as Megatron's do.
torch::Tensor copy_to_tp(const torch::Tensor& x, const TensorParallel& tp);          // identity; backward all-reduce
torch::Tensor reduce_from_tp(const torch::Tensor& x, const TensorParallel& tp);      // all-reduce; backward identity
torch::Tensor scatter_to_sp(const torch::Tensor& x, const TensorParallel& tp);       // own run of tokens; backward all-gather
torch::Tensor gather_from_sp(const torch::Tensor& x, const TensorParallel& tp);      // all-gather; backward reduce-scatter
torch::Tensor reduce_scatter_to_sp(const torch::Tensor& x, const TensorParallel& tp);  // reduce-scatter; backward all-gather

// Cross-entropy per token of logits split over the vocabulary: logits (N, V/TP)
// of this rank's rows [rank * V/TP, (rank + 1) * V/TP), targets (N) -> (N) fp32,
// never gathering the full logits (the row maxima, then target logits and sums
// of exp, are all-reduced over TP; nothing with TP 1). The logits keep their
// dtype (16-bit in mixed precision); the arithmetic is fp32, and no fp32 copy of
// the whole logits exists in forward or backward. The gradient is softmax - one-hot.
// Two implementations:
//   Chunked: chunks of `chunk_rows` rows (0: as many as make 8 Mi elements), a
//            few ATen ops per chunk; the CPU path and the reference.
//   Fused:   llm.c's loss: one read of the logits gives each row's maximum, sum
//            of exp (a running pair, rescaled as the maximum grows) and target
//            logit; one read and one write give the gradient, over the logits
//            themselves when `logits_dead`. On a CUDA device a kernel
//            (fused_ce.cu, where nvcc built it) does each pass; elsewhere its
//            ATen twin runs the same arithmetic over chunks of `chunk_cols`
//            columns (0: 4096), which is how the CPU tests prove it.
// Auto: Fused on a CUDA device when the kernel is built, else Chunked.
enum class CeImpl { Auto, Chunked, Fused };
struct CeOptions {
  int64_t chunk_rows = 0;
  int64_t chunk_cols = 0;
  CeImpl impl = CeImpl::Auto;
  bool logits_dead = false;  // the caller never reads the logits again (the fused path may overwrite them)
};
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, const TensorParallel& tp,
                                           const CeOptions& options = {});

// How a parameter is split over tensor-parallel ranks: along `dim`, in `groups`
// interleaved groups (the fused QKV weight: 3 groups, q, k and v, each split by
// heads); dim -1: replicated.
struct TpSplit {
  int dim = -1;
  int groups = 1;
};
// Rank r's part of a full tensor, and the full tensor from every rank's part.
torch::Tensor tp_slice(const torch::Tensor& full, TpSplit split, int size, int rank);
torch::Tensor tp_concat(const std::vector<torch::Tensor>& parts, TpSplit split);

}  // namespace zlm::trainer
