#include "common/core/json_writer.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "common/core/error.h"
#include "common/core/utf8.h"

namespace zlm {
namespace {
void append_u16(std::string& out, uint32_t unit) {
  static constexpr char kHex[] = "0123456789abcdef";
  const char buf[6] = {'\\', 'u', kHex[(unit >> 12) & 15], kHex[(unit >> 8) & 15], kHex[(unit >> 4) & 15], kHex[unit & 15]};
  out.append(buf, sizeof buf);
}

// Bytes written as they are: from 0x20 up but '"' and '\\', in the table for
// ASCII-only output (plain[1]) below 0x80 only.
struct PlainBytes {
  bool plain[2][256] = {};
  constexpr PlainBytes() {
    for (int c = 0x20; c < 0x100; ++c) {
      plain[0][c] = c != '"' && c != '\\';  // DEL (0x7F) too, as Python's json.dumps
      plain[1][c] = c < 0x80 && plain[0][c];
    }
  }
};
constexpr PlainBytes kPlainBytes;
}  // namespace

void append_json_string(std::string& out, std::string_view s, bool ascii_only) {
  out.reserve(out.size() + s.size() + 2);
  out.push_back('"');
  const bool* plain = kPlainBytes.plain[ascii_only ? 1 : 0];
  size_t i = 0;
  while (i < s.size()) {
    size_t run = i;  // a run of plain bytes goes in one append
    while (run < s.size() && plain[static_cast<unsigned char>(s[run])]) ++run;
    out.append(s.data() + i, run - i);
    if (run == s.size()) break;
    i = run;
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {  // ascii_only: the code point as \uXXXX (a surrogate pair past the BMP)
      uint32_t cp = 0;
      size_t len = utf8_decode(s.substr(i), &cp);
      if (len == 0) {
        cp = 0xFFFD;
        len = 1;
      }
      if (cp >= 0x10000) {
        cp -= 0x10000;
        append_u16(out, 0xD800 + (cp >> 10));
        append_u16(out, 0xDC00 + (cp & 0x3FF));
      } else {
        append_u16(out, cp);
      }
      i += len;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: append_u16(out, c);
    }
    ++i;
  }
  out.push_back('"');
}

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

void JsonObject::key(std::string_view k) {
  if (buf_.size() > 1) buf_ += ", ";
  append_json_string(buf_, k, ascii_only_);
  buf_ += ": ";
}

JsonObject& JsonObject::add(std::string_view k, std::string_view value) {
  key(k);
  append_json_string(buf_, value, ascii_only_);
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, double value) { return add_raw(k, json_number(value)); }

JsonObject& JsonObject::add(std::string_view k, bool value) { return add_raw(k, value ? "true" : "false"); }

JsonObject& JsonObject::add(std::string_view k, const std::optional<double>& value) {
  return value ? add(k, *value) : add_null(k);
}

JsonObject& JsonObject::add_raw(std::string_view k, std::string_view json) {
  key(k);
  buf_ += json;
  return *this;
}

}  // namespace zlm
