// pretrain_gpt's TensorBoard log: the scalars Megatron-LM's training loop
// writes (training_log and evaluate_and_print_results), under its tag names,
// into event files (formats/tfevents.h) in --tensorboard-dir. Rank 0 writes
// them; every value it writes is already reduced over the ranks (the loss over
// the data-parallel ranks of the last pipeline stage).
//
// Every --tensorboard-log-interval iterations (step = iteration), and again as
// "<tag> vs samples" (step = consumed training samples):
//   learning-rate          unless --no-log-learning-rate-to-tensorboard
//   batch-size             with --log-batch-size-to-tensorboard
//   lm loss                this iteration's loss (mean over its micro-batches)
//   loss-scale             unless --no-log-loss-scale-to-tensorboard (1 without --fp16)
//   world-size             with --log-world-size-to-tensorboard
//   grad-norm              unless the iteration was skipped (fp16 overflow)
//   num-zeros              with --log-num-zeros-in-grad, unless skipped
//   params-norm            with --log-params-norm
//   mem-reserved-bytes, mem-allocated-bytes, mem-allocated-count
//                          with --log-memory-to-tensorboard (the CUDA caching
//                          allocator's current figures; CUDA runs only)
// Every --log-interval iterations: iteration-time (seconds per iteration over
// the interval) with --log-timers-to-tensorboard.
// Every validation: "lm loss validation" (+ " ppl" with
// --log-validation-ppl-to-tensorboard, exp(min(20, loss)) as Megatron), both
// also "vs samples". The test split after training is written as "lm loss
// test" (Megatron writes it under the validation tag too, at the same step).
//
// Records are flushed at every --log-interval, when --tensorboard-queue-size
// are pending, and on close. A failure to write (disk full) is reported once
// and ends TensorBoard logging, not the training run.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/config/megatron_args.h"
#include "trainer/report/phase_timers.h"

namespace zlm::formats {
class EventFileWriter;
}

namespace zlm::trainer {

struct TrainingScalars {
  int64_t iteration = 0, consumed_samples = 0, batch_size = 0, world_size = 0;
  double learning_rate = 0, loss_scale = 1;
  std::optional<double> loss, grad_norm, num_zeros, params_norm;
  struct Memory {
    int64_t reserved_bytes = 0, allocated_bytes = 0, allocated_count = 0;
  };
  std::optional<Memory> memory;
};

class TensorBoardLog {
 public:
  // Opens a new event file in args.tensorboard_dir (throws zlm::Error(Io)).
  explicit TensorBoardLog(const TrainArgs& args);
  ~TensorBoardLog();
  TensorBoardLog(const TensorBoardLog&) = delete;
  TensorBoardLog& operator=(const TensorBoardLog&) = delete;

  // Whether iteration's training scalars are written (every --tensorboard-log-interval).
  bool due(int64_t iteration) const { return iteration % args_.tensorboard_log_interval == 0; }
  void training(const TrainingScalars& s);
  void iteration_time(int64_t iteration, double seconds);
  // With --log-timers-to-tensorboard: each phase's "<name>-time" (ms, the largest across ranks), as Megatron.
  void phase_times(int64_t iteration, const std::vector<PhaseMax>& phases);
  // split: "validation" or "test".
  void evaluation(const char* split, int64_t iteration, int64_t consumed_samples, double loss);
  void flush();
  void close();
  const std::string& path() const { return path_; }

 private:
  void pair(const std::string& tag, double value, int64_t iteration, int64_t consumed);
  template <typename F>
  void guarded(F&& f);

  TrainArgs args_;
  std::unique_ptr<formats::EventFileWriter> w_;
  std::string path_;
};

}  // namespace zlm::trainer
