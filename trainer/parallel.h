// Model parallelism as Megatron-LM lays it out (docs/design.md, "Parallel
// training"): the process grid and its groups, the tensor-parallel mappings
// between replicated and split regions, the vocab-parallel cross-entropy, and
// the model-parallel RNG tracker.
//
// Grid: world = TP x DP x PP, global rank = tp + TP * (dp + DP * pp), so the
// ranks of one tensor-parallel group are adjacent, then data parallel, then the
// pipeline (Megatron's default order).
//
//   ProcessGrid grid(world_comm, /*tp=*/2, /*pp=*/2);
//   grid.tp()  // the ranks that split each layer (adjacent)
//   grid.dp()  // the ranks holding the same model part (ZeRO shards over it)
//   grid.pp()  // the stages of one pipeline; grid.embedding(): its first and last
//   grid.mp()  // the TP x PP ranks of one model replica (gradient norm)
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "trainer/comm.h"

namespace zlm::trainer {

class ProcessGrid {
 public:
  // Creates the groups (collective over the world: every rank calls it with the same sizes).
  ProcessGrid(Comm& world, int tp, int pp);
  int tp_size() const { return tp_size_; }
  int pp_size() const { return pp_size_; }
  int dp_size() const { return dp_size_; }
  int tp_rank() const { return tp_rank_; }
  int pp_rank() const { return pp_rank_; }
  int dp_rank() const { return dp_rank_; }
  bool first_stage() const { return pp_rank_ == 0; }
  bool last_stage() const { return pp_rank_ == pp_size_ - 1; }
  int global_rank(int tp, int dp, int pp) const { return tp + tp_size_ * (dp + dp_size_ * pp); }
  Comm& world() { return world_; }
  Comm& tp() { return *tp_; }
  Comm& dp() { return *dp_; }
  Comm& pp() { return *pp_; }
  Comm& mp() { return *mp_; }
  // The first and last stage of this rank's pipeline (null on other stages and without PP).
  Comm* embedding() { return embedding_.get(); }
  // "rank 0: tp 0 pp 0 dp 0" lines, one per rank.
  std::string describe() const;

 private:
  Comm& world_;
  int tp_size_ = 1, pp_size_ = 1, dp_size_ = 1, tp_rank_ = 0, pp_rank_ = 0, dp_rank_ = 0;
  std::unique_ptr<Comm> tp_, dp_, pp_, mp_, embedding_;
};

// The layers of pipeline stage `stage` (of `stages`), one list per virtual chunk:
// chunk v holds layers [(v * stages + stage) * n, + n), n = layers / (stages * chunks).
std::vector<std::vector<int64_t>> stage_layers(int64_t layers, int stages, int chunks, int stage);

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
torch::Tensor copy_to_tp(const torch::Tensor& x, const TensorParallel& tp);          // identity; backward all-reduce
torch::Tensor reduce_from_tp(const torch::Tensor& x, const TensorParallel& tp);      // all-reduce; backward identity
torch::Tensor scatter_to_sp(const torch::Tensor& x, const TensorParallel& tp);       // own sequence chunk; backward all-gather
torch::Tensor gather_from_sp(const torch::Tensor& x, const TensorParallel& tp);      // all-gather; backward reduce-scatter
torch::Tensor reduce_scatter_to_sp(const torch::Tensor& x, const TensorParallel& tp);  // reduce-scatter; backward all-gather

// Cross-entropy per token of logits split over the vocabulary: logits (N, V/TP)
// of this rank's rows [rank * V/TP, (rank + 1) * V/TP), targets (N) -> (N) fp32,
// never gathering the full logits (the row maxima, then target logits and sums
// of exp, are all-reduced over TP; nothing with TP 1). The logits keep their
// dtype (16-bit in mixed precision); the arithmetic is fp32 over chunks of
// `chunk_rows` rows (0: as many as make 8 Mi elements), so no fp32 copy of the
// whole logits exists in forward or backward. The gradient is softmax - one-hot.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, const TensorParallel& tp,
                                           int64_t chunk_rows = 0);

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
