// Minimal UTF-8 helpers (validation and decoding of one code point).
//
// utf8_decode: decodes the code point at the start of `s` into *cp and returns
// its length in bytes (1-4), or 0 when the bytes are not well-formed UTF-8
// (overlong forms, surrogates U+D800-DFFF and values above U+10FFFF are
// rejected, as in the Unicode standard's Table 3-7). utf8_valid: the whole
// string is well-formed; returns the byte offset of the first bad byte via
// *bad_offset. Both O(n), no allocation, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace zlm {

size_t utf8_decode(std::string_view s, uint32_t* cp);
// Number of code points of valid UTF-8 (the bytes that are not continuation
// bytes): Python's len() of the decoded str. O(n), no allocation.
inline size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}
bool utf8_valid(std::string_view s, size_t* bad_offset = nullptr);

}  // namespace zlm
