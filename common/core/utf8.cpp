#include "common/core/utf8.h"

#include <set>
#include <string>

namespace zlm {

namespace {
// The shortest encoding of cp (the standard's definition of the only valid form).
std::string encode(uint32_t cp) {
  std::string out;
  append_utf8(out, cp);
  return out;
}

bool scalar_value(uint32_t cp) { return cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF); }
}  // namespace

// A sequence is well-formed when the lead byte's pattern (0xxxxxxx, 110xxxxx,
// 1110xxxx, 11110xxx) is followed by enough 10xxxxxx bytes, the value is a
// Unicode scalar value, and re-encoding it gives back the same bytes (which
// rules out every overlong form). Otherwise the maximal subpart is the longest
// prefix that is also a proper prefix of some well-formed sequence (at least
// 1 byte), looked up in the set of all such prefixes, built once from every
// scalar value's encoding.
Utf8Step utf8_step_reference(std::string_view s) {
  static const std::set<std::string> proper_prefixes = [] {
    std::set<std::string> out;
    for (uint32_t cp = 0x80; cp <= 0x10FFFF; ++cp) {
      if (!scalar_value(cp)) continue;
      const std::string e = encode(cp);
      for (size_t k = 1; k < e.size(); ++k) out.insert(e.substr(0, k));
    }
    return out;
  }();
  const auto c = static_cast<uint8_t>(s[0]);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n > 0 && s.size() >= n) {
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    bool cont = true;
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<uint8_t>(s[k]);
      cont = cont && (d >> 6) == 0x2;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (cont && scalar_value(cp) && encode(cp) == s.substr(0, n)) return {cp, static_cast<uint8_t>(n), true};
  }
  size_t best = 1;
  while (best < s.size() && proper_prefixes.count(std::string(s.substr(0, best + 1)))) ++best;
  return {0, static_cast<uint8_t>(best), false};
}

bool utf8_valid(std::string_view s, size_t* bad_offset) {
  const char* const begin = s.data();
  const char* const end = begin + s.size();
  const char* p = begin;
  while (p < end) {
    // ASCII fast path, 8 bytes at a time.
    while (end - p >= 8) {
      uint64_t word = 0;
      for (int k = 0; k < 8; ++k) word |= static_cast<uint64_t>(static_cast<uint8_t>(p[k])) << (8 * k);
      if (word & 0x8080808080808080ULL) break;
      p += 8;
    }
    if (p >= end) break;
    const Utf8Step st = utf8_step(p, end);
    if (!st.ok) {
      if (bad_offset) *bad_offset = static_cast<size_t>(p - begin);
      return false;
    }
    p += st.len;
  }
  return true;
}

uint64_t utf8_replace_invalid(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  uint64_t replaced = 0;
  const char* p = in.data();
  const char* end = p + in.size();
  while (p < end) {
    const char* run = p;
    while (p < end && static_cast<unsigned char>(*p) < 0x80) ++p;
    out.append(run, p);
    if (p == end) break;
    const Utf8Step st = utf8_step(p, end);
    if (st.ok) {
      out.append(p, st.len);
    } else {
      out.append("\xEF\xBF\xBD");
      ++replaced;
    }
    p += st.len;
  }
  return replaced;
}

}  // namespace zlm
