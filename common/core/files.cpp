#include "common/core/files.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/core/error.h"

namespace zlm {

void remove_tree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw_errno("cannot remove", path);
  }
  auto remove_one = [](const char* p, const struct stat*, int type, struct FTW*) -> int {
    return (type == FTW_DP ? ::rmdir(p) : ::unlink(p)) == 0 || errno == ENOENT ? 0 : -1;
  };
  if (::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0) throw_errno("cannot remove", path);
}

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("cannot open", path);
  // Read straight into the string, sized by fstat for a regular file (one more byte, so that
  // the end is seen without growing); pipes and /proc files grow it as they go.
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  std::string out(regular ? static_cast<size_t>(st.st_size) + 1 : size_t{1} << 16, '\0');
  size_t len = 0;
  for (;;) {
    if (len == out.size()) out.resize(out.size() * 2);
    ssize_t n = ::read(fd, out.data() + len, out.size() - len);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      throw_errno("cannot read", path);
    }
    if (n == 0) break;
    len += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(len);
  return out;
}

uint64_t open_file_limit() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 1024;
  if (lim.rlim_cur != lim.rlim_max) {
    struct rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? uint64_t{1} << 20 : static_cast<uint64_t>(lim.rlim_cur);
}

uint64_t usable_open_files() { return std::max<uint64_t>(open_file_limit(), 66) - 64; }

uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw_errno("cannot stat", path);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace zlm
