#include "trainer/zero/optimizer.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <optional>

#include "common/core/error.h"
#include "trainer/zero/cpu_adamw.h"

namespace zlm::trainer {

ShardOptimizer::ShardOptimizer(ZeroState& state, Comm& comm, const CopyStream& d2h) : state_(state), comm_(comm), d2h_(d2h) {}

ShardOptimizer::~ShardOptimizer() {
  if (pending_.valid()) pending_.wait();
  CopyStream::wait(up_done_);
}

namespace {

std::atomic<bool> g_device_path_on_cpu{false};  // ShardOptimizer::set_device_path_on_cpu

CpuAdamW::Type cpu_type(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat: return CpuAdamW::kF32;
    case torch::kBFloat16: return CpuAdamW::kBF16;
    case torch::kHalf: return CpuAdamW::kF16;
    default: return CpuAdamW::kNone;
  }
}

bool on_cpu_contiguous(const torch::Tensor& t) { return t.device().is_cpu() && t.is_contiguous(); }

// cpu_adamw over the intra-op threads, split at multiples of CpuAdamW::kAlign
// (the same arithmetic for every element whatever the thread count).
void parallel_cpu_adamw(const CpuAdamW::Settings& s, torch::Tensor master, torch::Tensor m, torch::Tensor v, const torch::Tensor& grad,
                        torch::Tensor copy16) {
  const int64_t n = master.numel(), units = (n + CpuAdamW::kAlign - 1) / CpuAdamW::kAlign;
  float *p = master.data_ptr<float>(), *mp = m.data_ptr<float>(), *vp = v.data_ptr<float>();
  auto* g = static_cast<char*>(grad.data_ptr());
  auto* o = copy16.defined() ? static_cast<char*>(copy16.data_ptr()) : nullptr;
  const CpuAdamW::Type gt = cpu_type(grad), ot = copy16.defined() ? cpu_type(copy16) : CpuAdamW::kNone;
  const int64_t gb = grad.element_size(), ob = copy16.defined() ? copy16.element_size() : 0;
  at::parallel_for(0, units, /*grain_size=*/(int64_t{1} << 16) / CpuAdamW::kAlign, [&](int64_t u0, int64_t u1) {
    const int64_t a = u0 * CpuAdamW::kAlign, len = std::min(n, u1 * CpuAdamW::kAlign) - a;
    cpu_adamw(s, len, p + a, mp + a, vp + a, {g + a * gb, gt}, {o ? o + a * ob : nullptr, ot});
  });
}

}  // namespace

// AdamW over one bucket's owned range with `grad` (multiplied by mult, in
// fp32, first), split at decay_end (weights decayed, the rest not) and cut
// before the padding; CPU offload steps it in chunks. With `publish` each
// updated chunk goes to the parameters at once (cast on the host and copied
// up asynchronously while the next chunk is computed); without (a delayed
// update) only into the 16-bit staging buffer, and publish() copies it.
// On the CPU one fused pass per chunk (cpu_adamw.h: the multiply, AdamW and
// the 16-bit copy); on a device, ATen's fused AdamW.
void ShardOptimizer::adamw(Bucket& k, const torch::Tensor& grad, double mult, const StepScale* dev, double lr, const torch::Tensor& steps,
                           bool publish) {
  torch::NoGradGuard no_grad;
  const ZeroConfig& cfg = state_.cfg;
  torch::Tensor own = k.owned_params();
  const bool scale = grad.scalar_type() != torch::kFloat || mult != 1.0;
  const bool fused_cpu = !dev && !g_device_path_on_cpu && cpu_adamw_vectorized() && on_cpu_contiguous(k.master) &&
                         on_cpu_contiguous(grad) && cpu_type(grad) != CpuAdamW::kNone;
  const std::optional<torch::Tensor> found_inf = dev ? std::optional<torch::Tensor>(dev->found_inf) : std::nullopt;
  // Where the fused pass writes the parameters' copy: the host staging buffer, or the parameters themselves when they are on the CPU.
  const torch::Tensor copy_to = k.master_is_param ? torch::Tensor()
                                : k.host_param.defined() ? k.host_param
                                : publish && on_cpu_contiguous(own) && cpu_type(own) != CpuAdamW::kNone ? own
                                : torch::Tensor();
  const int64_t lo = k.own_begin, hi = std::min(k.own_begin + k.own_len, k.numel);
  const int64_t pieces[3] = {lo, std::clamp(k.decay_end, lo, std::max(lo, hi)), std::max(lo, hi)};
  for (int p = 0; p < 2; ++p) {
    const double wd = p == 0 ? cfg.weight_decay : 0.0;
    const int64_t chunk = cfg.plan.offload_optimizer ? cfg.offload_chunk : INT64_MAX;
    for (int64_t a = pieces[p], n = 0; a < pieces[p + 1]; a += n) {
      n = std::min(chunk, pieces[p + 1] - a);
      const int64_t off = a - k.own_begin;
      torch::Tensor g = grad.narrow(0, off, n);
      if (fused_cpu) {
        const CpuAdamW::Settings s{.lr = lr, .beta1 = cfg.beta1, .beta2 = cfg.beta2, .eps = cfg.eps, .weight_decay = wd, .step = step_,
                                   .grad_scale = static_cast<float>(mult)};
        parallel_cpu_adamw(s, k.master.narrow(0, off, n), k.exp_avg.narrow(0, off, n), k.exp_avg_sq.narrow(0, off, n), g,
                           copy_to.defined() ? copy_to.narrow(0, off, n) : torch::Tensor());
      } else {
        // Unscaled and clipped in fp32, one pass per chunk (by the device's factor: always, x 1 being exact).
        if (dev) g = g.to(torch::kFloat).mul_(dev->mult);
        else if (scale) g = g.to(torch::kFloat).mul_(mult);
        at::_fused_adamw_({k.master.narrow(0, off, n)}, {g}, {k.exp_avg.narrow(0, off, n)}, {k.exp_avg_sq.narrow(0, off, n)}, {}, {steps}, lr,
                          cfg.beta1, cfg.beta2, wd, cfg.eps, false, false, /*grad_scale=*/std::nullopt, found_inf);
        if (copy_to.defined()) copy_to.narrow(0, off, n).copy_(k.master.narrow(0, off, n));
      }
      if (k.master_is_param) continue;
      if (k.host_param.defined()) {  // 16 bits up
        if (publish) own.narrow(0, off, n).copy_(k.host_param.narrow(0, off, n), /*non_blocking=*/true);
      } else if (publish && !copy_to.defined()) {
        own.narrow(0, off, n).copy_(k.master.narrow(0, off, n), /*non_blocking=*/state_.pin);
      }
    }
  }
}

