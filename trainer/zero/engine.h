// ZeRO data parallelism for the GPT-2 trainer (stages 0-3, CPU offload), over
// the collectives of trainer/parallel/comm.h, on the data-parallel group: with tensor or
// pipeline parallelism the model is this rank's part of it (trainer/model/gpt2_model.h)
// and the communicator the ranks that hold the same part.
//
// The engine is the face of five parts, one file each in trainer/zero/:
//   layout.h     which parameter lives in which bucket and shard (pure arithmetic)
//   state.h      the buckets' tensors, allocated once and drawn in place; the memory plan
//   reduction.h  gradient reduction: hooks, launch order, the offload copies down
//   gather.h     stage 3: parameters gathered around each use (three autograd functions)
//   optimizer.h  AdamW on the owned ranges, publishing, the delayed update, checkpoint state
// What each stage shards is decided once in the configuration (ZeroPlan,
// trainer/config/settings.h); the parts read its capabilities, never the stage
// number.
//
// Layout (every stage): the parameters are grouped into buckets, one per
// transformer block plus one "outer" bucket (token and position embeddings,
// final LayerNorm), in model order. A bucket is one flat buffer of the
// parameter dtype (fp32, or bf16/fp16 in mixed precision: the module then runs
// in 16-bit, as Megatron's Float16Module and DeepSpeed do), weights (decayed)
// first and biases/LayerNorm (not decayed) after, zero-padded to a multiple of
// world * 64 elements, so rank r owns the contiguous range
// [r * padded / world, (r + 1) * padded / world) of every bucket. The
// optimizer owns fp32 master weights and Adam moments of that range; in mixed
// precision the master weights are a copy, cast into the 16-bit parameters
// after each step. Gradients accumulate over micro-batches and are reduced in
// the gradient dtype (ZeroConfig::grad_dtype).
//
//   stage 0  replicated: gradients accumulate in full buffers (param.grad is a
//            view of the bucket; with fp32 gradients of 16-bit parameters an
//            autograd post-hook adds each param.grad into the bucket and drops
//            it, Megatron's main_grad) and are all-reduced per bucket during
//            the last micro-batch's backward (in one fixed bucket order on all
//            ranks); every rank keeps full Adam states and steps them.
//   stage 1  optimizer states sharded: as stage 0, but reduce-scattered in
//            place (the rank's shard is its range of the full buffer, as
//            Megatron's distributed optimizer and llm.c do: no second gradient
//            buffer); each rank steps its shard and the parameters are
//            all-gathered (in the parameter dtype).
//   stage 2  + gradients sharded: as soon as backward has produced a bucket's
//            gradients (autograd post-hooks), they are reduce-scattered into the
//            rank's gradient shard and freed, on every micro-batch, in one
//            fixed bucket order on all ranks (per virtual-pipeline chunk: the
//            schedule calls after_backward(chunk) after each backward pass).
//   stage 3  + parameters sharded: a block's parameters exist only as shards;
//            a custom autograd function gathers them for the block's forward and
//            again for its recomputed backward, then drops them and
//            reduce-scatters the gradients; the next block's gather runs in the
//            background while a block computes (prefetch, within a chunk). The
//            outer bucket (and the tied embedding's own bucket with pipeline
//            parallelism) is sharded too: gathered for the embedding lookup
//            and again for the head (final LayerNorm, tied output projection)
//            and its backward; its gradient, begun by the head's backward, is
//            completed by the lookup's (which needs no weights) and then
//            reduce-scattered, or reduce-scattered by the head's backward on
//            a last pipeline stage.
//   Reductions run in the background while backward computes the next bucket
//   (one in flight; DeepSpeed's overlap_comm, DDP's bucketing) and complete in
//   launch order, so the sums are those of blocking reductions.
//   offload  fp32 master weights, Adam moments and gradient shards live in CPU
//            memory (pinned, allocated at their exact size, with CUDA) and
//            AdamW runs there (the fused CPU kernel, in chunks); each chunk's
//            new parameters are cast to the parameter dtype on the host and
//            copied up (16-bit parameters cross the bus once per step). Stage 3
//            can also keep the parameter shards in CPU memory (offload_params).
//            Gradients go down in their reduction dtype as soon as a bucket's
//            reduction is done, on a copy stream of their own that waits for
//            the compute stream by an event (the compute stream never waits
//            for a copy): at stages 0, 1 into a host copy of the shard, which
//            the step's AdamW of that bucket waits for (by its event, not the
//            whole device); at stages 2, 3 into a pinned staging buffer, added
//            to the host shard when the next bucket's reduction is done. The
//            loss-scale and averaging factor of gradients copied this way is
//            applied on the host, in fp32 (as for 16-bit gradients, below).
//   delayed  with offload, DeepSpeed's delayed parameter update (the ZeRO-Offload
//            paper's DPU), after ZeroConfig::delayed_update_after synchronous
//            steps: step i copies its gradients (unscaled, clipped, fp32) to
//            host buffers of their own and runs the CPU AdamW in a background
//            thread, while the forward and backward of step i + 1 run on the
//            parameters of before step i; step i + 1 waits for it and publishes
//            its parameters (copies up, all-gathers) before launching its own.
//            So every gradient is one update stale. sync() completes the update
//            in flight; the engine calls it before it reads the master weights
//            (checkpoints, the parameter norm), the trainer before evaluating.
//   16-bit gradients are multiplied by the loss-scale and averaging factors
//   only when the optimizer reads them in fp32 (an fp16 gradient scaled back
//   in fp16 would underflow): reduce_grads records the factor, the norm and
//   the step apply it. So do the gradients that offload copies to the host
//   while backward still runs (stages 0, 1).
//
// Checkpoints hold full per-parameter tensors (master weights, exp_avg,
// exp_avg_sq, step), so a run saved by W ranks resumes on any W'.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

