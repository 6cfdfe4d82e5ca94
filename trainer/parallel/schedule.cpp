#include "trainer/parallel/schedule.h"

#include <algorithm>

#include "common/core/error.h"

namespace zlm::trainer {

namespace {
constexpr int kForwardTag = 1, kBackwardTag = 2;
}

PipelineSchedule::PipelineSchedule(Comm& pp, size_t chunks, std::vector<int64_t> activation, torch::TensorOptions options)
    : pp_(pp), stage_(pp.rank()), stages_(pp.world()), chunks_(chunks), shape_(std::move(activation)), options_(options) {}

int64_t PipelineSchedule::warmup(int64_t micro) const {
  const int64_t later = stages_ - stage_ - 1;
  if (chunks_ == 1) return std::min(later, micro);
  const auto total = micro * static_cast<int64_t>(chunks_);
  if (micro == stages_) return total;  // Megatron: all forward passes first
  return std::min(total, 2 * later + (static_cast<int64_t>(chunks_) - 1) * stages_);
}

size_t PipelineSchedule::forward_chunk(int64_t k) const {
  return static_cast<size_t>((k % (stages_ * static_cast<int64_t>(chunks_))) / stages_);
}

size_t PipelineSchedule::backward_chunk(int64_t k) const { return chunks_ - 1 - forward_chunk(k); }

int64_t PipelineSchedule::max_in_flight(int64_t micro) const {
  return std::min(warmup(micro) + 1, micro * static_cast<int64_t>(chunks_));
}

torch::Tensor PipelineSchedule::forward_step(int64_t k, const torch::Tensor& input, const StageFns& fns, bool grad) {
  const size_t v = forward_chunk(k);
  const int64_t m = forwards_[v]++;
  if (takes_input(k) && !input.defined()) throw Error(ErrorKind::Internal, "pipeline schedule: forward step %ld has no input", (long)k);
  if (grad && input.defined()) input.requires_grad_(true);
  torch::Tensor out = fns.forward(v, m, input);
  if (grad) held_[v].push_back({input, out});
  if (last(v)) {
    loss_ += out.detach().to(torch::kDouble);
    return {};
  }
  return out.detach().contiguous();
}

torch::Tensor PipelineSchedule::backward_step(int64_t k, const torch::Tensor& grad, const StageFns& fns) {
  const size_t v = backward_chunk(k);
  if (held_[v].empty()) throw Error(ErrorKind::Internal, "pipeline schedule: backward of chunk %zu before its forward", v);
  if (takes_grad(k) && !grad.defined()) throw Error(ErrorKind::Internal, "pipeline schedule: backward step %ld has no gradient", (long)k);
  Held h = std::move(held_[v].front());
  held_[v].pop_front();
  fns.backward(h.out, grad);
  h.out.reset();
  if (fns.after_backward) fns.after_backward(v);
  if (first(v)) return {};
  if (!h.in.grad().defined()) throw Error(ErrorKind::Internal, "pipeline schedule: no gradient for a stage's input");
  return h.in.grad().contiguous();
}

// The batch's order is the same on every stage: the forward message (send to
// the next stage, receive from the previous), then the backward one (send to
// the previous, receive from the next). With two stages, where the previous is
// the next, the two ranks thus post their messages to each other in one order.
PipelineSchedule::Received PipelineSchedule::exchange(const torch::Tensor& send_forward, bool recv_forward, const torch::Tensor& send_backward,
                                                      bool recv_backward) {
  const int next = (stage_ + 1) % stages_, prev = (stage_ + stages_ - 1) % stages_;
  Received r;
  std::vector<Comm::P2p> ops;
  if (send_forward.defined()) ops.push_back({Comm::P2p::kSend, send_forward, next, kForwardTag});
  if (recv_forward) {
    r.input = torch::empty(shape_, options_);
    ops.push_back({Comm::P2p::kRecv, r.input, prev, kForwardTag});
  }
  if (send_backward.defined()) ops.push_back({Comm::P2p::kSend, send_backward, prev, kBackwardTag});
  if (recv_backward) {
    r.grad = torch::empty(shape_, options_);
    ops.push_back({Comm::P2p::kRecv, r.grad, next, kBackwardTag});
  }
  if (!ops.empty()) pp_.p2p(ops)->wait();
  return r;
}

void PipelineSchedule::reset(int64_t micro) {
  total_ = micro * static_cast<int64_t>(chunks_);
  forwards_.assign(chunks_, 0);
  held_.assign(chunks_, {});
  loss_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(options_.device()));
}

