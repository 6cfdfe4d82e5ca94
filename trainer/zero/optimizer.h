// The ZeRO engine's optimizer: AdamW on this rank's owned range of every
// bucket (LibTorch's fused kernel; on the CPU in chunks with offload), the
// updated parameters published to where they are used (cast to the
// parameters' dtype and copied up with offload, then all-gathered with a
// sharded optimizer), the delayed parameter update, the norms over the owned
// ranges, and the full per-parameter state for checkpoints.
//
// Delayed update (the ZeRO-Offload paper's DPU, with offload, after
// ZeroConfig::plan.delayed_update_after synchronous steps): step i copies its
// gradients (unscaled, clipped, fp32) to host buffers of their own and runs
// the CPU AdamW in a background thread while the forward and backward of step
// i + 1 run on the parameters of before step i; step i + 1 (or sync()) waits
// for it and publishes its parameters before launching its own. So every
// gradient is one update stale.
//
//   ShardOptimizer opt(state, comm, d2h);
//   opt.step(lr, grad_mult * clip);    // after the reducer's reduce_grads
//   opt.sync();                         // before reading the master weights
#pragma once

#include <torch/torch.h>

#include <functional>
#include <future>
#include <map>
#include <optional>
#include <string>

#include "trainer/parallel/comm.h"
#include "trainer/zero/host_memory.h"
#include "trainer/zero/state.h"

namespace zlm::trainer {

// A checkpoint's optimizer state: full tensors by parameter name.
struct ZeroFullState {
  std::map<std::string, torch::Tensor> params, exp_avg, exp_avg_sq;
  int64_t step = 0;
};

// One step's gradient factor and skip flag as 0-dim fp32 tensors on the
// optimizer's device, so that queuing the step waits for nothing on the host:
// AdamW reads them there, and a flag of 1 leaves every state as it was.
struct StepScale {
  torch::Tensor mult, found_inf;
};

class ShardOptimizer {
 public:
  ShardOptimizer(ZeroState& state, Comm& comm, const CopyStream& d2h);
  ~ShardOptimizer();  // waits for a delayed update and the copies up
  ShardOptimizer(const ShardOptimizer&) = delete;
  ShardOptimizer& operator=(const ShardOptimizer&) = delete;

  // One AdamW step with the gradients multiplied by `mult` (in fp32) first.
  void step(double lr, double mult);
  // The same with the factor and flag on the device. Where AdamW runs on the
  // host (offload, training on the CPU) they are read first and a set flag
  // skips the step. On a device the step is counted before the flag is known:
  // confirm(false) takes the count back once the caller has read it.
  void step(double lr, const StepScale& s);
  void confirm(bool taken);
  // Tests: ATen's fused AdamW and the device's way of reading StepScale on the
  // CPU too (instead of the vectorised CPU AdamW and host reads).
  static void set_device_path_on_cpu(bool on);
  // Completes a delayed update in flight and publishes its parameters
  // (collective with a sharded optimizer and unsharded parameters; nothing to do without one).
  void sync();
  int64_t steps() const { return step_; }

  // A sum over the parts of the counted parameters (ZeroConfig::in_norm) in the
  // owned range of `of(bucket)`, over the data-parallel group (collective with a
  // sharded optimizer). With zero_padding_neutral (f of zeros is zero) a bucket
  // whose parameters all count is summed whole, padding included.
  double sum_counted(const std::function<torch::Tensor(const Bucket&)>& of, const std::function<torch::Tensor(const torch::Tensor&)>& f,
                     bool zero_padding_neutral);
  // The same sum as a (1)-element double tensor on the device, not read.
  torch::Tensor sum_counted_tensor(const std::function<torch::Tensor(const Bucket&)>& of,
                                   const std::function<torch::Tensor(const torch::Tensor&)>& f, bool zero_padding_neutral);

  // Full tensors by parameter name on rank 0 (others get empty maps), and back (every rank).
  ZeroFullState gather_state();
  void load_state(const ZeroFullState& s);

 private:
  // dev: the factor and flag on the device (mult is then unused).
  void adamw(Bucket& k, const torch::Tensor& grad, double mult, const StepScale* dev, double lr, const torch::Tensor& steps,
             bool publish);
  void run_step(double lr, double mult, const StepScale* dev);
  bool reads_on_device() const;
  void publish(bool copy);

  ZeroState& state_;
  Comm& comm_;
  const CopyStream& d2h_;
  int64_t step_ = 0;
  bool unconfirmed_ = false;              // step_ counts a device step whose flag is not read yet
  std::future<void> pending_;             // a delayed update in flight
  std::optional<c10::Event> up_done_;     // offload: the last step's parameter copies up (queued on the compute stream)
};

}  // namespace zlm::trainer