#include "trainer/model/gpt2_model.h"
#include "trainer/parallel/comm.h"
#include "trainer/zero/layout.h"
#include "trainer/zero/optimizer.h"
#include "trainer/zero/state.h"

namespace zlm::trainer {

class GradientReducer;
class ParameterGatherer;

class ZeroEngine {
 public:
  ZeroEngine(Gpt2& model, Comm& comm, const ZeroConfig& cfg, const torch::Device& device);
  ~ZeroEngine();
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  // One optimizer step: begin_step(number of micro-batches); forward/backward
  // of each micro-batch, each backward pass followed by after_backward(the
  // virtual-pipeline chunk it ran through; 0 without); then reduce_grads();
  // then step().
  void begin_step(int64_t micro_batches);
  void after_backward(size_t chunk = 0);
  // Reduces what is left over the data-parallel group and multiplies every
  // gradient by grad_mult (loss-scale and micro-batch factors).
  void reduce_grads(double grad_mult);
  // After reduce_grads: this rank's reduced gradient of a parameter that has a
  // bucket of its own (ZeroConfig::own_buckets), padded: the owned range.
  torch::Tensor reduced_grad(const std::string& param);
  // The sum of squares of the counted gradients held by the data-parallel
  // group (NaN/inf on overflow); the caller adds the other model-parallel ranks'.
  double grad_sum_of_squares();
  // The same as a (1)-element double tensor on the device, not read.
  torch::Tensor grad_sum_of_squares_tensor();
  // Megatron's --log-num-zeros-in-grad: the zero elements among the same
  // gradients (after reduce_grads), and --log-params-norm: the sum of squares
  // of the same parameters' fp32 master weights (after step); each summed over
  // the data-parallel group, the caller adds the other model-parallel ranks'.
  double grad_num_zeros();
  double param_sum_of_squares();
  // AdamW on this rank's shard with the given LR, gradients multiplied by
  // clip_coef first; then the parameters are brought up to date everywhere
  // (a delayed update: when the next step() or sync() publishes it).
  void step(double lr, double clip_coef);
  // The same with the clipping coefficient (double) and a skip flag (fp32, 1:
  // skip) as device tensors, so that the host queues the step without
  // waiting for the norm (ShardOptimizer::StepScale). Then, once the caller
  // has read the flag, confirm_step(whether the step was taken).
  void step(double lr, const torch::Tensor& clip_coef, const torch::Tensor& found_inf);
  void confirm_step(bool taken);
  // Completes a delayed update in flight and publishes its parameters
  // (collective with a sharded optimizer; nothing to do without one).
  void sync();

  MemoryPlan plan() const;
  // The bytes this rank's tensors really hold for Adam moments and master
  // weights (counted from the tensors, not from the formula).
  int64_t optimizer_state_bytes() const;
  // The bytes of parameters this rank keeps between uses (full buffers, or
  // its shards at stage 3; not the buffers gathered for a computation).
  int64_t resident_parameter_bytes() const;
  // The same for the whole model, unsharded (padded: over the padded buckets).
  int64_t optimizer_state_bytes_full(bool padded) const;
  int64_t padded_numel() const { return layout_.padded_numel(); }  // over all buckets
  int64_t unpadded_numel() const { return layout_.unpadded_numel(); }
  // Each parameter's shape on this rank (its tensor-parallel cut; whole even at
  // stage 3, whose module holds empty tensors between uses), by the module's name.
  std::map<std::string, std::vector<int64_t>> param_shapes() const;

  // Checkpoints (collective: every rank must call). Full tensors by parameter
  // name on rank 0 (other ranks get empty maps); load takes full tensors on every rank.
  using FullState = ZeroFullState;
  FullState gather_state();
  void load_state(const FullState& s);

 private:
  ZeroConfig cfg_;
  ZeroLayout layout_;
  std::unique_ptr<ZeroState> state_;
  std::unique_ptr<CopyStream> d2h_;  // gradients to the host (CUDA; a plain copy on CPU)
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<ParameterGatherer> gatherer_;  // stage 3 only
  std::unique_ptr<ShardOptimizer> optimizer_;
};

}  // namespace zlm::trainer
