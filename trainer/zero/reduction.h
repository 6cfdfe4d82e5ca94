// The ZeRO engine's gradient reduction over the data-parallel group.
//
// Unsharded gradients (stages 0, 1) accumulate over micro-batches in the
// buckets' flat buffers and are all-reduced (stage 0) or reduce-scattered in
// place (stage 1) per bucket during the last micro-batch's backward: an
// autograd post-hook on each parameter counts the bucket's ready gradients,
// and a full bucket's reduction is launched in the layout's fixed order on all
// ranks. Sharded gradients (stages 2, 3) are reduce-scattered into the rank's
// shard on every micro-batch, as soon as backward has produced a bucket's
// (stage 3: by the gatherer's autograd functions). One reduction is in flight
// while backward computes the next bucket (DeepSpeed's overlap_comm, DDP's
// bucketing); they complete in launch order, so the sums are those of blocking
// reductions. With offload, reduced gradients go to host memory on the copy
// stream as soon as they are reduced (unsharded: into the bucket's host copy;
// sharded: through one pinned staging buffer, added to the host shard when the
// next bucket's reduction completes).
//
//   GradientReducer r(state, comm, d2h);   // installs the hooks
//   r.begin_step(micro_batches); ... backward ...; r.after_backward(chunk); ...
//   r.reduce_grads(mult);                   // then state's grad_shard hold the reduced gradients
//
// Not copyable; the hooks reach it by pointer, so it must outlive the model's backward passes.
#pragma once

#include <torch/torch.h>

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "trainer/parallel/comm.h"
#include "trainer/zero/host_memory.h"
#include "trainer/zero/state.h"

namespace zlm::trainer {

class GradientReducer {
 public:
  GradientReducer(ZeroState& state, Comm& comm, const CopyStream& d2h);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void begin_step(int64_t micro_batches);
  // A backward pass of `chunk` is done: the buckets that got no gradient are
  // reduced too (in order), and the micro-batch is counted.
  void after_backward(size_t chunk);
  // Completes every reduction; the gradients' factor (loss scale, averaging)
  // is applied now, or recorded for the norm and the step (ZeroState::defer_mult).
  void reduce_grads(double grad_mult);
  double grad_mult() const { return grad_mult_; }
  // One gradient per slot of bucket k (undefined: none), or the bucket's flat
  // gradient, reduce-scattered and added to the rank's shard (sharded gradients).
  void reduce_into_shard(Bucket& k, const std::vector<torch::Tensor>& grads);
  void reduce_flat_into_shard(Bucket& k, const torch::Tensor& full);
  // The pinned staging buffer's bytes (the memory plan).
  int64_t landing_bytes() const { return tensor_bytes(landing_buf_); }

 private:
  struct Reducing {
    Bucket* k;
    torch::Tensor full, part;  // part undefined: reduced in place (unsharded gradients)
    std::unique_ptr<Comm::Pending> op;
  };
  struct Landing {  // a reduced part on its way to the host shard
    Bucket* k;
    torch::Tensor part, host;
    std::optional<c10::Event> done;
  };
  void install_hooks();
  void add_to_main_grad(Bucket& k, size_t slot);
  bool reduce_this_micro_batch() const;
  void param_ready(size_t b);
  void launch_ready(size_t chunk);  // holds mu_
  void reduce_hooked(Bucket& k);
  void sum_partials(const Bucket& k, const torch::Tensor& flat);
  torch::Tensor flat_grad(const Bucket& k, const std::vector<torch::Tensor>& grads) const;
  // Completes the reductions in flight; with land = false a part on its way to
  // a host shard may stay so (the host waits for it only when the next is ready).
  void finish_reduces(bool land = true);
  void finish_landing();

  ZeroState& state_;
  Comm& comm_;
  const CopyStream& d2h_;
  std::vector<size_t> ready_;           // per bucket: parameters whose gradient is done this micro-batch
  std::vector<bool> reduced_;           // per bucket (unsharded): this step's reduction is launched
  std::vector<size_t> next_launch_;     // per chunk: how many of its launch order are launched
  int64_t micro_total_ = 1, micro_done_ = 0;
  double grad_mult_ = 1.0;
  std::deque<Reducing> reducing_;
  std::optional<Landing> landing_;
  torch::Tensor landing_buf_;           // pinned, CUDA only
  std::mutex mu_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the hooked nodes alive
};

}  // namespace zlm::trainer
