// Logging to stderr for people (stdout is for data).
//
// Each line: "<tool> [  12.345s] WRN message". Levels ERR < WRN < INF < DBG;
// the threshold is INF by default, -v raises it to DBG, -q lowers it to WRN.
// The macros skip evaluating their arguments below the threshold.
//
//   zlm::log_init("preprocess_data");
//   ZLM_LOG_INF("read %zu documents", n);
//
// Thread safety: every call writes one whole line under a mutex.
// Cost: one formatted write per line; never allocates on the skipped path.
#pragma once

#include <chrono>

namespace zlm {

enum class LogLevel { Err = 0, Wrn = 1, Inf = 2, Dbg = 3 };

void log_init(const char* tool_name);
void log_set_level(LogLevel level);
LogLevel log_level();
bool log_enabled(LogLevel level);
// Seconds since log_init (the same clock as the line prefixes).
double log_elapsed_sec();
const char* log_tool_name();
void log_write(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace zlm

#define ZLM_LOG(level, ...)                                \
  do {                                                     \
    if (::zlm::log_enabled(level)) ::zlm::log_write(level, __VA_ARGS__); \
  } while (0)
#define ZLM_LOG_ERR(...) ZLM_LOG(::zlm::LogLevel::Err, __VA_ARGS__)
#define ZLM_LOG_WRN(...) ZLM_LOG(::zlm::LogLevel::Wrn, __VA_ARGS__)
#define ZLM_LOG_INF(...) ZLM_LOG(::zlm::LogLevel::Inf, __VA_ARGS__)
#define ZLM_LOG_DBG(...) ZLM_LOG(::zlm::LogLevel::Dbg, __VA_ARGS__)
