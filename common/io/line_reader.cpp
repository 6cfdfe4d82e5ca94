#include "common/io/line_reader.h"

#include <fcntl.h>
#include <lzma.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>

#include "common/core/error.h"

namespace zlm {

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::None: return "plain";
    case Compression::Gzip: return "gzip";
    case Compression::Xz: return "xz";
    case Compression::Zstd: return "zstd";
  }
  return "?";
}

namespace {

constexpr size_t kInChunk = 1 << 20;

// Unbuffered file descriptor reader shared by all formats.
class FdFile {
 public:
  explicit FdFile(const std::string& path) : path_(path) {
    if (path == "-") {
      fd_ = STDIN_FILENO;
      return;
    }
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw_errno("cannot open input", path);
#ifdef POSIX_FADV_SEQUENTIAL
    posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  }
  ~FdFile() {
    if (fd_ > STDIN_FILENO) ::close(fd_);
  }
  size_t read(char* buf, size_t n) {
    for (;;) {
      ssize_t got = ::read(fd_, buf, n);
      if (got >= 0) {
        offset_ += static_cast<uint64_t>(got);
        return static_cast<size_t>(got);
      }
      if (errno != EINTR) throw_errno("cannot read input", path_);
    }
  }
  uint64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t offset_ = 0;
};

// Bytes peeked for magic detection are replayed before the rest of the file.
class PlainSource : public ByteSource {
 public:
  PlainSource(std::unique_ptr<FdFile> file, std::string prefix) : file_(std::move(file)), prefix_(std::move(prefix)) {}
  size_t read(char* buf, size_t n) override {
    if (pos_ < prefix_.size()) {
      size_t k = std::min(n, prefix_.size() - pos_);
      std::memcpy(buf, prefix_.data() + pos_, k);
      pos_ += k;
      return k;
    }
    return file_->read(buf, n);
  }
  uint64_t compressed_offset() const override { return file_->offset(); }

 private:
  std::unique_ptr<FdFile> file_;
  std::string prefix_;
  size_t pos_ = 0;
};

// Base for the streaming decompressors: owns the compressed input buffer.
class CompressedSource : public ByteSource {
 public:
  CompressedSource(std::unique_ptr<FdFile> file, std::string prefix)
      : file_(std::move(file)), in_(kInChunk), in_len_(prefix.size()) {
    std::memcpy(in_.data(), prefix.data(), prefix.size());
  }
  uint64_t compressed_offset() const override { return file_->offset() - (in_len_ - in_pos_); }

 protected:
  // Ensures compressed bytes are available; returns false at end of file.
  bool refill() {
    if (in_pos_ < in_len_) return true;
    in_len_ = file_->read(in_.data(), in_.size());
    in_pos_ = 0;
    return in_len_ > 0;
  }
  [[noreturn]] void corrupt(const char* what) const {
    throw Error(ErrorKind::Format, "%s: corrupt compressed data near byte %lu: %s", file_->path().c_str(),
                static_cast<unsigned long>(compressed_offset()), what);
  }
  std::unique_ptr<FdFile> file_;
  std::vector<char> in_;
  size_t in_len_ = 0, in_pos_ = 0;
};

class GzipSource : public CompressedSource {
 public:
  using CompressedSource::CompressedSource;
  ~GzipSource() override {
    if (init_) inflateEnd(&z_);
  }
  size_t read(char* buf, size_t n) override {
    if (!init_) {
      std::memset(&z_, 0, sizeof z_);
      if (inflateInit2(&z_, 15 + 32) != Z_OK) corrupt("zlib init failed");
      init_ = true;
    }
    while (!done_) {
      if (!refill()) {
        if (!stream_end_) corrupt("unexpected end of gzip stream");
        done_ = true;
        break;
      }
      if (stream_end_) {  // concatenated gzip members (as `cat a.gz b.gz` makes)
        inflateReset(&z_);
        stream_end_ = false;
      }
      z_.next_in = reinterpret_cast<Bytef*>(in_.data() + in_pos_);
      z_.avail_in = static_cast<uInt>(in_len_ - in_pos_);
      z_.next_out = reinterpret_cast<Bytef*>(buf);
      z_.avail_out = static_cast<uInt>(n);
      int rc = inflate(&z_, Z_NO_FLUSH);
      in_pos_ = in_len_ - z_.avail_in;
      if (rc == Z_STREAM_END) stream_end_ = true;
      else if (rc != Z_OK && rc != Z_BUF_ERROR) corrupt(z_.msg ? z_.msg : "inflate failed");
      size_t produced = n - z_.avail_out;
      if (produced > 0) return produced;
    }
    return 0;
  }

