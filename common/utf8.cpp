#include "common/utf8.h"

namespace zlm {

size_t utf8_decode(std::string_view s, uint32_t* cp) {
  if (s.empty()) return 0;
  auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  uint8_t c = b(0);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t len;
  uint32_t value;
  uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    value = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    value = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    value = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < len) return 0;
  for (size_t i = 1; i < len; ++i) {
    uint8_t d = b(i);
    if (i == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return 0;
    value = (value << 6) | (d & 0x3F);
  }
  *cp = value;
  return len;
}

bool utf8_valid(std::string_view s, size_t* bad_offset) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t word = 0;
      for (int k = 0; k < 8; ++k) word |= static_cast<uint64_t>(static_cast<uint8_t>(s[i + k])) << (8 * k);
      if (word & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= s.size()) break;
    uint32_t cp;
    size_t len = utf8_decode(s.substr(i), &cp);
    if (len == 0) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

}  // namespace zlm
