#include "trainer/schedule.h"

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

torch::Tensor PipelineSchedule::run_forward(int64_t k, const StageFns& fns, bool grad) {
  const size_t v = forward_chunk(k);
  const int64_t m = forwards_[v]++;
  torch::Tensor in;
  if (!first(v)) {  // from the previous stage (the first stage's chunk v: the last stage's chunk v - 1)
    in = torch::empty(shape_, options_);
    pp_.recv_async(in, (stage_ + stages_ - 1) % stages_, kForwardTag)->wait();
    if (grad) in.requires_grad_(true);
  }
  torch::Tensor out = fns.forward(v, m, in);
  if (last(v)) {
    loss_ += out.detach().to(torch::kDouble);
  } else {
    sent_.push_back(out.detach().contiguous());
    sends_.push_back(pp_.send_async(sent_.back(), (stage_ + 1) % stages_, kForwardTag));
  }
  if (grad) held_[v].push_back({in, out});
  return out;
}

void PipelineSchedule::run_backward(int64_t k, const StageFns& fns) {
  const size_t v = backward_chunk(k);
  if (held_[v].empty()) throw Error(ErrorKind::Internal, "pipeline schedule: backward of chunk %zu before its forward", v);
  Held h = std::move(held_[v].front());
  held_[v].pop_front();
  ++backwards_[v];
  torch::Tensor g;
  if (!last(v)) {
    g = torch::empty(shape_, options_);
    pp_.recv_async(g, (stage_ + 1) % stages_, kBackwardTag)->wait();
  }
  fns.backward(h.out, g);
  h.out.reset();
  if (chunks_ == 1 && fns.after_backward) fns.after_backward();
  if (!first(v)) {
    if (!h.in.grad().defined()) throw Error(ErrorKind::Internal, "pipeline schedule: no gradient for a stage's input");
    sent_.push_back(h.in.grad().contiguous());
    sends_.push_back(pp_.send_async(sent_.back(), (stage_ + stages_ - 1) % stages_, kBackwardTag));
  }
}

torch::Tensor PipelineSchedule::train(int64_t micro, const StageFns& fns) {
  forwards_.assign(chunks_, 0);
  backwards_.assign(chunks_, 0);
  held_.assign(chunks_, {});
  loss_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(options_.device()));
  const int64_t total = micro * static_cast<int64_t>(chunks_), w = warmup(micro);
  for (int64_t k = 0; k < w; ++k) run_forward(k, fns, true);
  for (int64_t k = 0; k < total - w; ++k) {  // steady state: one forward, one backward
    run_forward(w + k, fns, true);
    run_backward(k, fns);
  }
  for (int64_t k = total - w; k < total; ++k) run_backward(k, fns);
  for (auto& s : sends_) s->wait();
  sends_.clear();
  sent_.clear();
  return loss_;
}

torch::Tensor PipelineSchedule::evaluate(int64_t micro, const StageFns& fns) {
  torch::NoGradGuard no_grad;
  forwards_.assign(chunks_, 0);
  held_.assign(chunks_, {});
  loss_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(options_.device()));
  for (int64_t k = 0; k < micro * static_cast<int64_t>(chunks_); ++k) run_forward(k, fns, false);
  for (auto& s : sends_) s->wait();
  sends_.clear();
  sent_.clear();
  return loss_;
}

}  // namespace zlm::trainer
