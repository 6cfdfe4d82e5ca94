// Streaming JSONL input: batches of raw lines from many (compressed) files,
// and a per-thread field extractor on simdjson.
//
//   zlm::JsonlBatchReader reader(zlm::expand_inputs(spec));
//   zlm::LineBatch batch;
//   zlm::JsonFieldExtractor extractor;          // one per thread
//   while (reader.next_batch(batch))
//     for (const auto& ref : batch.lines) {
//       auto st = extractor.extract(batch.line(ref), {"text"}, values, &detail);
//       if (st != zlm::RecordStatus::Ok) report(reader.file_name(ref.file_index), ref.line_number, detail);
//     }
//
// Reading is sequential (one thread); extraction is meant to run in parallel
// on the batches (see common/io/pipeline.h). A batch holds about `batch_bytes` of
// line data, so memory is bounded by batch_bytes times the batches in flight.
// A malformed record is a RecordStatus, never an exception: callers count and
// report it with file:line and go on (docs/design.md, "Conventions"). I/O and decompression
// failures throw zlm::Error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/io/line_reader.h"

namespace zlm {

struct LineRef {
  uint32_t file_index = 0;
  uint64_t line_number = 0;  // 1-based within its file
  uint64_t offset = 0;       // into LineBatch::data
  uint64_t length = 0;       // without the newline
};

struct LineBatch {
  uint64_t index = 0;        // 0, 1, 2, ... in reading order
  uint64_t first_record = 0; // global record number of lines[0]
  uint64_t bytes = 0;        // raw bytes, newlines included
  std::string data;          // the lines, '\n'-separated, plus padding
  std::vector<LineRef> lines;
  std::string_view line(const LineRef& ref) const { return {data.data() + ref.offset, ref.length}; }
  // Bytes readable after line(ref) (for parsers that need padding).
  size_t capacity_after(const LineRef& ref) const { return data.size() - ref.offset; }
};

class JsonlBatchReader {
 public:
  explicit JsonlBatchReader(std::vector<std::string> files, size_t batch_bytes = 1 << 20);
  ~JsonlBatchReader();
  // Fills `batch` with the next lines; false when every file is exhausted.
  bool next_batch(LineBatch& batch);
  const std::string& file_name(uint32_t index) const { return files_[index]; }
  const std::vector<std::string>& files() const { return files_; }
  // Sum of the input files' sizes on disk (0 for stdin), for ETAs.
  uint64_t total_file_bytes() const { return total_file_bytes_; }
  // Bytes of the files on disk consumed so far (compressed bytes for .gz etc.).
  uint64_t file_bytes_done() const;
  // Files that opened with a UTF-8 byte order mark (skipped, as Python's utf-8-sig; logged).
  uint64_t files_with_bom() const { return files_with_bom_; }

 private:
  std::vector<std::string> files_;
  size_t batch_bytes_;
  size_t current_ = 0;
  std::unique_ptr<LineReader> reader_;
  uint64_t finished_file_bytes_ = 0, total_file_bytes_ = 0, records_ = 0, batches_ = 0, files_with_bom_ = 0;
};

enum class RecordStatus { Ok, MalformedJson, NotAnObject, MissingKey, NotAString, InvalidUtf8, BadEscape };
const char* record_status_name(RecordStatus status);

class JsonFieldExtractor {
 public:
  JsonFieldExtractor();
  ~JsonFieldExtractor();
  // Parses `line` (which must be followed by >= 64 readable bytes; `capacity`
  // counts them) and copies the string values of `keys`, unescaped, into
  // `values` (resized to keys.size()); a key that repeats gives its last
  // value, as Python's dict. The whole line is validated (as
  // Python's json.loads would), so trailing garbage is MalformedJson. The
  // strings are checked to be valid UTF-8 without lone surrogates. On failure
  // returns the status and writes a one-line explanation to *detail.
  // Allocation: amortised zero (buffers are reused). O(line length).
  RecordStatus extract(std::string_view line, size_t capacity, const std::vector<std::string>& keys,
                       std::vector<std::string>& values, std::string* detail);
  // As extract, without the copy: the views point into this extractor's
  // buffer and stay valid until its next call.
  RecordStatus extract_views(std::string_view line, size_t capacity, const std::vector<std::string>& keys,
                             std::vector<std::string_view>& values, std::string* detail);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Byte span [*offset, *offset + *length) of the quoted JSON string value of
// top-level `key` in `line` (the last occurrence, as Python's json.loads keeps
// the last duplicate). `line` must be valid JSON followed by >= 64 readable
// bytes (`capacity` counts them). Lets a tool replace one field and keep every
// other byte of the line. Returns false when the key is absent or not a string.
bool find_string_field_span(std::string_view line, size_t capacity, std::string_view key, size_t* offset, size_t* length);

}  // namespace zlm
