// Error handling for zerolm: the three classes of docs/design.md, "Conventions".
//
//  (a) Bugs / broken invariants: ZLM_CHECK(cond, fmt, ...) is always on and
//      aborts with file:line; ZLM_DCHECK only in debug builds. Never on user input.
//  (b) The run cannot continue (bad flag, missing file, corrupt header, disk
//      full): throw zlm::Error with a Kind. The message names the path, the byte
//      offset or line, and a hint.
//  (c) Expected per-record outcomes (a malformed JSON line, invalid UTF-8) are
//      not errors: they are return values counted in stats.
//
// Usage:
//   throw zlm::Error(zlm::ErrorKind::Format, "%s: byte %d: bad magic", path.c_str(), 0);
//   ZLM_CHECK(n <= cap, "n=%zu cap=%zu", n, cap);
//
// Library code never prints and never exits; main() catches zlm::Error and
// returns exit_code(kind): Usage -> 2, everything else -> 1 (for the data tools
// through common/io/cli.h's tool_main; pretrain_gpt and zlm_bench_optimizer in
// their main()). Exit code 1 is also what any other exception gives.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstdarg>
#include <stdexcept>
#include <string>

namespace zlm {

// printf into a std::string. Allocates; O(length of the result).
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vstrprintf(const char* fmt, va_list args);

enum class ErrorKind { Usage, Io, Format, Internal };

const char* error_kind_name(ErrorKind kind);

// The process exit code for an error of this kind: 2 for Usage (as argparse
// and CLI11 exit on a bad flag), 1 for the rest.
constexpr int exit_code(ErrorKind kind) { return kind == ErrorKind::Usage ? 2 : 1; }

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  // printf-style message.
  Error(ErrorKind kind, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Throws ErrorKind::Io with "<what> '<path>': <strerror(errno)>" and a hint.
[[noreturn]] void throw_errno(const std::string& what, const std::string& path);

[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* msg);

}  // namespace zlm

#define ZLM_CHECK(cond, ...)                                                  \
  do {                                                                        \
    if (!(cond)) [[unlikely]] {                                               \
      char zlm_check_buf_[512];                                               \
      std::snprintf(zlm_check_buf_, sizeof zlm_check_buf_, "" __VA_ARGS__);   \
      ::zlm::check_failed(__FILE__, __LINE__, #cond, zlm_check_buf_);         \
    }                                                                         \
  } while (0)

#ifdef NDEBUG
#define ZLM_DCHECK(cond, ...) \
  do {                        \
  } while (0)
#else
#define ZLM_DCHECK(cond, ...) ZLM_CHECK(cond, __VA_ARGS__)
#endif
