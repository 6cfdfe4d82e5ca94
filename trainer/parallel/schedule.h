// How one training step's micro-batches run forward and backward through this
// rank's part of the model (Megatron's schedules, core/pipeline_parallel):
//   one stage           forward and backward of each micro-batch in turn;
//   stages, one chunk   1F1B: min(stages - stage - 1, M) forward passes to fill
//                       the pipeline, then one forward and one backward in turn,
//                       then the remaining backward passes: a stage holds at
//                       most stages - stage activations, whatever M is;
//   stages, V chunks    interleaved 1F1B: forward step k runs chunk
//                       (k mod stages*V) div stages, backward step k the mirror
//                       chunk; warm-up 2 (stages - stage - 1) + (V - 1) stages.
// Activations go to the next stage (the last stage's chunk v to the first
// stage's chunk v + 1) and their gradients back. Each step's messages with the
// neighbouring stages go as one batch that every pair of neighbours posts at
// the same point, Megatron's p2p_communication: with one chunk,
// send_forward_recv_backward after a forward and send_backward_recv_forward
// after a backward; interleaved, one send_forward_backward_recv_forward_backward
// per steady step. That is what NCCL needs (a send waits for its receive; tags
// are ignored): between two stages the forward message goes before the backward
// one in every batch. Batches are waited for at once, as Megatron does.
#pragma once

#include <torch/torch.h>

#include <deque>
#include <functional>
#include <vector>

#include "trainer/parallel/comm.h"

namespace zlm::trainer {

struct StageFns {
  // Chunk v's forward of micro-batch m; `input` is undefined on the first
  // chunk of the first stage (the function reads the tokens). Returns the
  // activation, or the loss on the last chunk of the last stage.
  std::function<torch::Tensor(size_t v, int64_t m, const torch::Tensor& input)> forward;
  // Backpropagates `out` with gradient `grad` (undefined: `out` is the loss, to be scaled).
  std::function<void(const torch::Tensor& out, const torch::Tensor& grad)> backward;
  // After each backward pass of a micro-batch through chunk v (ZeRO-2 reduces
  // what that pass produced).
  std::function<void(size_t v)> after_backward;
};

class PipelineSchedule {
 public:
  // pp: the pipeline group (this rank's stage is its rank); chunks: virtual
  // stages on this rank; activation: the shape and options of what passes between stages.
  PipelineSchedule(Comm& pp, size_t chunks, std::vector<int64_t> activation, torch::TensorOptions options);
  // Forward and backward of `micro` micro-batches; returns the sum of their
  // losses on the last stage (a device tensor; zero elsewhere).
  torch::Tensor train(int64_t micro, const StageFns& fns);
  // Forward passes only (evaluation, no autograd).
  torch::Tensor evaluate(int64_t micro, const StageFns& fns);
  // Most activations this stage holds at once during train() (the memory plan).
  int64_t max_in_flight(int64_t micro) const;

 private:
  struct Held {
    torch::Tensor in, out;
  };
  struct Received {
    torch::Tensor input, grad;  // the next forward step's input, the next backward step's output gradient
  };
  int64_t warmup(int64_t micro) const;
  size_t forward_chunk(int64_t k) const;
  size_t backward_chunk(int64_t k) const;
  // Whether forward step k receives its input, backward step k its output's gradient.
  bool takes_input(int64_t k) const { return !first(forward_chunk(k)); }
  bool takes_grad(int64_t k) const { return !last(backward_chunk(k)); }
  // Forward step k; returns the activation to send on (undefined on the last chunk of the last stage).
  torch::Tensor forward_step(int64_t k, const torch::Tensor& input, const StageFns& fns, bool grad);
  // Backward step k; returns the input's gradient to send back (undefined on the first chunk of the first stage).
  torch::Tensor backward_step(int64_t k, const torch::Tensor& grad, const StageFns& fns);
  // One batch with the neighbours: sends what is defined, receives what is asked for.
  Received exchange(const torch::Tensor& send_forward, bool recv_forward, const torch::Tensor& send_backward, bool recv_backward);
  void train_1f1b(int64_t micro, const StageFns& fns);
  void train_interleaved(int64_t micro, const StageFns& fns);
  void reset(int64_t micro);
  bool first(size_t v) const { return stage_ == 0 && v == 0; }
  bool last(size_t v) const { return stage_ == stages_ - 1 && v + 1 == chunks_; }

  Comm& pp_;
  int stage_, stages_;
  size_t chunks_;
  std::vector<int64_t> shape_;
  torch::TensorOptions options_;
  int64_t total_ = 0;                          // forward (and backward) steps of this call
  std::vector<int64_t> forwards_;              // per chunk: micro-batches done
  std::vector<std::deque<Held>> held_;         // per chunk: forward passes awaiting their backward
  torch::Tensor loss_;
};

}  // namespace zlm::trainer