// The updated parameters of the owned ranges to where they are used (from
// the 16-bit staging buffers or the master weights), then all-gathered.
void ShardOptimizer::publish(bool copy) {
  torch::NoGradGuard no_grad;
  if (copy)
    for (auto& k : state_.buckets)
      if (!k.master_is_param) k.owned_params().copy_(k.host_param.defined() ? k.host_param : k.master, /*non_blocking=*/state_.pin);
  if (state_.cfg.plan.shard_optimizer && comm_.world() > 1)  // one rank owns everything already
    for (auto& k : state_.buckets)
      if (!k.sharded_params && k.padded > 0) comm_.all_gather(k.flat_param, k.flat_param.narrow(0, k.own_begin, k.own_len).clone());
}

void ShardOptimizer::set_device_path_on_cpu(bool on) { g_device_path_on_cpu = on; }

bool ShardOptimizer::reads_on_device() const { return !state_.opt_device.is_cpu() || g_device_path_on_cpu; }

void ShardOptimizer::step(double lr, double mult) { run_step(lr, mult, nullptr); }

void ShardOptimizer::step(double lr, const StepScale& s) {
  if (!reads_on_device()) {  // AdamW on the host reads the factor anyway; a skipped step is not counted
    if (s.found_inf.item<float>() != 0) return;
    run_step(lr, static_cast<double>(s.mult.item<float>()), nullptr);
    return;
  }
  run_step(lr, 1.0, &s);
  unconfirmed_ = true;
}

void ShardOptimizer::confirm(bool taken) {
  if (unconfirmed_ && !taken) --step_;  // the device skipped it (found_inf): AdamW's count goes back
  unconfirmed_ = false;
}

void ShardOptimizer::run_step(double lr, double mult, const StepScale* dev) {
  torch::NoGradGuard no_grad;
  sync();
  ++step_;
  auto steps = torch::full({}, static_cast<float>(step_), torch::TensorOptions().dtype(torch::kFloat).device(state_.opt_device));
  CopyStream::wait(up_done_);  // last step's copies up are done before the master weights change
  if (state_.cfg.delayed() && step_ > state_.cfg.plan.delayed_update_after) {  // offload: never `dev`
    // This step's gradients, unscaled and clipped, into fp32 buffers of their
    // own; AdamW runs in the background until the next step() or sync().
    for (auto& k : state_.buckets) {
      k.host_grad.copy_(k.grad_shard);
      if (mult != 1.0) k.host_grad.mul_(mult);
    }
    pending_ = std::async(std::launch::async, [this, lr, steps] {
      for (auto& k : state_.buckets) adamw(k, k.host_grad, 1.0, nullptr, lr, steps, /*publish=*/false);
    });
    return;
  }
  // Offload of unsharded gradients: the reduced gradients are on their way to
  // host memory since their reduction (those of a bucket of its own go now);
  // each bucket's AdamW waits for its own copy only, then runs chunk by chunk
  // on the CPU. The gradients are multiplied per chunk (in place when fp32).
  for (auto& k : state_.buckets)
    if (k.host_grad.defined() && !k.early_d2h) d2h_.copy(k.host_grad, k.grad_shard, k.d2h_done);
  for (auto& k : state_.buckets) {
    CopyStream::wait(k.d2h_done);
    adamw(k, k.host_grad.defined() ? k.host_grad : k.grad_shard, mult, dev, lr, steps, /*publish=*/true);
  }
  // The master weights and staging buffers are not written again before the
  // next step waits for up_done, so the asynchronous copies up may still run.
  if (state_.pin) d2h_.mark(up_done_);
  publish(/*copy=*/false);
}

