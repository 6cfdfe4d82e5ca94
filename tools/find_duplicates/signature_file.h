// MinHash fingerprint files of find_duplicates (--save-fingerprints /
// --load-fingerprints): our own versioned binary format, so shards
// fingerprinted on different machines can be loaded together.
//
// Layout (all integers little-endian):
//   offset 0   8 bytes  magic "ZLMSIG01"
//   8          u32      version (1)
//   12         u32      num_seeds
//   16         u32      char_ngram
//   20         u32      hash scheme (1 = XXH3-64 shingles, multiply-add-shift permutations)
//   24         u64      seed
//   32         u64      N, number of documents
//   40         u64      id_bytes
//   48         u32[N * num_seeds]  signatures, document-major
//   then       u64[N + 1]          id offsets into the id bytes
//   then       id_bytes bytes      document ids (UTF-8), concatenated
//   then       T bytes             document texts, concatenated
//   then       u64[N + 1]          text offsets into the text bytes
//   footer     u64 T, u64 XXH64 (seed 0) of every byte before the footer,
//              8 bytes "ZLMSIGOK"
// The texts are stored so that candidate pairs can be verified by exact
// Jaccard after loading. Writers use zlm::OutputFile (atomic). The reader
// mmaps the file, checks magic, version, sizes and the checksum, and refuses
// parameters different from the caller's with a message naming both.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "common/core/mapped_file.h"
#include "common/dedup/minhash.h"

namespace zlm::formats {

inline constexpr uint32_t kSignatureHashScheme = 1;

class SignatureFileReader {
 public:
  explicit SignatureFileReader(const std::string& path);
  ~SignatureFileReader();
  SignatureFileReader(const SignatureFileReader&) = delete;
  SignatureFileReader& operator=(const SignatureFileReader&) = delete;

  // Throws zlm::Error(Usage) naming the file when its parameters differ.
  void check_params(const MinHashParams& expected) const;
  const MinHashParams& params() const { return params_; }
  uint64_t num_docs() const { return n_; }
  std::span<const uint32_t> signature(uint64_t i) const;
  std::string_view id(uint64_t i) const;
  std::string_view text(uint64_t i) const;
  const std::string& path() const { return path_; }

 private:
  uint64_t offset_at(const uint8_t* table, uint64_t i) const;
  std::string path_;
  MappedFile file_;
  const uint8_t* data_ = nullptr;  // file_.data()
  uint64_t size_ = 0, n_ = 0;
  MinHashParams params_;
  const uint8_t *sigs_ = nullptr, *id_offsets_ = nullptr, *ids_ = nullptr, *texts_ = nullptr, *text_offsets_ = nullptr;
};

struct SignatureFileContent {
  MinHashParams params;
  uint64_t num_docs = 0;
  std::function<std::span<const uint32_t>(uint64_t)> signature;
  std::function<std::string_view(uint64_t)> id;
  // Called once per document, in order, to stream the texts.
  std::function<void(const std::function<void(std::string_view)>& sink)> for_each_text;
};

// Writes the file atomically.
void write_signature_file(const std::string& path, const SignatureFileContent& content);

}  // namespace zlm::formats
