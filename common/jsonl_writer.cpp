#include "common/jsonl_writer.h"

#include <charconv>
#include <cmath>

#include "common/error.h"
#include "common/json_escape.h"

namespace zlm {

std::string python_float_repr(double value) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, value);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";  // "n": inf and nan stay as they are
  return s;
}

std::string json_number(double value) {
  if (!std::isfinite(value)) throw Error(ErrorKind::Internal, "JSON cannot hold a non-finite number");
  return python_float_repr(value);
}

void JsonlWriter::write_raw_line(std::string_view line) {
  out_.write(line);
  out_.put('\n');
  ++lines_;
}

void JsonlWriter::begin_object() {
  buf_ = "{";
  first_field_ = true;
}

void JsonlWriter::key(std::string_view k) {
  if (!first_field_) buf_ += ", ";
  first_field_ = false;
  append_json_string(buf_, k, ascii_only_);
  buf_ += ": ";
}

void JsonlWriter::field(std::string_view k, std::string_view value) {
  key(k);
  append_json_string(buf_, value, ascii_only_);
}

void JsonlWriter::field(std::string_view k, double value) {
  key(k);
  buf_ += json_number(value);
}

void JsonlWriter::field(std::string_view k, int64_t value) {
  key(k);
  buf_ += std::to_string(value);
}

void JsonlWriter::field_raw(std::string_view k, std::string_view json) {
  key(k);
  buf_ += json;
}

void JsonlWriter::end_object() {
  buf_ += "}\n";
  out_.write(buf_);
  ++lines_;
}

}  // namespace zlm
