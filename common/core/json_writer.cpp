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
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", unit);
  out += buf;
}
}  // namespace

void append_json_string(std::string& out, std::string_view s, bool ascii_only) {
  out.reserve(out.size() + s.size() + 2);
  out.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80 && ascii_only) {
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
      default:
        if (c < 0x20) append_u16(out, c);
        else out.push_back(static_cast<char>(c));
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
