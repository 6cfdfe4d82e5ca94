#include "tools/near_dedup/stage_file.h"

#include <xxhash.h>

#include "common/core/error.h"
#include "common/core/output_file.h"

namespace zlm::near_dedup {

namespace {
constexpr char kMagic[8] = {'Z', 'L', 'M', 'N', 'D', '0', '0', '1'};
constexpr char kEnd[8] = {'Z', 'L', 'M', 'N', 'D', 'O', 'K', '!'};
constexpr uint64_t kHeader = kStageFileHeaderBytes, kFooter = 24;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::Format, "%s: %s ---> HINT: remove it and re-run the stage that writes it (its task's marker under done/ too)",
              path.c_str(), what.c_str());
}
}  // namespace

const char* stage_file_kind_name(StageFileKind kind) {
  switch (kind) {
    case StageFileKind::Docs: return "document table";
    case StageFileKind::Texts: return "text store";
    case StageFileKind::BandRun: return "band run";
    case StageFileKind::Pairs: return "verified pairs";
    case StageFileKind::Removals: return "removal list";
    case StageFileKind::Candidates: return "candidate pairs";
  }
  return "?";
}

struct StageFileWriter::Impl {
  OutputFile out;
  XXH64_state_t* state = XXH64_createState();
  explicit Impl(const std::string& path) : out(path) { XXH64_reset(state, 0); }
  ~Impl() { XXH64_freeState(state); }
  void put(const void* p, size_t n) {
    out.write(p, n);
    XXH64_update(state, p, n);
  }
};

StageFileWriter::StageFileWriter(const std::string& path, StageFileKind kind, uint32_t record_bytes, uint64_t settings, uint64_t subject)
    : impl_(std::make_unique<Impl>(path)), record_bytes_(record_bytes) {
  const uint32_t k = static_cast<uint32_t>(kind);
  impl_->put(kMagic, 8);
  impl_->put(&k, 4);
  impl_->put(&record_bytes, 4);
  impl_->put(&settings, 8);
  impl_->put(&subject, 8);
}

StageFileWriter::~StageFileWriter() = default;

void StageFileWriter::add(const void* record) {
  impl_->put(record, record_bytes_);
  ++count_;
}

void StageFileWriter::add_bytes(const void* data, size_t n) {
  if (n % record_bytes_ != 0) throw Error(ErrorKind::Internal, "%zu bytes is no whole number of %u-byte records", n, record_bytes_);
  impl_->put(data, n);
  count_ += n / record_bytes_;
}

void StageFileWriter::commit() {
  const uint64_t sum = XXH64_digest(impl_->state);
  impl_->out.write(&count_, 8);
  impl_->out.write(&sum, 8);
  impl_->out.write(kEnd, 8);
  impl_->out.commit();
}

StageFileReader::StageFileReader(const std::string& path, StageFileKind kind, uint32_t record_bytes, uint64_t settings,
                                 uint64_t subject, bool verify_checksum)
    : path_(path), file_(path, "cannot open stage file"), record_bytes_(record_bytes) {
  const uint8_t* d = file_.data();
  const uint64_t size = file_.size();
  if (size < kHeader + kFooter) bad(path, strprintf("truncated: %lu bytes", (unsigned long)size));
  if (std::memcmp(d, kMagic, 8) != 0) bad(path, "byte 0: not a near_dedup stage file (magic \"ZLMND001\" expected)");
  if (std::memcmp(d + size - 8, kEnd, 8) != 0) bad(path, "no end marker: the file is truncated (its task was killed mid-write?)");
  const uint32_t k = load_unaligned<uint32_t>(d + 8), rb = load_unaligned<uint32_t>(d + 12);
  if (k != static_cast<uint32_t>(kind))
    bad(path, strprintf("byte 8: a file of kind %u where a %s (kind %u) belongs", k, stage_file_kind_name(kind), static_cast<uint32_t>(kind)));
  if (rb != record_bytes) bad(path, strprintf("byte 12: %u-byte records, expected %u", rb, record_bytes));
  if (load_unaligned<uint64_t>(d + 16) != settings)
    throw Error(ErrorKind::Usage, "%s was made with other settings (bands, seeds, thresholds, keys or shard list) than this run's "
                "---> HINT: use the same flags in every stage, or a fresh --work directory", path.c_str());
  if (load_unaligned<uint64_t>(d + 24) != subject)
    throw Error(ErrorKind::Usage, "%s belongs to another shard or band than the one this task reads ---> HINT: the shard list changed "
                "since the signatures stage: use a fresh --work directory", path.c_str());
  count_ = load_unaligned<uint64_t>(d + size - kFooter);
  if (record_bytes == 0 || count_ > size / record_bytes || kHeader + count_ * record_bytes + kFooter != size)
    bad(path, strprintf("size %lu does not hold the %lu records its footer counts", (unsigned long)size, (unsigned long)count_));
  if (verify_checksum && XXH64(d, size - kFooter, 0) != load_unaligned<uint64_t>(d + size - 16))
    bad(path, "checksum mismatch: the file is damaged");
  records_ = d + kHeader;
}

}  // namespace zlm::near_dedup
