#include "common/core/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "common/core/error.h"
#include "common/core/log.h"

namespace zlm {

std::string human_count(double value) {
  const char* suffixes[] = {"", " k", " M", " G", " T"};
  int i = 0;
  while (std::fabs(value) >= 1000.0 && i < 4) {
    value /= 1000.0;
    ++i;
  }
  return i == 0 ? strprintf("%.0f", value) : strprintf("%.2f%s", value, suffixes[i]);
}

std::string human_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<uint64_t>(seconds + 0.5);
  if (s >= 3600) return strprintf("%luh%02lum", s / 3600, (s % 3600) / 60);
  if (s >= 60) return strprintf("%lum%02lus", s / 60, s % 60);
  return strprintf("%lus", s);
}

Progress::Progress(ProgressOptions options) : options_(std::move(options)) {
  tty_ = options_.force_tty >= 0 ? options_.force_tty == 1 : isatty(STDERR_FILENO) == 1;
  start_sec_ = log_elapsed_sec();
  next_report_sec_ = start_sec_ + (tty_ ? 0.2 : options_.interval_sec);
}

Progress::~Progress() = default;

std::string Progress::format_line(double elapsed_sec) const {
  double items = static_cast<double>(items_.load());
  double bytes = static_cast<double>(bytes_.load());
  double dt = elapsed_sec > 1e-9 ? elapsed_sec : 1e-9;
  std::string line = strprintf("%s %s (%s/s, %.2f MB/s", human_count(items).c_str(), options_.label.c_str(),
                               human_count(items / dt).c_str(), bytes / dt / 1e6);
  if (!options_.extra_label.empty()) {
    line += strprintf(", %s %s/s", human_count(static_cast<double>(extra_.load()) / dt).c_str(),
                      options_.extra_label.c_str());
  }
  line += ")";
  if (has_kept_ && items > 0) line += strprintf(", kept %.1f%%", 100.0 * static_cast<double>(kept_.load()) / items);
  double fraction = -1;
  if (options_.total_bytes > 0) fraction = bytes / static_cast<double>(options_.total_bytes);
  else if (options_.total_items > 0) fraction = items / static_cast<double>(options_.total_items);
  if (fraction > 0) {
    if (fraction > 1) fraction = 1;
    line += strprintf(", %.1f%%, ETA %s", 100.0 * fraction, human_duration(dt * (1 - fraction) / fraction).c_str());
  }
  line += strprintf(", elapsed %s", human_duration(elapsed_sec).c_str());
  return line;
}

void Progress::maybe_report() {
  if (!options_.enabled) return;
  double now = log_elapsed_sec();
  if (now < next_report_sec_) return;
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || now < next_report_sec_ || finished_) return;
  next_report_sec_ = now + (tty_ ? 0.2 : options_.interval_sec);
  std::string line = format_line(now - start_sec_);
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s [%9.3fs] %s", log_tool_name(), now, line.c_str());
    std::fflush(stderr);
  } else {
    ZLM_LOG_INF("progress: %s", line.c_str());
  }
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_ || !options_.enabled) return;
  finished_ = true;
  double now = log_elapsed_sec();
  if (tty_) std::fprintf(stderr, "\r\033[K");
  ZLM_LOG_INF("done: %s", format_line(now - start_sec_).c_str());
}

}  // namespace zlm
