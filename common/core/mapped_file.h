// A whole file mapped read-only (mmap), unmapped on destruction.
//
//   zlm::MappedFile f("data.idx");           // throws zlm::Error(Io) naming the file
//   const uint8_t* p = f.data(); uint64_t n = f.size();
//
// An empty file maps to data() == nullptr, size() == 0. Movable, not copyable;
// the mapping is immutable and safe to read from several threads.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace zlm {

// A T stored at any byte offset of a mapping (the formats pack 4- and 8-byte
// fields at unaligned offsets; memcpy compiles to one load). Every on-disk
// format here is little-endian, as the hosts we build for.
static_assert(std::endian::native == std::endian::little, "zerolm's file formats are read on little-endian hosts only");
template <typename T>
T load_unaligned(const uint8_t* p) {
  static_assert(std::is_trivially_copyable_v<T>);
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

class MappedFile {
 public:
  MappedFile() = default;
  // `what` starts the error message ("cannot open fingerprint file '<path>': ...").
  explicit MappedFile(const std::string& path, const char* what = "cannot open");
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  void release();
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace zlm
