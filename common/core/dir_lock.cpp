#include "common/core/dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "common/core/error.h"

namespace zlm {

namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

// What the lock file says about its holder ("pid=P host=H started=T").
struct Holder {
  long pid = -1;
  std::string host, started;
  std::string text() const { return "pid " + std::to_string(pid) + " on host " + host + ", started " + started; }
};

Holder parse_holder(const std::string& content) {
  Holder h;
  std::istringstream in(content);
  std::string field;
  while (in >> field) {
    const size_t eq = field.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    if (key == "pid") h.pid = std::strtol(value.c_str(), nullptr, 10);
    else if (key == "host") h.host = value;
    else if (key == "started") h.started = value;
  }
  return h;
}

std::string read_all(int fd) {
  std::string out;
  char buf[512];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

bool alive_here(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

}  // namespace

std::string DirLock::describe_self() {
  char when[32] = {};
  const std::time_t now = std::time(nullptr);
  std::tm tm {};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return "pid=" + std::to_string(::getpid()) + " host=" + host_name() + " started=" + when;
}

DirLock::DirLock(const std::string& dir, const std::string& flag) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    throw Error(ErrorKind::Usage, "%s %s: exists and is not a directory", flag.c_str(), dir.c_str());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(ErrorKind::Io, "%s %s: cannot create the directory: %s", flag.c_str(), dir.c_str(), ec.message().c_str());
  path_ = (std::filesystem::path(dir) / "zerolm.lock").string();
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_errno("cannot open the lock file", path_);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      const Holder h = parse_holder(read_all(fd_));
      ::close(fd_);
      fd_ = -1;
      throw Error(ErrorKind::Usage, "%s %s is in use by another run (%s; lock %s): two runs writing one directory would interleave their "
                  "checkpoints ---> HINT: give this run its own %s, or wait for that one to end", flag.c_str(), dir.c_str(),
                  h.pid > 0 ? h.text().c_str() : "its pid unknown", path_.c_str(), flag.c_str());
    }
    if (err != ENOLCK && err != EOPNOTSUPP && err != ENOSYS && err != EINVAL) {
      ::close(fd_);
      fd_ = -1;
      errno = err;
      throw_errno("cannot lock", path_);
    }
    claim_by_content(flag, dir);  // no flock on this file system
  } else if (const std::string before = read_all(fd_); !before.empty()) {
    stale_ = parse_holder(before).text();  // its holder died without releasing it
  }
  write_self();
}

void DirLock::claim_by_content(const std::string& flag, const std::string& dir) {
  const std::string before = read_all(fd_);
  if (before.empty()) return;
  const Holder h = parse_holder(before);
  const bool mine = h.pid == ::getpid() && h.host == host_name();
  const bool here = h.host == host_name();
  if (!mine && (!here || alive_here(h.pid))) {
    ::close(fd_);
    fd_ = -1;
    throw Error(ErrorKind::Usage, "%s %s is in use by another run (%s; lock %s)%s ---> HINT: give this run its own %s%s", flag.c_str(),
                dir.c_str(), h.text().c_str(), path_.c_str(), here ? "" : " on another host, which cannot be checked from here", flag.c_str(),
                here ? "" : ", or delete the lock file if that run is gone");
  }
  if (!mine) stale_ = h.text();
}

void DirLock::write_self() {
  const std::string me = describe_self() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    errno = err;
    throw_errno("cannot write the lock file", path_);
  }
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  // Emptied while still held: a later run finds a free lock with no holder named.
  if (::ftruncate(fd_, 0) != 0) { /* the kernel still drops the lock below; the stale text is only a note */ }
  ::close(fd_);
}

}  // namespace zlm