 private:
  z_stream z_{};
  bool init_ = false, stream_end_ = false, done_ = false;
};

class XzSource : public CompressedSource {
 public:
  using CompressedSource::CompressedSource;
  ~XzSource() override { lzma_end(&s_); }
  size_t read(char* buf, size_t n) override {
    if (!init_) {
      if (lzma_stream_decoder(&s_, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK) corrupt("lzma init failed");
      init_ = true;
    }
    while (!done_) {
      bool have = refill();
      s_.next_in = reinterpret_cast<const uint8_t*>(in_.data() + in_pos_);
      s_.avail_in = in_len_ - in_pos_;
      s_.next_out = reinterpret_cast<uint8_t*>(buf);
      s_.avail_out = n;
      lzma_ret rc = lzma_code(&s_, have ? LZMA_RUN : LZMA_FINISH);
      in_pos_ = in_len_ - s_.avail_in;
      if (rc == LZMA_STREAM_END) done_ = true;
      else if (rc != LZMA_OK && rc != LZMA_BUF_ERROR) corrupt("xz decoding failed");
      else if (!have && rc == LZMA_BUF_ERROR) corrupt("unexpected end of xz stream");
      size_t produced = n - s_.avail_out;
      if (produced > 0) return produced;
    }
    return 0;
  }

 private:
  lzma_stream s_ = LZMA_STREAM_INIT;
  bool init_ = false, done_ = false;
};

class ZstdSource : public CompressedSource {
 public:
  using CompressedSource::CompressedSource;
  ~ZstdSource() override { ZSTD_freeDStream(ds_); }
  size_t read(char* buf, size_t n) override {
    if (!ds_) ds_ = ZSTD_createDStream();
    while (true) {
      if (!refill()) {
        if (!frame_done_) corrupt("unexpected end of zstd stream");
        return 0;
      }
      ZSTD_inBuffer in{in_.data(), in_len_, in_pos_};
      ZSTD_outBuffer out{buf, n, 0};
      size_t rc = ZSTD_decompressStream(ds_, &out, &in);
      in_pos_ = in.pos;
      if (ZSTD_isError(rc)) corrupt(ZSTD_getErrorName(rc));
      frame_done_ = rc == 0;
      if (out.pos > 0) return out.pos;
    }
  }

 private:
  ZSTD_DStream* ds_ = nullptr;
  bool frame_done_ = true;
};

}  // namespace

std::unique_ptr<ByteSource> open_byte_source(const std::string& path, Compression* detected) {
  auto file = std::make_unique<FdFile>(path);
  std::string prefix(6, '\0');
  size_t got = 0;
  while (got < prefix.size()) {
    size_t k = file->read(prefix.data() + got, prefix.size() - got);
    if (k == 0) break;
    got += k;
  }
  prefix.resize(got);
  auto starts = [&](std::string_view magic) { return prefix.size() >= magic.size() && prefix.compare(0, magic.size(), magic) == 0; };
  Compression c = Compression::None;
  if (starts("\x1f\x8b")) c = Compression::Gzip;
  else if (starts(std::string_view("\xfd" "7zXZ\0", 6))) c = Compression::Xz;
  else if (starts("\x28\xb5\x2f\xfd")) c = Compression::Zstd;
  if (detected) *detected = c;
  switch (c) {
    case Compression::Gzip: return std::make_unique<GzipSource>(std::move(file), prefix);
    case Compression::Xz: return std::make_unique<XzSource>(std::move(file), prefix);
    case Compression::Zstd: return std::make_unique<ZstdSource>(std::move(file), prefix);
    case Compression::None: break;
  }
  return std::make_unique<PlainSource>(std::move(file), prefix);
}

LineReader::LineReader(const std::string& path, size_t buffer_bytes)
    : path_(path), source_(open_byte_source(path, &compression_)), buf_(buffer_bytes + kLinePadding) {}

LineReader::~LineReader() = default;

bool LineReader::fill() {
  if (eof_) return false;
  // Move the unfinished tail to the front; grow when one line fills the buffer.
  size_t tail = end_ - begin_;
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, tail);
    begin_ = 0;
    end_ = tail;
  }
  const size_t room = buf_.size() - kLinePadding - end_;
  if (room == 0 || room < (buf_.size() - kLinePadding) / 4) buf_.resize(buf_.size() * 2);  // a full buffer would read 0 bytes: no "end"
  size_t got = source_->read(buf_.data() + end_, buf_.size() - kLinePadding - end_);
  if (got == 0) eof_ = true;
  end_ += got;
  return got > 0;
}

// Python's universal newlines (what Megatron's scripts read with): a line ends
// at "\n", "\r\n" or a lone "\r". The end is found with memchr for '\n' and
// then for '\r' before it, so a file without '\r' is scanned once.
bool LineReader::next(std::string_view& line) {
  size_t scan_from = begin_;
  for (;;) {
    const char* start = buf_.data() + scan_from;
    const char* nl = static_cast<const char*>(std::memchr(start, '\n', end_ - scan_from));
    const size_t span = (nl ? static_cast<size_t>(nl - start) : end_ - scan_from);
    const char* cr = static_cast<const char*>(std::memchr(start, '\r', span));
    if (cr && static_cast<size_t>(cr - buf_.data()) + 1 == end_ && !eof_) {
      // A '\r' at the end of what is buffered: the next byte decides whether "\r\n" ends the line.
      const size_t scanned = static_cast<size_t>(cr - buf_.data()) - begin_;
      fill();  // more bytes, or the end of the stream (eof_); either way the buffer may have moved
      scan_from = begin_ + scanned;
      continue;
    }
    if (cr || nl) {
      const size_t pos = static_cast<size_t>((cr ? cr : nl) - buf_.data());
      const size_t terminator = cr && pos + 1 < end_ && buf_[pos + 1] == '\n' ? 2 : 1;
      return take_line(pos, terminator, line);
    }
    const size_t scanned = end_ - begin_;
    if (!fill()) {
      if (end_ > begin_) return take_line(end_, 0, line);
      return false;
    }
    scan_from = begin_ + scanned;
  }
}

// The line [begin_, end) and its terminator's bytes; a UTF-8 byte order mark
// opening the stream is not part of the first line (Python's utf-8-sig).
bool LineReader::take_line(size_t end, size_t terminator, std::string_view& line) {
  size_t from = begin_;
  if (line_number_ == 0 && end - from >= 3 && std::memcmp(buf_.data() + from, "\xEF\xBB\xBF", 3) == 0) {
    from += 3;
    bom_ = true;
  }
  line = std::string_view(buf_.data() + from, end - from);
  bytes_read_ += end - begin_ + terminator;
  begin_ = end + terminator;
  ++line_number_;
  return true;
}

}  // namespace zlm
