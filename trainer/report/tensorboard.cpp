#include "trainer/report/tensorboard.h"

#include <algorithm>
#include <cmath>

#include "common/core/error.h"
#include "common/core/log.h"
#include "formats/tfevents.h"

namespace zlm::trainer {

TensorBoardLog::TensorBoardLog(const TrainArgs& args)
    : args_(args), w_(std::make_unique<formats::EventFileWriter>(args.tensorboard_dir, static_cast<size_t>(args.tensorboard_queue_size))) {
  path_ = w_->path();
}

TensorBoardLog::~TensorBoardLog() = default;  // the writer flushes and closes

template <typename F>
void TensorBoardLog::guarded(F&& f) {
  if (!w_) return;
  try {
    f();
  } catch (const Error& e) {
    ZLM_LOG_WRN("TensorBoard logging stopped (training goes on; metrics.jsonl is unaffected): %s", e.what());
    w_.reset();
  }
}

void TensorBoardLog::pair(const std::string& tag, double value, int64_t iteration, int64_t consumed) {
  w_->add_scalar(tag, static_cast<float>(value), iteration);
  w_->add_scalar(tag + " vs samples", static_cast<float>(value), consumed);
}

void TensorBoardLog::training(const TrainingScalars& s) {
  guarded([&] {
    const int64_t it = s.iteration, n = s.consumed_samples;
    if (args_.log_learning_rate_to_tensorboard) pair("learning-rate", s.learning_rate, it, n);
    if (args_.log_batch_size_to_tensorboard) pair("batch-size", static_cast<double>(s.batch_size), it, n);
    if (s.loss) pair("lm loss", *s.loss, it, n);
    if (args_.log_loss_scale_to_tensorboard) pair("loss-scale", s.loss_scale, it, n);
    if (args_.log_world_size_to_tensorboard) pair("world-size", static_cast<double>(s.world_size), it, n);
    if (s.grad_norm) pair("grad-norm", *s.grad_norm, it, n);
    if (s.num_zeros) pair("num-zeros", *s.num_zeros, it, n);
    if (s.params_norm) pair("params-norm", *s.params_norm, it, n);
    if (args_.log_memory_to_tensorboard && s.memory) {  // Megatron writes these against the iteration only
      w_->add_scalar("mem-reserved-bytes", static_cast<float>(s.memory->reserved_bytes), it);
      w_->add_scalar("mem-allocated-bytes", static_cast<float>(s.memory->allocated_bytes), it);
      w_->add_scalar("mem-allocated-count", static_cast<float>(s.memory->allocated_count), it);
    }
  });
}

void TensorBoardLog::iteration_time(int64_t iteration, double seconds) {
  if (!args_.log_timers_to_tensorboard) return;
  guarded([&] { w_->add_scalar("iteration-time", static_cast<float>(seconds), iteration); });
}

void TensorBoardLog::phase_times(int64_t iteration, const std::vector<PhaseMax>& phases) {
  if (!args_.log_timers_to_tensorboard) return;
  guarded([&] {
    for (const PhaseMax& p : phases) w_->add_scalar(p.name + "-time", static_cast<float>(p.max_ms), iteration);
  });
}

void TensorBoardLog::evaluation(const char* split, int64_t iteration, int64_t consumed_samples, double loss) {
  guarded([&] {
    const std::string tag = std::string("lm loss ") + split;
    pair(tag, loss, iteration, consumed_samples);
    if (args_.log_validation_ppl_to_tensorboard) pair(tag + " ppl", std::exp(std::min(20.0, loss)), iteration, consumed_samples);
  });
}

void TensorBoardLog::flush() {
  guarded([&] { w_->flush(); });
}

void TensorBoardLog::close() {
  guarded([&] { w_->close(); });
  w_.reset();
}

}  // namespace zlm::trainer
