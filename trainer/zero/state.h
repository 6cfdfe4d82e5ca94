// The ZeRO engine's tensors on this rank, one Bucket per bucket of the layout
// (trainer/zero/layout.h): the parameters (the full flat buffer the module's
// parameters are views of, or at stage 3 only this rank's shard), the
// gradients (the flat buffer, the reduced shard, its host copy with offload)
// and the optimizer state of the owned range (fp32 master weights, Adam
// moments), each allocated once at its exact size, on the device or in
// (pinned) host memory as the plan says. The parameters are drawn where they
// live: a model built with deferred parameters has no values, and each
// parameter's initial value is drawn straight into the buffer or shard that
// holds it (no whole copy of the model exists anywhere).
//
//   ZeroState state(model, cfg, layout, device);
//   Bucket& k = state.buckets[1];      // block 0
//   k.owned_params()                   // the owned range of its parameters
//   state.plan()                        // bytes by kind and place
//
// Also what the engine reports about them: the memory plan and byte counts.
#pragma once

#include <torch/torch.h>

#include <c10/core/Event.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainer/config/settings.h"
#include "trainer/model/gpt2_model.h"
#include "trainer/zero/layout.h"

namespace zlm::trainer {

struct ZeroConfig {
  ZeroPlan plan;  // what is sharded and offloaded (trainer/config/settings.h)
  // Reduce gradients from autograd hooks during the last backward (unsharded
  // gradients). Off: after the whole step's backward passes (pipeline
  // schedules, whose backward passes of micro-batches and chunks interleave).
  bool overlap = true;
  // Parameters that get a bucket of their own (the tied embedding with
  // pipeline parallelism: the same shard on the first and the last stage).
  std::vector<std::string> own_buckets;
  // Whether a parameter's gradient counts in the norm on this rank (all when unset).
  std::function<bool(const std::string&)> in_norm;
  // Parameters whose gradients are partial sums over another group (the TP
  // ranks, sequence parallelism: Gpt2Impl::tp_partial_grad), and its
  // communicator: a bucket's such gradients are summed over it in one
  // all-reduce before the bucket's reduction over the data-parallel group (so
  // once per step with unsharded gradients, once per micro-batch with sharded ones).
  std::function<bool(const std::string&)> tp_partial;
  Comm* tp_partial_comm = nullptr;
  // The parameters' dtype on the device (kFloat, kBFloat16, kHalf), and the
  // dtype gradients accumulate in over micro-batches and are reduced in
  // (Megatron: fp32 with --accumulate-allreduce-grads-in-fp32, which --bf16
  // implies; DeepSpeed: communication_data_type, default the parameters').
  torch::ScalarType param_dtype = torch::kFloat, grad_dtype = torch::kFloat;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  int64_t align = 64;                    // elements; shards start on 256-byte boundaries
  int64_t offload_chunk = 16 * 1048576;  // elements per CPU AdamW chunk
  // Megatron's gradient-accumulation fusion: with main gradients (below), the
  // model's linear layers add their gradients into them in backward
  // (trainer/model/fused_linear.h) instead of the hook.
  bool fuse_wgrad = false;
  bool delayed() const { return plan.delayed_update_after >= 0; }
};

// Bytes per rank, by kind and place (what rank 0 prints at start).
// Every figure counts the tensors the engine allocated (padding included);
// params_device and grads_device also count the largest buffers that exist
// only during a step (params_gathered: stage 3's gathered buckets;
// grads_staging: the flat gradients of sharded-gradient stages on their way to the shards).
struct MemoryPlan {
  int64_t params_device = 0, params_host = 0, grads_device = 0, grads_host = 0, optim_device = 0, optim_host = 0;
  int64_t params_gathered = 0, grads_staging = 0;
  int64_t optimizer_state_bytes() const { return optim_device + optim_host; }
};

// One bucket's tensors on this rank, beside its layout.
struct Bucket : BucketLayout {
  std::vector<torch::Tensor> params;  // each slot's module parameter (its data is swapped, never the object)
  bool sharded_params = false;        // stage 3: parameters exist only as shards
  torch::Tensor flat_param;           // full parameters (unless sharded_params)
  torch::Tensor param_shard;          // sharded_params: this rank's parameters (device, or host with parameter offload)
  torch::Tensor flat_grad;            // unsharded gradients: the buffer param.grad views point into
  torch::Tensor grad_shard;           // reduced gradient of the owned range (unsharded: a view of flat_grad, reduced in place)
  torch::Tensor host_grad;            // offload of unsharded gradients (and delayed updates): host copy of grad_shard
  bool shard_in_flat = false;         // grad_shard is (a view into) flat_grad
  // Offload of unsharded gradients: grad_shard goes to host_grad as soon as
  // its reduction is done (not for a bucket of its own, which the caller
  // changes after reduce_grads, nor with delayed updates, whose step reads
  // host_grad in the background); d2h_done marks the end of the copy.
  bool early_d2h = false;
  std::optional<c10::Event> d2h_done;
  torch::Tensor host_param;  // offload with CUDA, 16-bit parameters on the device: the cast chunk on its way up
  torch::Tensor master, exp_avg, exp_avg_sq;  // owned range, fp32, on the optimizer's device
  bool master_is_param = false;

  // The owned range of the parameters: the shard, or its part of the flat buffer.
  torch::Tensor owned_params() const { return sharded_params ? param_shard : flat_param.narrow(0, own_begin, own_len); }
  torch::Tensor view(const torch::Tensor& flat, size_t slot) const {
    return flat.narrow(0, slots[slot].offset, slots[slot].numel).view(slots[slot].shape);
  }
};

class ZeroState {
 public:
  // Allocates every bucket's tensors and fills the parameters (drawn when the
  // model's are deferred). Costs the plan's bytes; the largest transient is
  // one parameter's fp32 value.
  ZeroState(Gpt2& model, const ZeroConfig& cfg, const ZeroLayout& layout, const torch::Device& device);
  ~ZeroState();
  ZeroState(const ZeroState&) = delete;
  ZeroState& operator=(const ZeroState&) = delete;

  std::vector<Bucket> buckets;
  const ZeroConfig& cfg;
  const ZeroLayout& layout;
  torch::Device device, opt_device;  // the training device; where the optimizer runs (CPU with offload)
  bool pin = false;                  // host buffers pinned (offload with CUDA)
  // Unsharded gradients of another dtype than the parameters: param.grad
  // cannot be a view of the bucket; a hook adds it in (Megatron's main_grad).
  bool main_grad = false;
  // With ZeroConfig::fuse_wgrad and main gradients: the model's registry of
  // them, whose parameters' hooks add nothing the backward already added.
  MainGrads* fused = nullptr;
  // Whether reduce_grads leaves the loss-scale and averaging factor to the
  // norm and the step (applied in fp32): for 16-bit gradients, and for those
  // that go to the host as soon as they are reduced.
  bool defer_mult = false;

  // Bytes: the plan (landing: the pinned staging buffer of the reduction,
  // params_gathered as the gatherer holds at most), what the tensors hold.
  MemoryPlan plan(int64_t params_gathered, int64_t landing_bytes) const;
  int64_t optimizer_state_bytes() const;
  int64_t resident_parameter_bytes() const;
  int64_t optimizer_state_bytes_full(bool padded) const;

 private:
  void make_parameters(Bucket& k, Gpt2& model);
  void make_gradients(Bucket& k, bool own_bucket);
  void make_optimizer_state(Bucket& k);
};

}  // namespace zlm::trainer
