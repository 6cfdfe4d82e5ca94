#include "trainer/zero/state.h"

#include <algorithm>

#include "common/core/error.h"
#include "trainer/zero/host_memory.h"

namespace zlm::trainer {

ZeroState::ZeroState(Gpt2& model, const ZeroConfig& c, const ZeroLayout& lay, const torch::Device& d)
    : cfg(c), layout(lay), device(d), opt_device(c.plan.offload_optimizer ? torch::Device(torch::kCPU) : d) {
  const ZeroPlan& plan = cfg.plan;
  if (cfg.delayed() && !plan.offload_optimizer)  // the settings refuse it (trainer/config/settings.h); a caller that did not check
    throw Error(ErrorKind::Internal, "ZeroConfig: a delayed update needs the optimizer's offload (it overlaps the CPU step with the device's work)");
  pin = plan.offload_optimizer && d.is_cuda();
  main_grad = !plan.shard_gradients && cfg.grad_dtype != cfg.param_dtype;
  defer_mult = cfg.grad_dtype != torch::kFloat || (plan.offload_optimizer && !plan.shard_gradients && !cfg.delayed());
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& item : model->named_parameters()) by_name[item.key()] = item.value();
  const size_t first_own = lay.buckets.size() - cfg.own_buckets.size();
  buckets.reserve(lay.buckets.size());
  for (size_t b = 0; b < lay.buckets.size(); ++b) {
    Bucket& k = buckets.emplace_back();
    static_cast<BucketLayout&>(k) = lay.buckets[b];
    for (const auto& s : k.slots) k.params.push_back(by_name.at(s.name));
    make_parameters(k, model);
    make_gradients(k, b >= first_own);
    make_optimizer_state(k);
  }
  if (main_grad && cfg.fuse_wgrad) {
    fused = &model->main_grads();
    fused->claim(this);
    for (Bucket& k : buckets)
      for (size_t i = 0; i < k.slots.size(); ++i) fused->set(k.params[i], k.view(k.flat_grad, i));
  }
}

ZeroState::~ZeroState() {
  if (fused) fused->release(this);  // the buffers go with the state; the model falls back to at::linear
}

// Parameters: one flat buffer, or at stage 3 only this rank's shard of it,
// filled parameter by parameter: from the module's values, or drawn on the
// device (a model with deferred parameters has no values: no whole copy of it
// exists anywhere, the largest transient is one tensor).
void ZeroState::make_parameters(Bucket& k, Gpt2& model) {
  torch::NoGradGuard no_grad;
  k.sharded_params = cfg.plan.shard_parameters;
  auto fill = [&](torch::Tensor dst, int64_t begin) {  // dst: the bucket's elements [begin, begin + dst.numel())
    for (size_t i = 0; i < k.slots.size(); ++i) {
      const SlotLayout& s = k.slots[i];
      const int64_t lo = std::max(s.offset, begin), hi = std::min(s.offset + s.numel, begin + dst.numel());
      if (hi <= lo) continue;
      const torch::Tensor v = model->deferred() ? model->initial_value(s.name, device) : k.params[i].detach();
      dst.narrow(0, lo - begin, hi - lo).copy_(v.reshape({-1}).narrow(0, lo - s.offset, hi - lo));
    }
  };
  if (k.sharded_params) {
    auto where = cfg.plan.offload_parameters ? torch::Device(torch::kCPU) : device;
    k.param_shard = zeros_on(k.own_len, where, cfg.plan.offload_parameters && device.is_cuda(), cfg.param_dtype);
    fill(k.param_shard, k.own_begin);
    for (auto& p : k.params) p.set_data(torch::empty({0}, torch::TensorOptions().dtype(p.scalar_type()).device(device)));
  } else {
    k.flat_param = zeros_on(k.padded, device, false, cfg.param_dtype);
    fill(k.flat_param, 0);
    for (size_t i = 0; i < k.slots.size(); ++i) k.params[i].set_data(k.view(k.flat_param, i));
  }
}

void ZeroState::make_gradients(Bucket& k, bool own_bucket) {
  const ZeroPlan& plan = cfg.plan;
  if (!plan.shard_gradients) {
    k.flat_grad = zeros_on(k.padded, device, false, cfg.grad_dtype);
    if (!main_grad)
      for (size_t i = 0; i < k.slots.size(); ++i) k.params[i].mutable_grad() = k.view(k.flat_grad, i);
    // A sharded optimizer reduce-scatters in place: the owned range of the
    // full buffer (NCCL's in-place case, output = input + rank * shard) is the shard.
    k.grad_shard = k.flat_grad.narrow(0, k.own_begin, k.own_len);
    k.shard_in_flat = true;
  } else {
    // Sharded gradients with offload go straight to host memory, so the device
    // never holds a gradient shard (DeepSpeed does the same).
    k.grad_shard = zeros_on(k.own_len, opt_device, pin, cfg.grad_dtype);
  }
  // Delayed updates read fp32 gradients of their own while the next step's
  // accumulate. Otherwise unsharded gradients with offload go to the host (also
  // on a CPU run, so that tests run that path) as soon as they are reduced.
  if (cfg.delayed()) {
    k.host_grad = zeros_on(k.own_len, opt_device, pin);
  } else if (plan.offload_optimizer && !plan.shard_gradients) {
    k.host_grad = zeros_on(k.own_len, opt_device, pin, cfg.grad_dtype);
    k.early_d2h = !own_bucket;
  }
}

