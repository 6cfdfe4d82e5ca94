// JSONL output: one JSON value per line, written through an OutputFile (so
// the file appears under its final name only when complete).
//
//   zlm::JsonlWriter out("kept.jsonl");
//   out.write_raw_line(line);                       // pass an input line through byte for byte
//   out.begin_object(); out.field("url", u); out.field("score", 0.5); out.end_object();
//   out.commit();
//
// Objects are built by common/core/json_writer.h's JsonObject (UTF-8 kept as is,
// like Python's json.dumps(ensure_ascii=False), or \uXXXX with ascii_only;
// numbers in the shortest form that reads back to the same double).
// Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/core/json_writer.h"
#include "common/core/output_file.h"

namespace zlm {

class JsonlWriter {
 public:
  explicit JsonlWriter(std::string path, bool ascii_only = false) : out_(std::move(path)), ascii_only_(ascii_only) {}

  void write_raw_line(std::string_view line);
  void begin_object() { obj_ = JsonObject(ascii_only_); }
  template <class T>
  void field(std::string_view key, const T& value) {
    obj_.add(key, value);
  }
  // A field whose value is already JSON text (an array, an object).
  void field_raw(std::string_view key, std::string_view json) { obj_.add_raw(key, json); }
  void end_object() { write_raw_line(obj_.str()); }
  uint64_t lines() const { return lines_; }
  void commit() { out_.commit(); }

 private:
  OutputFile out_;
  bool ascii_only_;
  JsonObject obj_;
  uint64_t lines_ = 0;
};

}  // namespace zlm
