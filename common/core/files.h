// Whole-file helpers: read a file, its size, remove a tree. (Writing goes
// through OutputFile, common/core/output_file.h, which never leaves a
// half-written file under the final name.)
//
//   std::string text = zlm::read_file("vocab.json");   // zlm::Error(Io) naming the path
#pragma once

#include <cstdint>
#include <string>

namespace zlm {

// Removes a file or a directory tree (like `rm -rf`, without following
// symbolic links); a missing path is not an error. POSIX nftw, not
// std::filesystem::remove_all: in the trainer that symbol resolves to the copy
// inside libtorch.so, which crashes on non-empty directories. Throws Error(Io).
void remove_tree(const std::string& path);

// Reads a whole file; throws Error(Io) naming the path.
std::string read_file(const std::string& path);

// Size of a file in bytes; throws Error(Io) naming the path.
uint64_t file_size(const std::string& path);

// Files this process may hold open at once: its soft limit (RLIMIT_NOFILE),
// first raised to the hard limit (as Go's runtime does at start; the soft limit
// is often 1024 while the hard one is far higher).
uint64_t open_file_limit();
// Of those, how many a tool may keep open for its own buckets or sorted runs:
// the limit less 64 for the rest of the process, at least 2.
uint64_t usable_open_files();

}  // namespace zlm
