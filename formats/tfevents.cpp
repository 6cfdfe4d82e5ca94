#include "formats/tfevents.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/core/crc32c.h"
#include "common/core/error.h"
#include "common/core/log.h"
#include "common/core/mapped_file.h"
#include "common/core/files.h"
#include "common/core/output_file.h"

namespace zlm::formats {

namespace {

// Protobuf wire format: key = field << 3 | wire type (0 varint, 1 64-bit, 2 length-delimited, 5 32-bit).
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, int field, int wire) { put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire)); }
template <typename T>
void put_le(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // x86-64 and aarch64 are little-endian
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view s) {
  put_key(out, field, 2);
  put_varint(out, s.size());
  out.append(s);
}

std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, 1);
  put_le(e, wall_time);
  if (step != 0) {  // proto3: a zero scalar is not written
    put_key(e, 2, 0);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

// Reading the same subset.
struct Cursor {
  std::string_view s;
  size_t pos = 0;
  [[noreturn]] void bad(const char* what) const { throw Error(ErrorKind::Format, "event message: byte %zu: %s", pos, what); }
  bool done() const { return pos >= s.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= s.size()) bad("truncated varint");
      const auto b = static_cast<unsigned char>(s[pos++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    bad("varint longer than 10 bytes");
  }
  std::string_view take(size_t n) {
    if (n > s.size() - pos) bad("field runs past the end of the message");
    auto out = s.substr(pos, n);
    pos += n;
    return out;
  }
  template <typename T>
  T le() {
    return load_unaligned<T>(reinterpret_cast<const uint8_t*>(take(sizeof(T)).data()));
  }
  void skip(int wire) {
    switch (wire) {
      case 0: varint(); break;
      case 1: take(8); break;
      case 2: take(varint()); break;
      case 5: take(4); break;
      default: bad("unsupported wire type");
    }
  }
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t tfrecord_masked_crc(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string tfrecord(std::string_view payload) {
  std::string r;
  r.reserve(payload.size() + 16);
  put_le(r, static_cast<uint64_t>(payload.size()));
  put_le(r, tfrecord_masked_crc(r.data(), 8));
  r.append(payload);
  put_le(r, tfrecord_masked_crc(payload.data(), payload.size()));
  return r;
}

std::string event_file_version(double wall_time) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string event_scalar(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;
  put_bytes(v, 1, tag);
  put_key(v, 2, 5);
  put_le(v, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

Event decode_event(std::string_view payload) {
  Event ev;
  Cursor c{payload};
  while (!c.done()) {
    const uint64_t key = c.varint();
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (field == 1 && wire == 1) {
      ev.wall_time = c.le<double>();
    } else if (field == 2 && wire == 0) {
      ev.step = static_cast<int64_t>(c.varint());
    } else if (field == 3 && wire == 2) {
      ev.file_version = std::string(c.take(c.varint()));
    } else if (field == 5 && wire == 2) {
      Cursor summary{c.take(c.varint())};
      while (!summary.done()) {
        const uint64_t k = summary.varint();
        if (k >> 3 != 1 || (k & 7) != 2) {
          summary.skip(static_cast<int>(k & 7));
          continue;
        }
        Cursor value{summary.take(summary.varint())};
        std::string tag;
        float simple = 0;
        bool has_simple = false;
        while (!value.done()) {
          const uint64_t vk = value.varint();
          if (vk == (1u << 3 | 2)) tag = std::string(value.take(value.varint()));
          else if (vk == (2u << 3 | 5)) simple = value.le<float>(), has_simple = true;
          else value.skip(static_cast<int>(vk & 7));
        }
        if (has_simple) ev.scalars.emplace_back(std::move(tag), simple);
      }
    } else {
      c.skip(wire);
    }
  }
  return ev;
}

TfRecordScan read_tfrecords(const std::string& path) {
  const std::string data = read_file(path);
  TfRecordScan scan;
  size_t pos = 0;
  while (pos < data.size()) {
    if (data.size() - pos < 12) {
      scan.problem = strprintf("%s: byte %zu: truncated record header (%zu bytes left)", path.c_str(), pos, data.size() - pos);
      break;
    }
    uint64_t len;
    uint32_t len_crc;
    std::memcpy(&len, data.data() + pos, 8);
    std::memcpy(&len_crc, data.data() + pos + 8, 4);
    if (len_crc != tfrecord_masked_crc(data.data() + pos, 8)) {
      scan.problem = strprintf("%s: byte %zu: record length checksum mismatch", path.c_str(), pos);
      break;
    }
    if (len > data.size() - pos - 12 || data.size() - pos - 12 - len < 4) {
      scan.problem = strprintf("%s: byte %zu: truncated record (%llu payload bytes announced, %zu bytes left)", path.c_str(), pos,
                               (unsigned long long)len, data.size() - pos - 12);
      break;
    }
    uint32_t crc;
    std::memcpy(&crc, data.data() + pos + 12 + len, 4);
    if (crc != tfrecord_masked_crc(data.data() + pos + 12, len)) {
      scan.problem = strprintf("%s: byte %zu: record payload checksum mismatch", path.c_str(), pos);
      break;
    }
    scan.payloads.emplace_back(data, pos + 12, len);
    pos += 16 + len;
    scan.valid_bytes = pos;
  }
  return scan;
}

EventFileWriter::EventFileWriter(const std::string& dir, size_t queue_size) : queue_size_(queue_size ? queue_size : 1) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(ErrorKind::Io, "cannot create the TensorBoard directory '%s': %s", dir.c_str(), ec.message().c_str());
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const double wall = now_seconds();
  const auto secs = static_cast<long long>(wall);
  for (int n = 0; fd_ < 0; ++n) {  // a new name, never an existing file (O_EXCL)
    path_ = (std::filesystem::path(dir) / strprintf("events.out.tfevents.%010lld.%s.%d.%d", secs, host, (int)getpid(), n)).string();
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) throw_errno("cannot create the TensorBoard event file", path_);
  }
  pending_ = tfrecord(event_file_version(wall));
  flush();
}

EventFileWriter::~EventFileWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    ZLM_LOG_WRN("%s", e.what());
  }
}

void EventFileWriter::add_scalar(std::string_view tag, float value, int64_t step) { add_scalar(tag, value, step, now_seconds()); }

void EventFileWriter::add_scalar(std::string_view tag, float value, int64_t step, double wall_time) {
  if (fd_ < 0) throw Error(ErrorKind::Internal, "%s: add_scalar after close", path_.c_str());
  pending_ += tfrecord(event_scalar(wall_time, step, tag, value));
  if (++queued_ >= queue_size_) flush();
}

void EventFileWriter::flush() {
  if (fd_ < 0 || pending_.empty()) return;
  std::string out;
  out.swap(pending_);  // dropped on error: a retry would duplicate records that did reach the file
  queued_ = 0;
  write_all(fd_, out.data(), out.size(), "cannot write TensorBoard events to", path_);
}

void EventFileWriter::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  flush();
  fd_ = -1;
  if (::close(fd) != 0) throw_errno("cannot close the TensorBoard event file", path_);
}

}  // namespace zlm::formats
