// Megatron's timers (--timing-log-level, --timing-log-option): the time each
// phase of the training step takes, averaged over a log interval and printed
// with it the way Megatron prints them, e.g. with the default option:
//
//   (min, max) time across ranks (ms):
//       forward-backward ...............................: (412.31, 415.02)
//       optimizer ......................................: (21.40, 21.43)
//
// Phases: forward-backward (the pipeline schedule's forward and backward
// passes), all-grads-sync (the data-parallel gradient reduction),
// embedding-grads-all-reduce (first and last pipeline stage, tied embedding),
// optimizer (gradient norm, clipping, AdamW), and within it
// optimizer-clip-main-grad (the norm) and optimizer-inner-step (the update).
// Like Megatron's, start and stop wait for the device (the sync function), so
// the phases add up to the step, at the cost of the host's run-ahead across
// phases. Torch-free: the trainer passes the device wait in.
//
//   PhaseTimers t(1, [] { torch::cuda::synchronize(); });
//   t.start("forward-backward"); ...; t.stop("forward-backward");
//   std::vector<PhaseTimes> mine = t.take(iterations);  // per iteration, ms; resets
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace zlm::trainer {

struct PhaseTimes {
  std::string name;
  double ms = 0;  // per iteration over the interval
};

class PhaseTimers {
 public:
  PhaseTimers(int level, std::function<void()> sync) : level_(level), sync_(std::move(sync)) {}
  // Phases above the run's --timing-log-level (level 2: Megatron's finer ones) are not timed.
  void start(const std::string& name, int level = 1);
  void stop(const std::string& name, int level = 1);
  // Every phase timed since the last take, in the order first started, in ms per iteration; resets.
  std::vector<PhaseTimes> take(int64_t iterations);

 private:
  struct Phase {
    std::string name;
    double seconds = 0;
    std::chrono::steady_clock::time_point started;
    bool running = false;
  };
  Phase& phase(const std::string& name);
  int level_;
  std::function<void()> sync_;
  std::vector<Phase> phases_;
};

// Each phase's least and largest time across ranks (a phase some ranks lack, such as the
// embedding's reduction off the first and last pipeline stage, over the ranks that have it).
struct PhaseMax {
  std::string name;
  double min_ms = 0, max_ms = 0;
};
std::vector<PhaseMax> phase_maxima(const std::vector<std::vector<PhaseTimes>>& by_rank);
// Megatron's block for --timing-log-option max, minmax or all, from every rank's times
// (by_rank[r]: rank r's take()).
std::string format_phase_times(const std::vector<std::vector<PhaseTimes>>& by_rank, const std::string& option);
// A rank's times as one line ("name=ms;...") and back, to gather them across ranks.
std::string encode_phase_times(const std::vector<PhaseTimes>& times);
std::vector<PhaseTimes> decode_phase_times(const std::string& line);

}  // namespace zlm::trainer
