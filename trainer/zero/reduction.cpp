#include "trainer/zero/reduction.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "common/core/error.h"

namespace zlm::trainer {

GradientReducer::GradientReducer(ZeroState& state, Comm& comm, const CopyStream& d2h)
    : state_(state), comm_(comm), d2h_(d2h), ready_(state.buckets.size(), 0), reduced_(state.buckets.size(), false),
      next_launch_(state.layout.launch_order.size(), 0) {
  const ZeroPlan& plan = state.cfg.plan;
  if (state.pin && plan.shard_gradients) {
    int64_t most = 0;
    for (const auto& k : state.buckets) most = std::max(most, k.own_len);
    landing_buf_ = pinned_zeros(most, state.cfg.grad_dtype);
  }
  if (!plan.shard_parameters) install_hooks();
}

GradientReducer::~GradientReducer() {
  if (landing_) CopyStream::wait(landing_->done);  // its buffers go with the engine
}

// An autograd post-hook on each parameter of a hooked bucket: at the last of
// them (on the micro-batches that reduce), the bucket's reduction is launched.
void GradientReducer::install_hooks() {
  for (size_t b = 0; b < state_.buckets.size(); ++b)
    for (size_t i = 0; i < state_.buckets[b].params.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(state_.buckets[b].params[i]);
      acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, b, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            if (state_.main_grad) add_to_main_grad(state_.buckets[b], i);
            param_ready(b);
            return outputs;
          }));
      accumulators_.push_back(acc);
    }
}

// A parameter's new 16-bit gradient into its bucket's fp32 buffer, on every
// micro-batch (the slots of a bucket are disjoint: no lock needed).
void GradientReducer::add_to_main_grad(Bucket& k, size_t slot) {
  torch::NoGradGuard no_grad;
  torch::Tensor& p = k.params[slot];
  const torch::Tensor g = p.grad();
  if (!g.defined()) return;
  // Already added in backward (gradient-accumulation fusion) when take_added says so: g is then a placeholder.
  if (!state_.fused || !state_.fused->take_added(p)) {
    const SlotLayout& s = k.slots[slot];
    k.flat_grad.narrow(0, s.offset, s.numel).add_(g.reshape({-1}));
  }
  p.mutable_grad().reset();
}

void GradientReducer::begin_step(int64_t micro_batches) {
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(reduced_.begin(), reduced_.end(), false);
  std::fill(next_launch_.begin(), next_launch_.end(), 0);
  grad_mult_ = 1.0;
  micro_total_ = std::max<int64_t>(1, micro_batches);
  micro_done_ = 0;
}

// Hooked buckets are launched in one fixed order on every rank: on every
// micro-batch for sharded gradients, on the last one otherwise (the gradients
// accumulate in the full buffers until then).
bool GradientReducer::reduce_this_micro_batch() const {
  return state_.cfg.plan.shard_gradients || (state_.cfg.overlap && micro_done_ + 1 >= micro_total_);
}

void GradientReducer::param_ready(size_t b) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!reduce_this_micro_batch()) return;
  if (++ready_[b] < state_.buckets[b].slots.size()) return;
  launch_ready(state_.layout.chunk_of[b]);
}

void GradientReducer::launch_ready(size_t v) {
  const auto& order = state_.layout.launch_order[v];
  for (size_t& next = next_launch_[v]; next < order.size(); ++next) {
    const size_t b = order[next];
    if (ready_[b] < state_.buckets[b].slots.size()) return;
    reduce_hooked(state_.buckets[b]);
  }
}

// The bucket's partial gradients (ZeroConfig::tp_partial) in its flat
// gradient, summed over their group in one all-reduce of the packed slices.
void GradientReducer::sum_partials(const Bucket& k, const torch::Tensor& flat) {
  Comm* c = state_.cfg.tp_partial_comm;
  if (!c) return;
  std::vector<torch::Tensor> parts;
  for (const auto& s : k.slots)
    if (s.tp_partial) parts.push_back(flat.narrow(0, s.offset, s.numel));
  if (parts.empty()) return;
  torch::NoGradGuard no_grad;
  torch::Tensor packed = torch::cat(parts);
  c->all_reduce_sum(packed);
  int64_t at = 0;
  for (auto& p : parts) {
    p.copy_(packed.narrow(0, at, p.numel()));
    at += p.numel();
  }
}

