// GPT-2 pre-tokenization: splits text into the pieces that BPE encodes
// independently. Implements, as a hand-written scanner, the pattern
// (docs/compatibility.md, "Tokenizer"; tiktoken's r50k/gpt2 pattern)
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// with find-all, leftmost-first semantics. \p{L} = Lu Ll Lt Lm Lo, \p{N} = Nd
// Nl No, \s = the Unicode White_Space property (as Python's `regex` module and
// Rust's regex crate define it), all taken from ICU. Contractions are
// lowercase-only; the optional leading space is U+0020 only. Bytes that are not
// well-formed UTF-8 are each treated as one "other" character.
//
//   zlm::gpt2_pretokenize(text, [&](std::string_view piece) { ... });
//
// The pieces concatenate back to the input. Thread-safe (the class table is
// built once, on first use, from ICU's category ranges: about 1 ms). Cost: O(n), one table lookup per code
// point, no allocation. gpt2_pretokenize_reference() runs the same pattern
// through ICU's regex engine: slow, obvious, used by tests to check the
// scanner.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/core/utf8.h"

namespace zlm {

enum class CharClass : uint8_t { Other = 0, Letter = 1, Number = 2, Space = 3 };

// Class of a code point (0..0x10FFFF); Other for anything else.
CharClass gpt2_char_class(uint32_t cp);

// Class of the UTF-8 character at p (before end), its length in *len; an
// ill-formed sequence is Other with the length of its maximal ill-formed part.
// Thread-safe; O(1) after the first call builds the table.
CharClass gpt2_char_class_at(const char* p, const char* end, size_t* len);

template <typename Fn>
void gpt2_pretokenize(std::string_view text, Fn&& fn);

std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

// Slow reference (ICU RegexMatcher). Returns the pieces as byte strings.
std::vector<std::string> gpt2_pretokenize_reference(std::string_view text);

namespace detail {
extern const uint8_t* g_class_table;  // 0x110000 entries, built by init_class_table()
const uint8_t* init_class_table();
// The class by ICU's per-code-point calls, which the table must equal (tests).
CharClass class_reference(uint32_t cp);

// Decodes one code point at p (< end); returns its class and advances *len.
inline CharClass class_at(const char* p, const char* end, size_t* len) {
  auto c = static_cast<uint8_t>(*p);
  if (c < 0x80) {
    *len = 1;
    return static_cast<CharClass>(g_class_table[c]);
  }
  // An ill-formed sequence is one "other" byte.
  const Utf8Step st = utf8_step(p, end);
  *len = st.ok ? st.len : 1;
  return st.ok ? static_cast<CharClass>(g_class_table[st.cp]) : CharClass::Other;
}

// Length of a lowercase contraction ('s 't 're 've 'm 'll 'd) at p, or 0.
inline size_t contraction_at(const char* p, const char* end) {
  if (end - p < 2 || p[0] != '\'') return 0;
  char a = p[1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (end - p >= 3) {
    char b = p[2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}
}  // namespace detail

template <typename Fn>
void gpt2_pretokenize(std::string_view text, Fn&& fn) {
  using detail::class_at;
  if (!detail::g_class_table) detail::init_class_table();
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end) {
    const char* start = p;
    if (size_t k = detail::contraction_at(p, end)) {
      fn(std::string_view(start, k));
      p += k;
      continue;
    }
    size_t len;
    CharClass cls = class_at(p, end, &len);
    if (*p == ' ' && p + 1 < end) {
      size_t len2;
      CharClass cls2 = class_at(p + 1, end, &len2);
      if (cls2 != CharClass::Space) {  // " ?X+" with X = the next character's class
        cls = cls2;
        p += 1;
        len = len2;
      }
    }
    if (cls != CharClass::Space) {
      p += len;
      while (p < end) {
        size_t l;
        if (class_at(p, end, &l) != cls) break;
        p += l;
      }
      fn(std::string_view(start, static_cast<size_t>(p - start)));
      continue;
    }
    // Whitespace run [start, p): \s+(?!\S) keeps all but the last character
    // when a non-space follows; a single one then falls to \s+.
    const char* last = p;
    p += len;
    while (p < end) {
      size_t l;
      if (class_at(p, end, &l) != CharClass::Space) break;
      last = p;
      p += l;
    }
    if (p < end && last > start) p = last;
    fn(std::string_view(start, static_cast<size_t>(p - start)));
  }
}

}  // namespace zlm
