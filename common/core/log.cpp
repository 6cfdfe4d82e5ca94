#include "common/core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

namespace zlm {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::Inf)};
std::string g_tool = "zerolm";
std::chrono::steady_clock::time_point g_start = std::chrono::steady_clock::now();
std::mutex g_mutex;
const char* level_tag(LogLevel level) {
  switch (level) {
    case LogLevel::Err: return "ERR";
    case LogLevel::Wrn: return "WRN";
    case LogLevel::Inf: return "INF";
    case LogLevel::Dbg: return "DBG";
  }
  return "???";
}
}  // namespace

void log_init(const char* tool_name) {
  g_tool = tool_name;
  g_start = std::chrono::steady_clock::now();
}
void log_set_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }
bool log_enabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed); }
const char* log_tool_name() { return g_tool.c_str(); }

double log_elapsed_sec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
}

void log_write(LogLevel level, const char* fmt, ...) {
  char body[4096];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(body, sizeof body, fmt, args);
  va_end(args);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%s [%9.3fs] %s %s\n", g_tool.c_str(), log_elapsed_sec(), level_tag(level), body);
  std::fflush(stderr);
}

}  // namespace zlm