void GradientReducer::reduce_hooked(Bucket& k) {
  if (!state_.cfg.plan.shard_gradients) {  // in place: all-reduce of the full buffer, or reduce-scatter of it into the shard
    finish_reduces();
    sum_partials(k, k.flat_grad);
    Reducing r{&k, k.flat_grad, torch::Tensor(), nullptr};
    r.op = state_.cfg.plan.shard_optimizer ? comm_.reduce_scatter_async(k.grad_shard, k.flat_grad) : comm_.all_reduce_async(k.flat_grad);
    reducing_.push_back(std::move(r));
    reduced_[static_cast<size_t>(&k - state_.buckets.data())] = true;
    return;
  }
  std::vector<torch::Tensor> grads;
  for (auto& p : k.params) {
    grads.push_back(p.grad());
    p.mutable_grad().reset();  // the full gradient is not kept: that is what sharding gradients saves
  }
  reduce_into_shard(k, grads);
}

void GradientReducer::reduce_into_shard(Bucket& k, const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  reduce_flat_into_shard(k, flat_grad(k, grads));
}

torch::Tensor GradientReducer::flat_grad(const Bucket& k, const std::vector<torch::Tensor>& grads) const {
  auto full = zeros_on(k.padded, state_.device, false, state_.cfg.grad_dtype);
  for (size_t i = 0; i < k.slots.size(); ++i)
    if (grads[i].defined()) full.narrow(0, k.slots[i].offset, k.slots[i].numel).copy_(grads[i].reshape({-1}));
  return full;
}

void GradientReducer::reduce_flat_into_shard(Bucket& k, const torch::Tensor& full) {
  finish_reduces(/*land=*/false);
  const auto dtype = state_.cfg.grad_dtype;
  Reducing r{&k, full.to(dtype), torch::empty({k.own_len}, full.options().dtype(dtype)), nullptr};
  sum_partials(k, r.full);
  r.op = comm_.reduce_scatter_async(r.part, r.full);
  reducing_.push_back(std::move(r));
}

void GradientReducer::finish_reduces(bool land) {
  torch::NoGradGuard no_grad;
  for (; !reducing_.empty(); reducing_.pop_front()) {
    Reducing& r = reducing_.front();
    r.op->wait();
    if (!r.part.defined()) {  // reduced in place (unsharded gradients): on its way to the host now
      if (r.k->early_d2h) d2h_.copy(r.k->host_grad, r.k->grad_shard, r.k->d2h_done);
      continue;
    }
    if (!state_.cfg.plan.offload_optimizer) {
      r.k->grad_shard.add_(r.part);
      continue;
    }
    // Offload: the part goes to the host on the copy stream and is added to
    // the host shard later, once the previous one is (one staging buffer).
    finish_landing();
    Landing l{r.k, r.part, r.part, std::nullopt};
    if (landing_buf_.defined()) {
      l.host = landing_buf_.narrow(0, 0, r.part.numel());
      d2h_.copy(l.host, r.part, l.done);
    }
    landing_ = std::move(l);
  }
  if (land) finish_landing();
}

void GradientReducer::finish_landing() {
  if (!landing_) return;
  CopyStream::wait(landing_->done);
  landing_->k->grad_shard.add_(landing_->host);  // both in host memory
  landing_.reset();
}

void GradientReducer::after_backward(size_t chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& launch = state_.layout.launch_order;
  if (chunk >= launch.size()) throw Error(ErrorKind::Internal, "ZeRO: backward of chunk %zu of %zu", chunk, launch.size());
  size_t& next = next_launch_[chunk];
  if (reduce_this_micro_batch()) {
    // Buckets whose parameters got no gradient this time: reduce what there is, in order.
    for (; next < launch[chunk].size(); ++next) reduce_hooked(state_.buckets[launch[chunk][next]]);
    finish_reduces();
  }
  for (size_t b : launch[chunk]) ready_[b] = 0;
  next = 0;
  ++micro_done_;
}

void GradientReducer::reduce_grads(double grad_mult) {
  torch::NoGradGuard no_grad;
  finish_reduces();
  if (!state_.cfg.plan.shard_gradients)  // launched during the last backward already, unless overlap is off
    for (const auto& order : state_.layout.launch_order)
      for (size_t b : order)
        if (!reduced_[b]) reduce_hooked(state_.buckets[b]);
  finish_reduces();
  if (state_.defer_mult) grad_mult_ = grad_mult;  // applied in fp32 by the norm and the step
  else if (grad_mult != 1.0)
    for (auto& k : state_.buckets) k.grad_shard.mul_(grad_mult);
}

}  // namespace zlm::trainer
