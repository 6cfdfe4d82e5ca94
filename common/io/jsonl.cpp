#include "common/io/jsonl.h"

#include <simdjson.h>
#include <sys/stat.h>

#include <cstring>

#include "common/core/error.h"
#include "common/core/log.h"
#include "common/core/utf8.h"

namespace zlm {

JsonlBatchReader::JsonlBatchReader(std::vector<std::string> files, size_t batch_bytes)
    : files_(std::move(files)), batch_bytes_(batch_bytes) {
  for (const auto& f : files_) {
    struct stat st {};
    if (f != "-" && ::stat(f.c_str(), &st) == 0 && S_ISREG(st.st_mode)) total_file_bytes_ += static_cast<uint64_t>(st.st_size);
  }
}

JsonlBatchReader::~JsonlBatchReader() = default;

uint64_t JsonlBatchReader::file_bytes_done() const {
  return finished_file_bytes_ + (reader_ ? reader_->compressed_offset() : 0);
}

bool JsonlBatchReader::next_batch(LineBatch& batch) {
  batch.index = batches_;
  batch.first_record = records_;
  batch.bytes = 0;
  batch.data.clear();
  batch.lines.clear();
  while (batch.data.size() < batch_bytes_) {
    if (!reader_) {
      if (current_ >= files_.size()) break;
      reader_ = std::make_unique<LineReader>(files_[current_]);
    }
    std::string_view line;
    if (!reader_->next(line)) {
      finished_file_bytes_ += reader_->compressed_offset();
      reader_.reset();
      ++current_;
      continue;
    }
    if (reader_->line_number() == 1 && reader_->had_bom()) {
      ++files_with_bom_;
      ZLM_LOG_INF("%s: skipped the UTF-8 byte order mark at its start", files_[current_].c_str());
    }
    LineRef ref{static_cast<uint32_t>(current_), reader_->line_number(), batch.data.size(), line.size()};
    batch.data.append(line);
    batch.data.push_back('\n');
    batch.bytes += line.size() + 1;
    batch.lines.push_back(ref);
  }
  if (batch.lines.empty()) return false;
  batch.data.append(simdjson::SIMDJSON_PADDING, '\0');
  records_ += batch.lines.size();
  ++batches_;
  return true;
}

const char* record_status_name(RecordStatus status) {
  switch (status) {
    case RecordStatus::Ok: return "ok";
    case RecordStatus::MalformedJson: return "malformed_json";
    case RecordStatus::NotAnObject: return "not_an_object";
    case RecordStatus::MissingKey: return "missing_key";
    case RecordStatus::NotAString: return "not_a_string";
    case RecordStatus::InvalidUtf8: return "invalid_utf8";
    case RecordStatus::BadEscape: return "bad_escape";
  }
  return "?";
}

struct JsonFieldExtractor::Impl {
  simdjson::dom::parser parser;
  std::vector<simdjson::dom::element> found;
  std::vector<bool> found_any;
  std::vector<std::string_view> views;
};

JsonFieldExtractor::JsonFieldExtractor() : impl_(std::make_unique<Impl>()) {}
JsonFieldExtractor::~JsonFieldExtractor() = default;

RecordStatus JsonFieldExtractor::extract(std::string_view line, size_t capacity, const std::vector<std::string>& keys,
                                         std::vector<std::string>& values, std::string* detail) {
  const RecordStatus status = extract_views(line, capacity, keys, impl_->views, detail);
  values.resize(keys.size());
  if (status == RecordStatus::Ok)
    for (size_t k = 0; k < keys.size(); ++k) values[k].assign(impl_->views[k]);
  return status;
}

RecordStatus JsonFieldExtractor::extract_views(std::string_view line, size_t capacity, const std::vector<std::string>& keys,
                                               std::vector<std::string_view>& values, std::string* detail) {
  values.resize(keys.size());
  if (capacity < line.size() + simdjson::SIMDJSON_PADDING) {
    throw Error(ErrorKind::Internal, "JsonFieldExtractor: line without padding");
  }
  simdjson::dom::element doc;
  auto err = impl_->parser.parse(line.data(), line.size(), false).get(doc);
  if (err) {
    if (err == simdjson::UTF8_ERROR) {
      size_t bad = 0;
      utf8_valid(line, &bad);
      *detail = strprintf("invalid UTF-8 at byte %zu of the line", bad);
      return RecordStatus::InvalidUtf8;
    }
    if (err == simdjson::STRING_ERROR) {
      *detail = "invalid string escape (e.g. a lone UTF-16 surrogate \\uD800)";
      return RecordStatus::BadEscape;
    }
    *detail = std::string("malformed JSON: ") + simdjson::error_message(err);
    return RecordStatus::MalformedJson;
  }
  simdjson::dom::object obj;
  if (doc.get_object().get(obj)) {
    *detail = "the line is JSON but not an object";
    return RecordStatus::NotAnObject;
  }
  // Each key's last value, as Python's json.loads keeps the last of a repeated key (byte identity
  // with Megatron's tools depends on it).
  impl_->found.assign(keys.size(), simdjson::dom::element());
  impl_->found_any.assign(keys.size(), false);
  for (auto [key, value] : obj)
    for (size_t k = 0; k < keys.size(); ++k)
      if (key == keys[k]) impl_->found[k] = value, impl_->found_any[k] = true;
  for (size_t k = 0; k < keys.size(); ++k) {
    if (!impl_->found_any[k]) {
      *detail = "missing key '" + keys[k] + "'";
      return RecordStatus::MissingKey;
    }
    std::string_view s;
    if (impl_->found[k].get_string().get(s)) {
      *detail = "value of key '" + keys[k] + "' is not a string";
      return RecordStatus::NotAString;
    }
    // simdjson's SIMD check first (the common case: valid); the scalar one finds the offset.
    size_t bad = 0;
    if (!simdjson::validate_utf8(s.data(), s.size()) && !utf8_valid(s, &bad)) {
      *detail = strprintf("value of key '%s' holds a lone surrogate or invalid UTF-8 at byte %zu", keys[k].c_str(), bad);
      return RecordStatus::BadEscape;
    }
    values[k] = s;
  }
  return RecordStatus::Ok;
}

bool find_string_field_span(std::string_view line, size_t capacity, std::string_view key, size_t* offset, size_t* length) {
  thread_local simdjson::ondemand::parser parser;
  simdjson::padded_string_view view(line.data(), line.size(), capacity);
  simdjson::ondemand::document doc;
  if (parser.iterate(view).get(doc)) return false;
  simdjson::ondemand::object obj;
  if (doc.get_object().get(obj)) return false;
  bool found = false;
  for (auto field : obj) {
    std::string_view k;
    if (field.unescaped_key().get(k)) return false;
    simdjson::ondemand::value v;
    if (field.value().get(v)) return false;
    if (k != key) continue;
    std::string_view raw = v.raw_json_token();
    while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\t' || raw.back() == '\n' || raw.back() == '\r')) raw.remove_suffix(1);
    if (raw.size() < 2 || raw.front() != '"') return false;
    *offset = static_cast<size_t>(raw.data() - line.data());
    *length = raw.size();
    found = true;
  }
  return found;
}

}  // namespace zlm
