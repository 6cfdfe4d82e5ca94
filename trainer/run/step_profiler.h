// Megatron's --profile for pretrain_gpt: the steps that start at iteration counts
// [--profile-step-start, --profile-step-end) on the ranks in --profile-ranks are
//  - with --use-pytorch-profiler, recorded by LibTorch's (Kineto) profiler: CPU operators and,
//    on CUDA, every kernel and copy, each step a "ProfilerStep#N" range; the Chrome trace goes to
//    --tensorboard-dir as <host>_<pid>.<ms>.pt.trace.json (the name torch.profiler's
//    tensorboard_trace_handler gives it), written under a temporary name and renamed;
//  - otherwise bracketed by cudaProfilerStart/Stop with NVTX ranges for the operators, for
//    `nsys profile --capture-range=cudaProfilerApi` (CUDA runs; on the CPU nothing is recorded).
// A run that ends inside the range stops the profiler and writes what it recorded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zlm::trainer {

struct TrainArgs;

class StepProfiler {
 public:
  StepProfiler(const TrainArgs& a, int rank, bool cuda);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;
  bool active() const { return active_; }
  // Around each training step: `iteration` is the count before the step, and after it.
  void before_step(int64_t iteration);
  void after_step(int64_t iteration);
  // Stops a profile still running (the run ended inside the range) and writes it.
  void finish();
  const std::string& trace_path() const { return trace_path_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool active_ = false, running_ = false, kineto_ = false, cuda_ = false;
  int64_t start_ = 0, end_ = 0;
  std::string dir_, trace_path_;
};

}  // namespace zlm::trainer
