#include "common/json_escape.h"

#include <cstdint>
#include <cstdio>

#include "common/utf8.h"

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

}  // namespace zlm
