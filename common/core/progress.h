// Progress reporting by time, not by record count (docs/design.md, "Conventions").
//
//   zlm::Progress progress({.label = "docs", .total_bytes = input_size});
//   for (...) { progress.add(1, line.size()); progress.maybe_report(); }
//   progress.finish();
//
// Every `interval_sec` (default 5 s; 0.2 s refresh of the bar on a terminal) it
// prints one line on stderr: items, items/s, MB/s, extra counters (e.g. tok/s),
// the kept fraction when set, and an ETA when the total is known. On a terminal
// (isatty(stderr)) it redraws one bar line in place; otherwise it prints plain
// log lines. add() is thread-safe and lock-free; maybe_report() takes a mutex
// only when a report is due. Cost: O(1), no allocation on the fast path.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace zlm {

struct ProgressOptions {
  std::string label = "items";   // noun for the counted items ("docs", "urls")
  uint64_t total_items = 0;      // 0 = unknown
  uint64_t total_bytes = 0;      // 0 = unknown; ETA prefers bytes when known
  double interval_sec = 5.0;     // plain-line interval
  bool enabled = true;
  int force_tty = -1;            // -1 auto, 0 plain lines, 1 bar (tests)
  std::string extra_label;       // a third counter with its rate, e.g. "tokens"
};

class Progress {
 public:
  explicit Progress(ProgressOptions options);
  ~Progress();

  void add(uint64_t items, uint64_t bytes, uint64_t extra = 0) {
    items_.fetch_add(items, std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    if (extra) extra_.fetch_add(extra, std::memory_order_relaxed);
  }
  void set_kept(uint64_t kept) { kept_.store(kept, std::memory_order_relaxed); has_kept_ = true; }
  void maybe_report();
  // Prints the final line (always, when enabled). Idempotent.
  void finish();

  // The line that would be printed now (for tests and the final summary).
  std::string format_line(double elapsed_sec) const;

 private:
  ProgressOptions options_;
  std::atomic<uint64_t> items_{0}, bytes_{0}, extra_{0}, kept_{0};
  bool has_kept_ = false;
  bool tty_ = false;
  bool finished_ = false;
  double start_sec_ = 0, next_report_sec_ = 0;
  std::mutex mutex_;
};

// "1.23 k", "45.6 M" style human-readable numbers.
std::string human_count(double value);
// "1h02m", "3m05s", "12s".
std::string human_duration(double seconds);

}  // namespace zlm
