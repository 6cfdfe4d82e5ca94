// One writer per directory: a run's claim on the directory it writes
// (pretrain_gpt's --save), so that a second run started on it by mistake is
// refused instead of interleaving its files with the first's.
//
//   zlm::DirLock lock("checkpoints", "--save");   // held until `lock` is destroyed
//
// The claim is DIR/zerolm.lock, locked with flock(2) for the holder's lifetime
// (the kernel drops it when the process dies, however it dies) and holding
// "pid host start-time" for the message a second run gets. A clean release
// empties the file; a file that still names a holder when the lock is free was
// left by a process that died, which is reported (stale_note()) and taken over.
// On file systems without flock (some Lustre and NFS mounts) the file's content
// decides: a live process on this host, or any process on another host (which
// cannot be checked from here), keeps the directory; a dead one on this host
// is stale.
#pragma once

#include <string>

namespace zlm {

class DirLock {
 public:
  // Creates `dir` when missing. Throws Error(Usage) when another process holds
  // it (naming its pid, host and start), or when `dir` exists and is not a
  // directory (naming `flag`, the option that gave it); Error(Io) otherwise.
  DirLock(const std::string& dir, const std::string& flag);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  // Non-empty when a stale claim of a dead process was taken over: what it said.
  const std::string& stale_note() const { return stale_; }
  const std::string& path() const { return path_; }

  // The lock file's content for this process: "pid host start-time".
  static std::string describe_self();

 private:
  void claim_by_content(const std::string& flag, const std::string& dir);
  void write_self();

  std::string path_, stale_;
  int fd_ = -1;
};

}  // namespace zlm
