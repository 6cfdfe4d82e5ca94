// UTF-8: the one decoder every part of zerolm uses, and one definition of
// well-formed: the Unicode standard's Table 3-7 (no overlong forms, no
// surrogates U+D800-DFFF, nothing above U+10FFFF), which is also what
// Python's strict decoder accepts.
//
//   utf8_step(p, end)   one step at p (< end): a well-formed sequence (ok, its
//                       length 1-4 and code point) or an ill-formed one (!ok,
//                       len = its maximal subpart, 1-3 bytes: the bytes that one
//                       U+FFFD replaces under Python's errors="replace").
//   utf8_decode(s, &cp) length of the well-formed sequence at the start of s, 0 if none.
//   utf8_valid(s, &off) the whole string is well-formed; else the offset of the
//                       first ill-formed byte.
//   utf8_length(s)      code points of well-formed text (Python's len()).
//   utf8_continuation(c) c is a continuation byte (10xxxxxx).
//   utf8_prefix(s, n)   at most n bytes of s, cut before a character that would not fit.
//   utf8_replace_invalid(s, out)  s with U+FFFD for each ill-formed subpart (errors="replace").
//
// utf8_step is inline (the tokenizer's and MinHash's inner loops call it per
// character); utf8_step_reference in utf8.cpp is the slow, obvious definition
// (decode by the lead byte's pattern, then re-encode and compare) that the unit
// tests hold it to over every sequence of up to 3 bytes and the 4-byte range.
// All O(n), no allocation, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zlm {

struct Utf8Step {
  uint32_t cp;   // the code point (valid only when ok)
  uint8_t len;   // bytes consumed: the sequence, or the ill-formed maximal subpart
  bool ok;
};

inline Utf8Step utf8_step(const char* p, const char* end) {
  const auto c = static_cast<uint8_t>(*p);
  if (c < 0x80) return {c, 1, true};
  size_t need;
  uint32_t cp;
  uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3, cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;  // overlong below U+0800
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4, cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;  // overlong below U+10000
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return {0, 1, false};
  }
  const size_t avail = static_cast<size_t>(end - p);
  size_t k = 1;
  for (; k < need && k < avail; ++k) {
    const auto d = static_cast<uint8_t>(p[k]);
    if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) break;
    cp = (cp << 6) | (d & 0x3F);
  }
  if (k < need) return {0, static_cast<uint8_t>(k), false};
  return {cp, static_cast<uint8_t>(need), true};
}

// Appends the UTF-8 bytes of code point cp (< 0x110000; surrogates are encoded
// as 3 bytes like any other value, as ftfy's and ICU's UTF-32 strings may hold them).
inline void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
  } else if (cp < 0x10000) {
    out += {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
  } else {
    out += {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
            static_cast<char>(0x80 | (cp & 0x3F))};
  }
}

// The reference definition of utf8_step (slow; for tests).
Utf8Step utf8_step_reference(std::string_view s);

inline size_t utf8_decode(std::string_view s, uint32_t* cp) {
  if (s.empty()) return 0;
  const Utf8Step st = utf8_step(s.data(), s.data() + s.size());
  if (!st.ok) return 0;
  *cp = st.cp;
  return st.len;
}

inline bool utf8_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Number of code points of well-formed UTF-8 (the bytes that are not
// continuation bytes): Python's len() of the decoded str.
inline size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += !utf8_continuation(c);
  return n;
}

// The first max_bytes of s at most, ending before the character that would
// not fit whole (s itself when it fits).
inline std::string_view utf8_prefix(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t cut = max_bytes;
  while (cut > 0 && utf8_continuation(s[cut])) --cut;
  return s.substr(0, cut);
}

bool utf8_valid(std::string_view s, size_t* bad_offset = nullptr);

// `in` as well-formed UTF-8 in `out` (replaced): each ill-formed sequence's maximal
// subpart becomes one U+FFFD, as Python's decode(errors="replace") does. Returns
// the number of replacements. O(n).
uint64_t utf8_replace_invalid(std::string_view in, std::string& out);

}  // namespace zlm
