#include "tools/find_duplicates/signature_file.h"

#include <xxhash.h>

#include <cstring>
#include <vector>

#include "common/core/error.h"
#include "common/core/output_file.h"

namespace zlm::formats {

namespace {
constexpr char kMagic[8] = {'Z', 'L', 'M', 'S', 'I', 'G', '0', '1'};
constexpr char kEnd[8] = {'Z', 'L', 'M', 'S', 'I', 'G', 'O', 'K'};
constexpr uint64_t kHeader = 48, kFooter = 24;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::Format, "%s: %s ---> HINT: the fingerprint file is damaged or was not written by find_duplicates",
              path.c_str(), what.c_str());
}
}  // namespace

SignatureFileReader::SignatureFileReader(const std::string& path)
    : path_(path), file_(path, "cannot open fingerprint file"), data_(file_.data()), size_(file_.size()) {
  {
    if (size_ < kHeader + kFooter) bad(path, strprintf("truncated: %lu bytes", (unsigned long)size_));
    if (std::memcmp(data_, kMagic, 8) != 0) bad(path, "byte 0: wrong magic (expected \"ZLMSIG01\")");
    uint32_t version = load_unaligned<uint32_t>(data_ + 8);
    if (version != 1) bad(path, strprintf("byte 8: unknown version %u", version));
    params_.num_seeds = load_unaligned<uint32_t>(data_ + 12);
    params_.char_ngram = load_unaligned<uint32_t>(data_ + 16);
    uint32_t scheme = load_unaligned<uint32_t>(data_ + 20);
    if (scheme != kSignatureHashScheme) bad(path, strprintf("byte 20: unknown hash scheme %u", scheme));
    params_.seed = load_unaligned<uint64_t>(data_ + 24);
    n_ = load_unaligned<uint64_t>(data_ + 32);
    uint64_t id_bytes = load_unaligned<uint64_t>(data_ + 40);
    const uint8_t* footer = data_ + size_ - kFooter;
    if (std::memcmp(footer + 16, kEnd, 8) != 0) bad(path, "missing end marker: the file is truncated");
    uint64_t text_bytes = load_unaligned<uint64_t>(footer);
    // Sizes, computed with overflow guards.
    if (params_.num_seeds == 0 || n_ > size_ || id_bytes > size_ || text_bytes > size_)
      bad(path, "header counts do not fit the file size");
    uint64_t want = kHeader + 4 * n_ * params_.num_seeds + 8 * (n_ + 1) + id_bytes + text_bytes + 8 * (n_ + 1) + kFooter;
    if (want != size_) bad(path, strprintf("size %lu, expected %lu from the header", (unsigned long)size_, (unsigned long)want));
    uint64_t sum = XXH64(data_, size_ - kFooter, 0);
    if (sum != load_unaligned<uint64_t>(footer + 8)) bad(path, "checksum mismatch: the file is damaged");
    sigs_ = data_ + kHeader;
    id_offsets_ = sigs_ + 4 * n_ * params_.num_seeds;
    ids_ = id_offsets_ + 8 * (n_ + 1);
    texts_ = ids_ + id_bytes;
    text_offsets_ = texts_ + text_bytes;
    for (uint64_t i = 0; i < n_; ++i) {
      if (offset_at(id_offsets_, i) > offset_at(id_offsets_, i + 1) || offset_at(text_offsets_, i) > offset_at(text_offsets_, i + 1))
        bad(path, strprintf("offsets of document %lu are not monotonic", (unsigned long)i));
    }
    if (offset_at(id_offsets_, n_) != id_bytes || offset_at(text_offsets_, n_) != text_bytes)
      bad(path, "offset tables do not end at the section sizes");
  }
}

SignatureFileReader::~SignatureFileReader() = default;

uint64_t SignatureFileReader::offset_at(const uint8_t* table, uint64_t i) const { return load_unaligned<uint64_t>(table + 8 * i); }

void SignatureFileReader::check_params(const MinHashParams& e) const {
  if (e.num_seeds != params_.num_seeds || e.char_ngram != params_.char_ngram || e.seed != params_.seed)
    throw Error(ErrorKind::Usage,
                "%s was made with --num-seeds %u --char-ngram %u --seed %lu, but this run uses --num-seeds %u --char-ngram %u --seed %lu"
                " ---> HINT: fingerprints are only comparable with identical parameters",
                path_.c_str(), params_.num_seeds, params_.char_ngram, (unsigned long)params_.seed, e.num_seeds, e.char_ngram,
                (unsigned long)e.seed);
}

std::span<const uint32_t> SignatureFileReader::signature(uint64_t i) const {
  // Signatures start at byte 48: 4-byte aligned in the mapping.
  return {reinterpret_cast<const uint32_t*>(sigs_) + i * params_.num_seeds, params_.num_seeds};
}

std::string_view SignatureFileReader::id(uint64_t i) const {
  uint64_t a = offset_at(id_offsets_, i), b = offset_at(id_offsets_, i + 1);
  return {reinterpret_cast<const char*>(ids_) + a, b - a};
}

std::string_view SignatureFileReader::text(uint64_t i) const {
  uint64_t a = offset_at(text_offsets_, i), b = offset_at(text_offsets_, i + 1);
  return {reinterpret_cast<const char*>(texts_) + a, b - a};
}

void write_signature_file(const std::string& path, const SignatureFileContent& c) {
  OutputFile out(path);
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  auto put = [&](const void* p, size_t n) {
    out.write(p, n);
    XXH64_update(state, p, n);
  };
  auto put64 = [&](uint64_t v) { put(&v, 8); };
  auto put32 = [&](uint32_t v) { put(&v, 4); };
  try {
    put(kMagic, 8);
    put32(1);
    put32(c.params.num_seeds);
    put32(c.params.char_ngram);
    put32(kSignatureHashScheme);
    put64(c.params.seed);
    put64(c.num_docs);
    uint64_t id_bytes = 0;
    for (uint64_t i = 0; i < c.num_docs; ++i) id_bytes += c.id(i).size();
    put64(id_bytes);
    for (uint64_t i = 0; i < c.num_docs; ++i) {
      auto sig = c.signature(i);
      if (sig.size() != c.params.num_seeds) throw Error(ErrorKind::Internal, "signature of document %lu has %zu values", (unsigned long)i, sig.size());
      put(sig.data(), 4 * sig.size());
    }
    uint64_t off = 0;
    put64(0);
    for (uint64_t i = 0; i < c.num_docs; ++i) put64(off += c.id(i).size());
    for (uint64_t i = 0; i < c.num_docs; ++i) put(c.id(i).data(), c.id(i).size());
    std::vector<uint64_t> text_offsets{0};
    c.for_each_text([&](std::string_view t) {
      put(t.data(), t.size());
      text_offsets.push_back(text_offsets.back() + t.size());
    });
    if (text_offsets.size() != c.num_docs + 1)
      throw Error(ErrorKind::Internal, "%s: %zu texts for %lu documents", path.c_str(), text_offsets.size() - 1, (unsigned long)c.num_docs);
    put(text_offsets.data(), 8 * text_offsets.size());
    uint64_t text_bytes = text_offsets.back();
    uint64_t sum = XXH64_digest(state);
    out.write(&text_bytes, 8);
    out.write(&sum, 8);
    out.write(kEnd, 8);
  } catch (...) {
    XXH64_freeState(state);
    throw;
  }
  XXH64_freeState(state);
  out.commit();
}

}  // namespace zlm::formats
