#include "common/core/error.h"

#include <cerrno>
#include <cstring>

namespace zlm {

std::string vstrprintf(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  return out;
}

std::string strprintf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string out = vstrprintf(fmt, args);
  va_end(args);
  return out;
}

static std::string format_message(const char* fmt, va_list args) { return vstrprintf(fmt, args); }

Error::Error(ErrorKind kind, const char* fmt, ...) : std::runtime_error(""), kind_(kind) {
  va_list args;
  va_start(args, fmt);
  static_cast<std::runtime_error&>(*this) = std::runtime_error(format_message(fmt, args));
  va_end(args);
}

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Usage: return "usage";
    case ErrorKind::Io: return "io";
    case ErrorKind::Format: return "format";
    case ErrorKind::Internal: return "internal";
  }
  return "unknown";
}

void throw_errno(const std::string& what, const std::string& path) {
  int err = errno;
  std::string hint;
  if (err == ENOENT) hint = " ---> HINT: check the path and that the file exists";
  if (err == EACCES) hint = " ---> HINT: check the file permissions";
  if (err == ENOSPC) hint = " ---> HINT: the disk is full; free space and run again";
  throw Error(ErrorKind::Io, "%s '%s': %s%s", what.c_str(), path.c_str(), std::strerror(err), hint.c_str());
}

void check_failed(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "%s:%d: ZLM_CHECK(%s) failed: %s\n", file, line, cond, msg);
  std::fflush(stderr);
  std::abort();
}

}  // namespace zlm
