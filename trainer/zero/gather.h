// ZeRO-3's parameter gathering: a bucket's parameters exist only as shards and
// are all-gathered around each use, then dropped.
//
// A block's forward gathers its bucket, runs without autograd and releases
// it; its backward gathers it again, recomputes with autograd, releases it and
// reduce-scatters the parameter gradients into the shard (through the
// GradientReducer). The next bucket's gather is started (prefetched) before a
// bucket computes, so communication overlaps computation; at most two buckets
// are gathered at once. Forward order within a chunk: the embeddings (outer
// and wte's bucket) on the first chunk of the first stage, its blocks, the
// head (wte's bucket and outer) on the last chunk of the last stage; backward:
// the head, the blocks last to first, then the embeddings' backward, which
// needs no weights. Nothing is prefetched across a chunk's end: with pipeline
// parallelism the schedule decides what runs next (ZeroLayout::next_forward).
//
// The outer bucket (and the tied embedding's own bucket with pipeline
// parallelism) is sharded too: gathered for the embedding lookup and again for
// the head (final LayerNorm, tied output projection) and its backward; its
// gradient, begun by the head's backward, is completed by the lookup's and then
// reduce-scattered, or reduce-scattered by the head's backward on a last
// pipeline stage.
//
//   ParameterGatherer g(model, state, comm, reducer);   // sets model->block_fn, embed_fn, head_fn
//   ... forward/backward run through it ...
//
// The autograd functions reach it through a typed handle
// (trainer/model/autograd_handle.h); it must outlive the model's graphs.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainer/parallel/comm.h"
#include "trainer/zero/reduction.h"
#include "trainer/zero/state.h"

namespace zlm::trainer {

class ParameterGatherer {
 public:
  ParameterGatherer(Gpt2& model, ZeroState& state, Comm& comm, GradientReducer& reducer);
  ~ParameterGatherer();  // the model's functions back to its own parameters
  ParameterGatherer(const ParameterGatherer&) = delete;
  ParameterGatherer& operator=(const ParameterGatherer&) = delete;

  // A gather started and never used would hold the parameters of before the
  // last update: none is kept across steps.
  void begin_step();

  // For the autograd functions (gather.cpp).
  void prefetch(size_t b);
  void gather(size_t b);    // the bucket's module parameters become views of its gathered buffer
  void release(size_t b);   // and are dropped again
  // The embeddings' and the head's weights: wte's bucket and the outer one,
  // gathered (one buffer when wte is in the outer bucket). Both gathers are
  // under way before either is waited for.
  std::pair<torch::Tensor, torch::Tensor> gathered_outer();
  // The named parameter of a bucket, as a view of a flat buffer of its size.
  torch::Tensor view_of(size_t b, const torch::Tensor& flat, const std::string& name) const;
  // Zeroed gradient buffers for wte's bucket and the outer one (the same
  // buffer twice when wte is in the outer bucket), which the head's backward
  // begins and the embeddings' completes; reduce_outer_grads reduce-scatters
  // them (wte's bucket first) and drops them.
  void start_outer_grads();
  bool outer_grads_started() const { return outer_grad_.defined(); }
  torch::Tensor& wte_grad() { return wte_grad_; }
  torch::Tensor& outer_grad() { return outer_grad_; }
  void reduce_outer_grads();
  // Parameter offload: the host waits until no copy up still reads a shard
  // (before the optimizer or a checkpoint load writes the shards).
  void wait_uploads();

  Gpt2& model;
  ZeroState& state;
  const ZeroLayout& layout;
  GradientReducer& reducer;

 private:
  struct InFlight {
    torch::Tensor full, src;
    std::unique_ptr<Comm::Pending> op;
  };
  InFlight start_gather(size_t b);
  torch::Tensor gathered(size_t b);  // the prefetched gather, or a new one
  torch::Tensor run_block(size_t l, const torch::Tensor& x);
  torch::Tensor run_embed(const torch::Tensor& idx);
  torch::Tensor run_head(const torch::Tensor& x);

  Comm& comm_;
  CopyStream h2d_;  // parameter offload: the pinned shards up to the device
  std::vector<std::optional<c10::Event>> uploads_;  // per bucket: its shard's last copy up
  std::map<size_t, InFlight> inflight_;
  torch::Tensor anchor_;  // a leaf that requires grad, so that the embedding's backward runs
  torch::Tensor outer_grad_, wte_grad_;
};

}  // namespace zlm::trainer
