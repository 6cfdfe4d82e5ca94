// Streaming line reader over plain, gzip (.gz), xz (.xz) and zstd (.zst) files.
//
//   zlm::LineReader reader("shard-0001.jsonl.zst");
//   std::string_view line;
//   while (reader.next(line)) { ... reader.line_number() ... }
//
// Compression is detected from the file's magic bytes (not only the name), so a
// mislabelled file still reads; "-" reads standard input. Lines end as in
// Python's universal newlines (what Megatron's scripts read with): at "\n",
// "\r\n" or a lone "\r", which are not part of the line; a final line without
// one is still returned. A UTF-8 byte order mark at the start of the stream is
// skipped (Python's utf-8-sig) and reported by had_bom(). The returned view
// stays valid until the next call to next() and is followed by at least
// kLinePadding readable bytes (for simdjson).
// Memory: a 4 MiB buffer plus the longest line. Errors (unreadable file,
// corrupt compressed stream) throw zlm::Error naming the file and the
// compressed byte offset. Not thread-safe; one reader per file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/core/default_init.h"

namespace zlm {

enum class Compression { None, Gzip, Xz, Zstd };
const char* compression_name(Compression c);

// Reads raw (decompressed) bytes; implemented per compression format.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Fills up to n bytes; returns 0 at end of stream.
  virtual size_t read(char* buf, size_t n) = 0;
  // Bytes consumed from the underlying (compressed) file so far.
  virtual uint64_t compressed_offset() const = 0;
};

std::unique_ptr<ByteSource> open_byte_source(const std::string& path, Compression* detected = nullptr);

class LineReader {
 public:
  static constexpr size_t kLinePadding = 64;
  explicit LineReader(const std::string& path, size_t buffer_bytes = 256 << 10);
  ~LineReader();

  bool next(std::string_view& line);
  // 1-based number of the line last returned.
  uint64_t line_number() const { return line_number_; }
  // Decompressed bytes returned so far, newlines included.
  uint64_t bytes_read() const { return bytes_read_; }
  // Bytes consumed from the file itself (for progress against the file size).
  uint64_t compressed_offset() const { return source_->compressed_offset(); }
  Compression compression() const { return compression_; }
  const std::string& path() const { return path_; }
  // Whether the stream opened with a UTF-8 byte order mark (skipped).
  bool had_bom() const { return bom_; }

 private:
  bool fill();
  bool take_line(size_t end, size_t terminator, std::string_view& line);
  std::string path_;
  Compression compression_ = Compression::None;  // before source_: set by its initializer
  std::unique_ptr<ByteSource> source_;
  std::vector<char, DefaultInitAllocator<char>> buf_;  // not zeroed: every byte read is written first
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false, bom_ = false;
  uint64_t line_number_ = 0, bytes_read_ = 0;
};

}  // namespace zlm
