// JSONL output: one JSON value per line, written through an OutputFile (so
// the file appears under its final name only when complete).
//
//   zlm::JsonlWriter out("kept.jsonl");
//   out.write_raw_line(line);                       // pass an input line through byte for byte
//   out.begin_object(); out.field("url", u); out.field("score", 0.5); out.end_object();
//   out.commit();
//
// Strings are escaped by common/json_escape.h (UTF-8 kept as is, like Python's
// json.dumps(ensure_ascii=False), or \uXXXX with ascii_only). Numbers are
// written in the shortest form that reads back to the same double.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/output_file.h"

namespace zlm {

class JsonlWriter {
 public:
  explicit JsonlWriter(std::string path, bool ascii_only = false) : out_(std::move(path)), ascii_only_(ascii_only) {}

  void write_raw_line(std::string_view line);
  void begin_object();
  void field(std::string_view key, std::string_view value);
  void field(std::string_view key, double value);
  void field(std::string_view key, int64_t value);
  // A field whose value is already JSON text (an array, an object).
  void field_raw(std::string_view key, std::string_view json);
  void end_object();
  uint64_t lines() const { return lines_; }
  void commit() { out_.commit(); }

 private:
  void key(std::string_view k);
  OutputFile out_;
  bool ascii_only_;
  std::string buf_;
  bool first_field_ = true;
  uint64_t lines_ = 0;
};

// Python's repr() of a float: the shortest text that reads back to the same
// double, "1.0" rather than "1", "inf"/"nan" for non-finite values.
std::string python_float_repr(double value);
// python_float_repr for JSON, which has no inf/nan (those are zlm::Error(Internal)).
std::string json_number(double value);

}  // namespace zlm
