// The files between near_dedup's stages (docs/design.md, "Sharded
// near-duplicate removal"): fixed-size records in a versioned container, so
// that a truncated, damaged or foreign file is refused with its name, never
// merged silently.
//
// Layout (integers little-endian):
//   offset 0   8 bytes  magic "ZLMND001"
//   8          u32      kind (StageFileKind)
//   12         u32      bytes per record
//   16         u64      settings fingerprint (XXH64 of the settings that made it)
//   24         u64      subject (what the file is about: XXH64 of the shard's path and index, or the band)
//   32         records
//   footer     u64 record count, u64 XXH64 (seed 0) of every byte before the footer, 8 bytes "ZLMNDOK!"
//
//   StageFileWriter w(path, StageFileKind::Pairs, sizeof(PairRecord), settings, subject);
//   w.add(&record);  ...  w.commit();                      // atomic (zlm::OutputFile)
//   StageFileReader r(path, StageFileKind::Pairs, sizeof(PairRecord), settings, subject, /*verify_checksum=*/true);
//   PairRecord p = r.get<PairRecord>(i);
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "common/core/mapped_file.h"

namespace zlm::near_dedup {

inline constexpr uint64_t kStageFileHeaderBytes = 32;  // record i starts at 32 + i x record bytes

enum class StageFileKind : uint32_t { Docs = 1, Texts = 2, BandRun = 3, Pairs = 4, Removals = 5, Candidates = 6 };
const char* stage_file_kind_name(StageFileKind kind);

class StageFileWriter {
 public:
  StageFileWriter(const std::string& path, StageFileKind kind, uint32_t record_bytes, uint64_t settings, uint64_t subject);
  ~StageFileWriter();
  StageFileWriter(const StageFileWriter&) = delete;
  StageFileWriter& operator=(const StageFileWriter&) = delete;
  void add(const void* record);                  // one record of record_bytes
  void add_bytes(const void* data, size_t n);    // n / record_bytes records (n a multiple)
  uint64_t count() const { return count_; }
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint32_t record_bytes_;
  uint64_t count_ = 0;
};

class StageFileReader {
 public:
  // Checks magic, kind, record size, settings, subject and the length; the
  // checksum too when verify_checksum (one pass over the file). Errors name
  // the file and what differs (Error(Format), or Error(Usage) for settings).
  StageFileReader(const std::string& path, StageFileKind kind, uint32_t record_bytes, uint64_t settings, uint64_t subject,
                  bool verify_checksum);
  uint64_t count() const { return count_; }
  const uint8_t* record(uint64_t i) const { return records_ + i * record_bytes_; }
  template <typename T>
  T get(uint64_t i) const {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, record(i), sizeof v);
    return v;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  MappedFile file_;
  const uint8_t* records_ = nullptr;
  uint32_t record_bytes_;
  uint64_t count_ = 0;
};

}  // namespace zlm::near_dedup