// Optimizer state of the owned range: master weights, Adam moments. With
// offload the master weights are a separate host copy (copied back after each
// step), also when training on CPU, so CPU tests run that path; only fp32
// stage-3 shards already in host memory serve as their own master. 16-bit
// parameters always have an fp32 master copy, which starts from the rounded
// parameters (as Megatron's and DeepSpeed's do). (Not with delayed updates: the
// forward reads the parameters while the background step writes the master weights.)
void ZeroState::make_optimizer_state(Bucket& k) {
  torch::NoGradGuard no_grad;
  const torch::Tensor own = k.owned_params();
  const bool host_shard = k.sharded_params && cfg.plan.offload_parameters;
  if (own.device() == opt_device && own.scalar_type() == torch::kFloat && (!cfg.plan.offload_optimizer || host_shard) && !cfg.delayed()) {
    k.master = own;
    k.master_is_param = true;
  } else {
    k.master = zeros_on(k.own_len, opt_device, pin);
    k.master.copy_(own);
    if (pin && own.is_cuda() && own.scalar_type() != torch::kFloat) k.host_param = zeros_on(k.own_len, opt_device, pin, cfg.param_dtype);
  }
  k.exp_avg = zeros_on(k.own_len, opt_device, pin);
  k.exp_avg_sq = zeros_on(k.own_len, opt_device, pin);
}

MemoryPlan ZeroState::plan(int64_t params_gathered, int64_t landing_bytes) const {
  const ZeroPlan& zp = cfg.plan;
  MemoryPlan p;
  int64_t max_staging = 0, max_part = 0;
  const auto grad_size = static_cast<int64_t>(c10::elementSize(cfg.grad_dtype));
  for (const auto& k : buckets) {
    p.params_device += tensor_bytes(k.flat_param);
    (zp.offload_parameters ? p.params_host : p.params_device) += tensor_bytes(k.param_shard);
    p.params_host += tensor_bytes(k.host_param);
    if (zp.shard_gradients) max_staging = std::max(max_staging, k.padded * grad_size);
    max_part = std::max(max_part, k.own_len * grad_size);
    const int64_t shard = k.shard_in_flat ? 0 : tensor_bytes(k.grad_shard);
    const bool shard_on_host = zp.offload_optimizer && zp.shard_gradients;  // by role: on CPU-only runs both places are the CPU
    p.grads_device += tensor_bytes(k.flat_grad) + (shard_on_host ? 0 : shard);
    p.grads_host += tensor_bytes(k.host_grad) + (shard_on_host ? shard : 0);
    const int64_t optim = tensor_bytes(k.exp_avg) + tensor_bytes(k.exp_avg_sq) + (k.master_is_param ? 0 : tensor_bytes(k.master));
    (zp.offload_optimizer ? p.optim_host : p.optim_device) += optim;
  }
  p.params_gathered = params_gathered;
  p.params_device += params_gathered;
  // Two buckets of full gradients at a time (one being reduce-scattered, the
  // next being built); at stage 3 the gradients of the embeddings' and the
  // head's buckets are also held from the head's backward to the embeddings'.
  p.grads_staging = 2 * max_staging;
  // With offload of sharded gradients a reduced part waits on the device for
  // its copy to the host (in a pinned buffer of that size, with CUDA).
  if (zp.offload_optimizer && zp.shard_gradients) p.grads_staging += max_part;
  p.grads_host += landing_bytes;
  if (zp.shard_parameters) p.grads_staging += layout.outer_padded() * static_cast<int64_t>(c10::elementSize(cfg.param_dtype));
  p.grads_device += p.grads_staging;
  return p;
}

int64_t ZeroState::optimizer_state_bytes() const {
  int64_t n = 0;
  for (const auto& k : buckets) n += tensor_bytes(k.exp_avg) + tensor_bytes(k.exp_avg_sq) + (k.master_is_param ? 0 : tensor_bytes(k.master));
  return n;
}

int64_t ZeroState::resident_parameter_bytes() const {
  int64_t n = 0;
  for (const auto& k : buckets) {
    n += tensor_bytes(k.flat_param) + tensor_bytes(k.param_shard);
    if (k.sharded_params)
      for (const auto& p : k.params) n += tensor_bytes(p);  // empty between uses (else views of flat_param)
  }
  return n;
}

int64_t ZeroState::optimizer_state_bytes_full(bool padded) const {
  int64_t n = 0;
  for (const auto& k : buckets) n += (padded ? k.padded : k.numel) * (k.master_is_param ? 8 : 12);
  return n;
}

}  // namespace zlm::trainer