// Megatron's forward_backward_pipelining_without_interleaving.
void PipelineSchedule::train_1f1b(int64_t micro, const StageFns& fns) {
  const int64_t w = warmup(micro), steady = micro - w;
  for (int64_t k = 0; k < w; ++k) {
    const torch::Tensor input = exchange({}, takes_input(k), {}, false).input;
    exchange(forward_step(k, input, fns, true), false, {}, false);
  }
  torch::Tensor input = steady > 0 ? exchange({}, takes_input(w), {}, false).input : torch::Tensor();
  for (int64_t k = 0; k < steady; ++k) {
    const torch::Tensor grad = exchange(forward_step(w + k, input, fns, true), false, {}, takes_grad(k)).grad;
    const torch::Tensor input_grad = backward_step(k, grad, fns);
    input = exchange({}, k + 1 < steady && takes_input(w + k + 1), input_grad, false).input;
  }
  for (int64_t k = steady; k < micro; ++k) {
    const torch::Tensor grad = exchange({}, false, {}, takes_grad(k)).grad;
    exchange({}, false, backward_step(k, grad, fns), false);
  }
}

// Megatron's forward_backward_pipelining_with_interleaving: the warm-up's
// last step also receives the first backward step's gradient; each steady
// step runs a forward and a backward, then one batch sends both results and
// receives the next step's input and gradient.
void PipelineSchedule::train_interleaved(int64_t micro, const StageFns& fns) {
  const int64_t total = total_, w = warmup(micro), steady = total - w;
  torch::Tensor input = takes_input(0) ? exchange({}, true, {}, false).input : torch::Tensor(), grad;
  for (int64_t k = 0; k < w; ++k) {
    const torch::Tensor out = forward_step(k, input, fns, true);
    const bool recv_grad = k + 1 == w && steady > 0 && takes_grad(0);
    Received r = exchange(out, k + 1 < total && takes_input(k + 1), {}, recv_grad);
    input = r.input;
    grad = r.grad;
  }
  for (int64_t k = 0; k < steady; ++k) {
    const int64_t f = w + k;
    const torch::Tensor out = forward_step(f, input, fns, true);
    const torch::Tensor input_grad = backward_step(k, grad, fns);
    Received r = exchange(out, f + 1 < total && takes_input(f + 1), input_grad, k + 1 < total && takes_grad(k + 1));
    input = r.input;
    grad = r.grad;
  }
  if (steady == 0) grad = exchange({}, false, {}, takes_grad(0)).grad;  // all forward steps were warm-up
  for (int64_t k = steady; k < total; ++k) {
    const torch::Tensor input_grad = backward_step(k, grad, fns);
    grad = exchange({}, false, input_grad, k + 1 < total && takes_grad(k + 1)).grad;
  }
}

torch::Tensor PipelineSchedule::train(int64_t micro, const StageFns& fns) {
  reset(micro);
  if (chunks_ == 1) train_1f1b(micro, fns);
  else train_interleaved(micro, fns);
  return loss_;
}

// Forward steps only: each sends its activation in the batch that receives the next step's input.
torch::Tensor PipelineSchedule::evaluate(int64_t micro, const StageFns& fns) {
  torch::NoGradGuard no_grad;
  reset(micro);
  torch::Tensor input = takes_input(0) ? exchange({}, true, {}, false).input : torch::Tensor();
  for (int64_t k = 0; k < total_; ++k) input = exchange(forward_step(k, input, fns, false), k + 1 < total_ && takes_input(k + 1), {}, false).input;
  return loss_;
}

}  // namespace zlm::trainer