void ShardOptimizer::sync() {
  if (!pending_.valid()) return;
  pending_.get();  // an error of the background step is raised here
  publish(/*copy=*/true);
  if (state_.pin) {  // the next update writes what the copies read
    d2h_.mark(up_done_);
    CopyStream::wait(up_done_);
  }
}

double ShardOptimizer::sum_counted(const std::function<torch::Tensor(const Bucket&)>& of,
                                   const std::function<torch::Tensor(const torch::Tensor&)>& f, bool zero_padding_neutral) {
  return sum_counted_tensor(of, f, zero_padding_neutral).item<double>();
}

torch::Tensor ShardOptimizer::sum_counted_tensor(const std::function<torch::Tensor(const Bucket&)>& of,
                                                 const std::function<torch::Tensor(const torch::Tensor&)>& f, bool zero_padding_neutral) {
  torch::NoGradGuard no_grad;
  auto sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kDouble).device(state_.device));
  for (const auto& k : state_.buckets) {
    const torch::Tensor t = of(k);
    if (zero_padding_neutral && k.all_in_norm()) {
      sum += f(t).to(torch::kDouble).to(state_.device);
      continue;
    }
    for (const auto& s : k.slots) {  // the part of each counted parameter in the owned range
      const auto [lo, hi] = k.owned_part(s);
      if (s.in_norm && hi > lo) sum += f(t.narrow(0, lo - k.own_begin, hi - lo)).to(torch::kDouble).to(state_.device);
    }
  }
  if (state_.cfg.plan.shard_optimizer) comm_.all_reduce_sum(sum);  // replicated: every rank already holds everything
  return sum;
}

ZeroFullState ShardOptimizer::gather_state() {
  sync();
  torch::NoGradGuard no_grad;
  ZeroFullState s;
  s.step = step_;
  auto full_of = [&](const Bucket& k, const torch::Tensor& own) {
    if (!state_.cfg.plan.shard_optimizer || k.padded == 0) return own.to(torch::kCPU);
    auto full = torch::empty({k.padded}, torch::TensorOptions().dtype(torch::kFloat).device(state_.device));
    comm_.all_gather(full, own.to(state_.device).contiguous());
    return full.to(torch::kCPU);
  };
  for (const auto& k : state_.buckets) {
    torch::Tensor p = full_of(k, k.master), m = full_of(k, k.exp_avg), v = full_of(k, k.exp_avg_sq);
    if (comm_.rank() != 0) continue;
    for (size_t i = 0; i < k.slots.size(); ++i) {
      const std::string& name = k.slots[i].name;
      s.params[name] = k.view(p, i).clone();
      s.exp_avg[name] = k.view(m, i).clone();
      s.exp_avg_sq[name] = k.view(v, i).clone();
    }
  }
  return s;
}

void ShardOptimizer::load_state(const ZeroFullState& s) {
  sync();
  torch::NoGradGuard no_grad;
  step_ = s.step;
  auto flat_of = [](const Bucket& k, const std::map<std::string, torch::Tensor>& m, const char* what) {
    auto full = torch::zeros({k.padded}, torch::kFloat);
    for (const auto& sl : k.slots) {
      auto it = m.find(sl.name);
      if (it == m.end()) throw Error(ErrorKind::Format, "checkpoint has no %s for parameter %s", what, sl.name.c_str());
      if (it->second.numel() != sl.numel)
        throw Error(ErrorKind::Format, "checkpoint %s of %s has %ld elements, the model %ld", what, sl.name.c_str(),
                    (long)it->second.numel(), (long)sl.numel);
      full.narrow(0, sl.offset, sl.numel).copy_(it->second.reshape({-1}));
    }
    return full;
  };
  for (auto& k : state_.buckets) {
    auto p = flat_of(k, s.params, "weights");
    auto own = [&](const torch::Tensor& full) { return full.narrow(0, k.own_begin, k.own_len); };
    if (k.sharded_params) k.param_shard.copy_(own(p));
    else k.flat_param.copy_(p);
    if (!k.master_is_param) k.master.copy_(own(p));
    k.exp_avg.copy_(own(flat_of(k, s.exp_avg, "exp_avg")));
    k.exp_avg_sq.copy_(own(flat_of(k, s.exp_avg_sq, "exp_avg_sq")));
  }
}

}  // namespace zlm::trainer
