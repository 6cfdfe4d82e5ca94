#include "common/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "common/error.h"

namespace zlm {
namespace {

// Temporary paths still open, for the signal handler. Fixed-size table of
// C strings so the handler only touches async-signal-safe state.
constexpr int kMaxTemps = 256;
char* g_temps[kMaxTemps];
std::mutex g_temps_mutex;
std::once_flag g_handler_once;

void on_signal(int sig) {
  for (int i = 0; i < kMaxTemps; ++i) {
    char* p = g_temps[i];
    if (p) unlink(p);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_handler() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    struct sigaction old {};
    sigaction(sig, nullptr, &old);
    if (old.sa_handler == SIG_DFL) sigaction(sig, &sa, nullptr);
  }
}

void register_temp(const std::string& path) {
  std::call_once(g_handler_once, install_handler);
  std::lock_guard<std::mutex> lock(g_temps_mutex);
  for (auto& slot : g_temps) {
    if (!slot) {
      slot = strdup(path.c_str());
      return;
    }
  }
}

void unregister_temp(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_temps_mutex);
  for (auto& slot : g_temps) {
    if (slot && path == slot) {
      char* p = slot;
      slot = nullptr;
      free(p);
      return;
    }
  }
}

}  // namespace

OutputFile::OutputFile(std::string path, size_t buffer_bytes) : path_(std::move(path)) {
  temp_path_ = path_ + ".tmp." + std::to_string(getpid());
  register_temp(temp_path_);
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    unregister_temp(temp_path_);
    throw_errno("cannot create output file", temp_path_);
  }
  buffer_.reserve(buffer_bytes);
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) abandon();
}

void OutputFile::raw_write(const char* p, size_t left) {
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot write output file", temp_path_);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void OutputFile::flush_buffer() {
  raw_write(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void OutputFile::write_slow(const void* data, size_t n) {
  if (fd_ < 0) throw Error(ErrorKind::Internal, "write to closed output file '%s'", path_.c_str());
  bytes_written_ += n;
  const char* p = static_cast<const char*>(data);
  if (buffer_.size() + n > buffer_.capacity()) {
    flush_buffer();
    if (n >= buffer_.capacity()) {
      raw_write(p, n);
      return;
    }
  }
  buffer_.insert(buffer_.end(), p, p + n);
}

void OutputFile::commit() {
  if (fd_ < 0) throw Error(ErrorKind::Internal, "commit of closed output file '%s'", path_.c_str());
  flush_buffer();
  if (::fsync(fd_) != 0 && errno != EINVAL) throw_errno("cannot sync output file", temp_path_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw_errno("cannot close output file", temp_path_);
  }
  fd_ = -1;
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) throw_errno("cannot rename output into place", path_);
  unregister_temp(temp_path_);
}

void OutputFile::abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  ::unlink(temp_path_.c_str());
  unregister_temp(temp_path_);
}

void write_file_atomic(const std::string& path, std::string_view content) {
  OutputFile out(path, 0);
  out.write(content);
  out.commit();
}

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("cannot open", path);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      throw_errno("cannot read", path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw_errno("cannot stat", path);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace zlm
