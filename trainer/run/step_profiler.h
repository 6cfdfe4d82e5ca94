// Megatron's --profile for pretrain_gpt, on the ranks in --profile-ranks, with Megatron's two
// schedules (which differ by one step, as Megatron's own do):
//  - with --use-pytorch-profiler, LibTorch's (Kineto) profiler records this run's steps
//    max(start, 1) .. end - 1, counted from 1 at the run's first step (torch.profiler's schedule
//    with wait = start - 1, warmup = 1, active = end - start, stepped before each step, as
//    Megatron's training loop does): CPU operators and, on CUDA, every kernel and copy, each step
//    a "ProfilerStep#N" range. The Chrome trace goes to --tensorboard-dir as
//    <host>_<pid>.<ms>.pt.trace.json (the name torch.profiler's tensorboard_trace_handler gives it),
//    written under a temporary name and renamed;
//  - otherwise the steps that start at iteration counts [start, end) are bracketed by
//    cudaProfilerStart/Stop, with NVTX ranges for the operators, for
//    `nsys profile --capture-range=cudaProfilerApi` (CUDA runs; on the CPU nothing is recorded).
// A run that ends inside the range stops the profiler and writes what it recorded. Writing the
// trace never stops training: a failure is a warning.
//
//   StepProfiler prof(args, rank, cuda);
//   while (...) { prof.before_step(it); train_step(); prof.after_step(++it); }
//   prof.finish();
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
  // Around each training step: `iteration` is the count before the step, and after it.
  void before_step(int64_t iteration);
  void after_step(int64_t iteration);
  // Stops a profile still running (the run ended inside the range) and writes it.
  void finish();

 private:
  bool starts_at(int64_t iteration);
  bool ends_at(int64_t iteration) const;
  void start();
  void write_trace();

  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool active_ = false, running_ = false, kineto_ = false, cuda_ = false, warned_late_ = false;
  int64_t start_ = 0, end_ = 0;
  int64_t first_ = -1, steps_ = 0;  // the run's first iteration count; this run's steps so far
  std::string dir_;
};

}  // namespace zlm::trainer
