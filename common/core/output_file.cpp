#include "common/core/output_file.h"

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "common/core/error.h"

namespace zlm {
namespace {

// Temporary paths still open, for the signal handler. Fixed-size table of
// C strings so the handler only touches async-signal-safe state; room for a
// shuffle's 65,536 buckets and then some (1 MiB of pointers, in pages touched
// only as slots are used). An OutputFile knows its slot: no search to free it.
constexpr int kMaxTemps = 1 << 17;
char* g_temps[kMaxTemps];
int g_next_slot = 0;  // where the search for a free slot starts
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

// The path's slot, or -1 when the table is full (the file is then not removed on a signal).
int register_temp(const std::string& path) {
  std::call_once(g_handler_once, install_handler);
  std::lock_guard<std::mutex> lock(g_temps_mutex);
  for (int n = 0; n < kMaxTemps; ++n) {
    const int i = (g_next_slot + n) % kMaxTemps;
    if (!g_temps[i]) {
      g_temps[i] = strdup(path.c_str());
      g_next_slot = (i + 1) % kMaxTemps;
      return i;
    }
  }
  return -1;
}

void unregister_temp(int& slot) {
  if (slot < 0) return;
  std::lock_guard<std::mutex> lock(g_temps_mutex);
  char* p = g_temps[slot];
  g_temps[slot] = nullptr;
  free(p);
  slot = -1;
}

}  // namespace

OutputFile::OutputFile(std::string path, size_t buffer_bytes) : path_(std::move(path)) {
  if (path_.empty()) throw Error(ErrorKind::Usage, "an output path is empty");
  // Refused before anything is written: the rename at the end would fail
  // after the whole output had been produced.
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw Error(ErrorKind::Io, "cannot write output '%s': it is a directory ---> HINT: give a file name", path_.c_str());
  if (path_ == "-") {  // standard output: a stream, written as it comes (no temporary, no rename)
    fd_ = STDOUT_FILENO;
    temp_path_ = "<stdout>";
    buffer_.reserve(buffer_bytes);
    return;
  }
  temp_path_ = path_ + ".tmp." + std::to_string(getpid());
  temp_slot_ = register_temp(temp_path_);
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    unregister_temp(temp_slot_);
    throw_errno("cannot create output file", temp_path_);
  }
  buffer_.reserve(buffer_bytes);
}

OutputFile::~OutputFile() {
  if (fd_ >= 0 || finished_) abandon();
}

void write_all(int fd, const void* data, size_t left, const char* what, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(what, path);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void OutputFile::raw_write(const char* p, size_t left) { write_all(fd_, p, left, "cannot write output file", temp_path_); }

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

void OutputFile::finish() {
  if (fd_ < 0) throw Error(ErrorKind::Internal, "finish of closed output file '%s'", path_.c_str());
  try {
    flush_buffer();
    if (path_ == "-") {
      fd_ = -1;
      return;  // standard output stays open; finished_ stays false: nothing to publish
    }
    if (sync_ && ::fsync(fd_) != 0 && errno != EINVAL) throw_errno("cannot sync output file", temp_path_);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw_errno("cannot close output file", temp_path_);
    std::vector<char>().swap(buffer_);  // nothing more is written: an OutputFile kept until publish() holds no buffer
  } catch (...) {
    abandon();  // a failed output leaves no temporary behind
    throw;
  }
  finished_ = true;
}

void OutputFile::publish() {
  if (path_ == "-") return;
  if (!finished_) throw Error(ErrorKind::Internal, "publish of unfinished output file '%s'", path_.c_str());
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    abandon();
    errno = err;
    throw_errno("cannot rename output into place", path_);
  }
  finished_ = false;
  unregister_temp(temp_slot_);
}

void OutputFile::commit() {
  finish();
  publish();
}

void OutputFile::abandon() {
  if (path_ == "-") {
    fd_ = -1;
    return;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  finished_ = false;
  ::unlink(temp_path_.c_str());
  unregister_temp(temp_slot_);
}

void check_distinct_paths(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  struct Key {
    std::string canonical;
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    bool same(const Key& o) const { return canonical == o.canonical || (exists && o.exists && dev == o.dev && ino == o.ino); }
  };
  auto key = [](const std::string& p) {
    Key k;
    std::error_code ec;
    auto c = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
    k.canonical = ec ? p : c.string();
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) k.exists = true, k.dev = st.st_dev, k.ino = st.st_ino;  // hard links too
    return k;
  };
  // "-" is standard input among the inputs and standard output among the
  // outputs: two outputs on it clash, an output and an input on it do not.
  auto skip = [](const NamedPath& n) { return n.path.empty(); };
  std::vector<Key> out_keys;
  for (size_t i = 0; i < outputs.size(); ++i) {
    out_keys.push_back(skip(outputs[i]) ? Key{} : key(outputs[i].path));
    if (skip(outputs[i])) continue;
    for (size_t j = 0; j < i; ++j)
      if (!skip(outputs[j]) && out_keys[i].same(out_keys[j]))
        throw Error(ErrorKind::Usage, "%s and %s both write '%s' ---> HINT: give each output its own file", outputs[j].flag.c_str(),
                    outputs[i].flag.c_str(), outputs[i].path.c_str());
    for (const auto& in : inputs)
      if (!skip(in) && in.path != "-" && outputs[i].path != "-" && out_keys[i].same(key(in.path)))
        throw Error(ErrorKind::Usage, "%s '%s' is also read as %s: writing it would destroy that input ---> HINT: write elsewhere",
                    outputs[i].flag.c_str(), outputs[i].path.c_str(), in.flag.c_str());
  }
}

void write_file_atomic(const std::string& path, std::string_view content) {
  OutputFile out(path, 0);
  out.write(content);
  out.commit();
}

}  // namespace zlm
