#include "trainer/run/step_profiler.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "common/core/error.h"
#include "common/core/log.h"
#include "trainer/config/megatron_args.h"

#ifdef ZLM_HAVE_CUDA
#include <cuda_profiler_api.h>
#endif

namespace zlm::trainer {

namespace fs = std::filesystem;
namespace prof = torch::profiler::impl;

// The open "ProfilerStep#N" range of the step being recorded.
struct StepProfiler::Impl {
  std::optional<at::RecordFunction> step;
};

namespace {

std::string trace_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "unknown-host");
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return std::string(host) + "_" + std::to_string(::getpid()) + "." + std::to_string(ms) + ".pt.trace.json";
}

}  // namespace

StepProfiler::StepProfiler(const TrainArgs& a, int rank, bool cuda)
    : impl_(std::make_unique<Impl>()), kineto_(a.use_pytorch_profiler), cuda_(cuda), start_(a.profile_step_start),
      end_(a.profile_step_end), dir_(a.tensorboard_dir) {
  active_ = a.profile && std::find(a.profile_ranks.begin(), a.profile_ranks.end(), rank) != a.profile_ranks.end();
  if (!active_) return;
  if (kineto_) {
    ZLM_LOG_INF(" > profiling this run's steps %ld-%ld with LibTorch's profiler (%s): a Chrome trace in %s", (long)std::max<int64_t>(start_, 1),
                (long)end_ - 1, cuda ? "operators and CUDA kernels" : "CPU operators", dir_.c_str());
  } else if (cuda) {
    ZLM_LOG_INF(" > profiling the steps from iteration %ld to %ld for Nsight Systems (cudaProfilerStart/Stop, NVTX ranges)", (long)start_,
                (long)end_);
  } else {
    ZLM_LOG_WRN("--profile without --use-pytorch-profiler marks a range for Nsight Systems, which a CPU run does not have: nothing "
                "is recorded ---> HINT: add --use-pytorch-profiler --tensorboard-dir DIR");
  }
}

StepProfiler::~StepProfiler() { finish(); }

// Megatron's schedules: torch.profiler's counts this run's steps from 1 (recording steps
// max(start, 1) .. end - 1); the Nsight range is by the iteration count itself.
bool StepProfiler::starts_at(int64_t iteration) {
  if (kineto_) return steps_ + 1 == std::max<int64_t>(start_, 1) && steps_ + 1 < end_;
  if (iteration > start_ && first_ == iteration && !warned_late_) {
    warned_late_ = true;
    ZLM_LOG_WRN("--profile-step-start %ld: this run starts at iteration %ld, past it: nothing is profiled (as in Megatron)", (long)start_,
                (long)iteration);
  }
  return iteration == start_;
}

// After a step (steps_ not yet counting it): the last recorded one is step end - 1, or iteration end.
bool StepProfiler::ends_at(int64_t iteration) const { return kineto_ ? steps_ + 1 >= end_ - 1 : iteration >= end_; }

void StepProfiler::start() {
  if (kineto_) {
    std::set<prof::ActivityType> activities{prof::ActivityType::CPU};
    if (cuda_) activities.insert(prof::ActivityType::CUDA);
    const prof::ProfilerConfig config(prof::ProfilerState::KINETO, /*report_input_shapes=*/true);
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
  } else if (cuda_) {
#ifdef ZLM_HAVE_CUDA
    cudaProfilerStart();
#endif
    torch::autograd::profiler::enableProfiler(prof::ProfilerConfig(prof::ProfilerState::NVTX, /*report_input_shapes=*/true), {});
  } else {
    return;
  }
  running_ = true;
}

void StepProfiler::before_step(int64_t iteration) {
  if (!active_) return;
  if (first_ < 0) first_ = iteration;
  if (!running_ && starts_at(iteration)) start();
  if (running_ && kineto_) {  // named as torch.profiler names its steps: this run's count from 1
    impl_->step.emplace(at::RecordScope::USER_SCOPE);
    if (impl_->step->isActive()) impl_->step->before("ProfilerStep#" + std::to_string(steps_ + 1));
  }
}

void StepProfiler::after_step(int64_t iteration) {
  if (!active_) return;
  const bool stop = running_ && ends_at(iteration);
  ++steps_;
  if (!running_) return;
  impl_->step.reset();
  if (stop) finish();
}

void StepProfiler::finish() {
  if (!running_) return;
  running_ = false;
  impl_->step.reset();
  try {
    if (kineto_) {
      write_trace();
    } else {
      torch::autograd::profiler::disableProfiler();
#ifdef ZLM_HAVE_CUDA
      cudaProfilerStop();
#endif
    }
  } catch (const std::exception& e) {
    ZLM_LOG_WRN("the profile was not written: %s", e.what());
  }
}

void StepProfiler::write_trace() {
  if (cuda_) torch::cuda::synchronize();
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result = torch::autograd::profiler::disableProfiler();
  fs::create_directories(dir_);
  const fs::path path = fs::path(dir_) / trace_name();
  const fs::path tmp = path.string() + ".tmp";
  result->save(tmp.string());
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error(ErrorKind::Io, "cannot rename the profile %s to %s: %s", tmp.c_str(), path.c_str(), ec.message().c_str());
  ZLM_LOG_INF(" > profile of this run's steps %ld-%ld: %s", (long)std::max<int64_t>(start_, 1), (long)std::min(end_ - 1, steps_),
              path.c_str());
}

}  // namespace zlm::trainer
