// Output files that never appear half-written under their final name.
//
//   zlm::OutputFile out("corpus_text_document.bin");   // writes "<path>.tmp.<pid>"
//   out.write(data, n);
//   out.commit();        // flush, fsync, rename to the final name
//
// The path "-" is standard output: written as a stream (no temporary; what was
// written before an error stays written), for tools whose output a pipe may take.
// Destroying an OutputFile that was not committed removes the temporary file.
// A SIGINT/SIGTERM/SIGHUP handler (installed on first use) unlinks every
// temporary file still open and then lets the signal kill the process, so an
// interrupted run leaves neither a partial file under the final name nor
// temporary debris. Writes are buffered (1 MiB); errors (disk full) throw
// zlm::Error(Io) naming the path. Not thread-safe: one writer per file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zlm {

class OutputFile {
 public:
  explicit OutputFile(std::string path, size_t buffer_bytes = 1 << 20);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t n) {
    if (buffer_.size() + n <= buffer_.capacity() && fd_ >= 0) {  // fast path: no flush needed
      buffer_.insert(buffer_.end(), static_cast<const char*>(data), static_cast<const char*>(data) + n);
      bytes_written_ += n;
      return;
    }
    write_slow(data, n);
  }
  void write(std::string_view s) { write(s.data(), s.size()); }
  void put(char c) { write(&c, 1); }
  // Bytes written so far (buffered or not).
  uint64_t bytes_written() const { return bytes_written_; }
  void commit();  // finish() then publish()
  // Two steps, for outputs that must appear together (a .bin and its .idx):
  // finish() writes, syncs and closes the temporary (on failure it is removed);
  // publish() renames it into place.
  void finish();
  void publish();
  // Removes the temporary file; the final name is left untouched.
  void abandon();
  // For scratch files this process reads back and removes (sorted runs,
  // temporary buckets): finish() does not fsync, since a crash loses them anyway.
  void skip_sync() { sync_ = false; }

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  void flush_buffer();
  void write_slow(const void* data, size_t n);
  void raw_write(const char* p, size_t n);
  std::string path_, temp_path_;
  int fd_ = -1;
  bool finished_ = false;  // finish() done, publish() not yet
  int temp_slot_ = -1;     // the temporary's entry in the signal handler's table
  bool sync_ = true;
  std::vector<char> buffer_;
  uint64_t bytes_written_ = 0;
};

// Refuses, as a usage error naming both flags, two outputs of one run on the
// same file and an output on one of its inputs (paths compared after resolving
// symbolic links and "..": the same file under two spellings). Empty paths are
// ignored; "-" is standard output among outputs (two of them clash) and
// standard input among inputs.
struct NamedPath {
  std::string flag, path;
};
void check_distinct_paths(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs = {});

// Writes a whole small file atomically (temp + rename).
void write_file_atomic(const std::string& path, std::string_view content);

// Writes all n bytes to fd (retrying short writes and EINTR); a failure throws
// Error(Io) "<what> '<path>': <reason>".
void write_all(int fd, const void* data, size_t n, const char* what, const std::string& path);

}  // namespace zlm
