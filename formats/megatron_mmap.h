// Megatron-LM's indexed dataset: the MMIDIDX `.idx` + `.bin` pair.
// The byte layout below is this module's contract (docs/compatibility.md, "The indexed dataset").
//
// `.bin`: the token ids of every sequence, concatenated in write order, each as
// one little-endian element of the dataset dtype. No header, no padding.
//
// `.idx` (all little-endian, no alignment padding):
//   offset 0   9 bytes  magic "MMIDIDX\0\0"
//   offset 9   u64      version, always 1
//   offset 17  u8       dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//                       6 float64, 7 float32, 8 uint16)
//   offset 18  u64      N, number of sequences
//   offset 26  u64      M, number of doc_idx entries (documents + 1)
//   offset 34  int32[N] sizes: tokens per sequence
//   then       int64[N] pointers: byte offset of each sequence in `.bin`
//   then       int64[M] doc_idx: first sequence of each document, then N
//   then       int8[N]  sequence modes, only in the multimodal variant
// File size is exactly 34 + 12N + 8M (+ N for multimodal, detected by size).
//
// Writers pick uint16 (code 8) when the unpadded vocab size is < 65500, else
// int32 (code 4) — best_fitting_dtype(). Pointers are recomputed from sizes.
// "end document" appends len(sizes) to doc_idx; merging appends the other
// file's sizes and its doc_idx shifted by our sequence count, minus its leading 0.
//
//   zlm::formats::MegatronWriter w("out_text_document", zlm::formats::best_fitting_dtype(50257));
//   w.add_item(tokens); w.end_document();
//   w.finalize();                       // writes .bin and .idx atomically
//   zlm::formats::MegatronReader r("out_text_document");
//   auto toks = r.sequence_tokens(0);
//
// The reader mmaps both files and validates the header, sizes, pointers and
// doc_idx before returning; any inconsistency is zlm::Error(Format) naming the
// file, the field and the offending index or byte offset. Readers are
// immutable after construction and safe to share between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "common/core/mapped_file.h"

namespace zlm::formats {

enum class DType : uint8_t { UInt8 = 1, Int8 = 2, Int16 = 3, Int32 = 4, Int64 = 5, Float64 = 6, Float32 = 7, UInt16 = 8 };

inline constexpr char kMmidIdxMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kMmidIdxVersion = 1;
inline constexpr uint64_t kIdxHeaderBytes = 34;

// Element size in bytes, or 0 for an unknown code.
size_t dtype_size(uint8_t code);
const char* dtype_name(uint8_t code);
bool dtype_is_integer(DType dtype);
// Megatron's rule: vocab_size < 65500 -> uint16, else int32.
DType best_fitting_dtype(uint64_t vocab_size);

std::string idx_path(const std::string& prefix);
std::string bin_path(const std::string& prefix);

class MegatronReader {
 public:
  // Opens prefix.idx and prefix.bin; throws zlm::Error(Format/Io) when invalid.
  explicit MegatronReader(const std::string& prefix);
  ~MegatronReader();
  MegatronReader(const MegatronReader&) = delete;
  MegatronReader& operator=(const MegatronReader&) = delete;

  const std::string& prefix() const { return prefix_; }
  DType dtype() const { return dtype_; }
  size_t item_size() const { return item_size_; }
  uint64_t num_sequences() const { return n_; }
  uint64_t num_documents() const { return m_ - 1; }
  uint64_t num_doc_idx() const { return m_; }
  bool multimodal() const { return multimodal_; }
  uint64_t bin_bytes() const { return bin_size_; }
  uint64_t total_tokens() const { return total_tokens_; }

  int32_t size(uint64_t i) const { return load_unaligned<int32_t>(sizes_ + 4 * i); }
  int64_t pointer(uint64_t i) const { return load_unaligned<int64_t>(pointers_ + 8 * i); }
  int64_t doc_idx(uint64_t i) const { return load_unaligned<int64_t>(doc_idx_ + 8 * i); }
  int8_t mode(uint64_t i) const { return multimodal_ ? static_cast<int8_t>(modes_[i]) : 0; }

  // Raw element bytes of sequence i (size(i) * item_size() bytes, aligned as written).
  const uint8_t* sequence_data(uint64_t i) const { return bin_ + pointer(i); }
  // Tokens of sequence i from element `offset`, `length` elements (all when
  // length < 0), widened to int64. Only for integer dtypes.
  std::vector<int64_t> sequence_tokens(uint64_t i, int64_t offset = 0, int64_t length = -1) const;
  // Raw bytes of the whole .bin / .idx mapping (for copying during merges).
  const uint8_t* bin_data() const { return bin_; }

 private:
  void validate();
  std::string prefix_;
  MappedFile idx_file_, bin_file_;
  DType dtype_ = DType::UInt16;
  size_t item_size_ = 2;
  uint64_t n_ = 0, m_ = 0, idx_size_ = 0, bin_size_ = 0, total_tokens_ = 0;
  bool multimodal_ = false;
  const uint8_t* idx_ = nullptr;  // idx_file_.data(), bin_file_.data()
  const uint8_t* bin_ = nullptr;
  const uint8_t *sizes_ = nullptr, *pointers_ = nullptr, *doc_idx_ = nullptr, *modes_ = nullptr;
};

// The first token id outside [0, limit) in the dataset, and where it is (the
// trainer's check at open: an id beyond the vocabulary is the wrong vocabulary).
// One pass over the .bin for the maximum (memory speed), a second one only to
// locate a bad id. Integer dtypes only; nullopt when every id is in range.
struct TokenIdOutOfRange {
  uint64_t document = 0, sequence = 0;
  int64_t id = 0;
};
std::optional<TokenIdOutOfRange> find_token_id_out_of_range(const MegatronReader& r, int64_t limit);

// Validates an in-memory `.idx` image against a `.bin` of `bin_size` bytes
// (the checks MegatronReader makes; exposed for the fuzzer and tests).
// `name` is used in error messages.
void validate_idx_bytes(const uint8_t* data, uint64_t size, uint64_t bin_size, const std::string& name);

class MegatronWriter {
 public:
  MegatronWriter(std::string prefix, DType dtype);
  ~MegatronWriter();
  MegatronWriter(const MegatronWriter&) = delete;
  MegatronWriter& operator=(const MegatronWriter&) = delete;

  // Appends one sequence. Throws zlm::Error(Format) when an id does not fit the dtype.
  void add_item(std::span<const int32_t> tokens);
  void add_item(std::span<const int64_t> tokens);
  // Closes the current document (Megatron's end_document).
  void end_document();
  // Megatron-core's add_document: all sequences of one document at once.
  void add_document(std::span<const int32_t> tokens, std::span<const int64_t> lengths);
  // Appends every sequence and document of `other` (same dtype required).
  void add_index(const MegatronReader& other);
  // Writes prefix.bin and prefix.idx under temporary names and renames both.
  void finalize();

  uint64_t num_sequences() const { return sizes_.size(); }
  uint64_t num_documents() const { return doc_idx_.size() - 1; }
  uint64_t bin_bytes() const;

 private:
  template <typename T>
  void append_tokens(std::span<const T> tokens);
  struct Impl;
  std::string prefix_;
  DType dtype_;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> doc_idx_;
  Impl* impl_;
  bool finalized_ = false;
};

// The `.idx` bytes for the given arrays (pointers recomputed from sizes).
std::string build_idx_bytes(DType dtype, std::span<const int32_t> sizes, std::span<const int64_t> doc_idx);

}  // namespace zlm::formats
