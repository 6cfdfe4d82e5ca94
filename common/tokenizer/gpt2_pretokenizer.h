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
// built once, on first use, from ICU's category ranges: about 1 ms). Cost: O(n): text is
// classified 64 bytes at a time (SIMD compares for ASCII bytes, a table lookup per non-ASCII
// character) and cut where the class masks say pieces start; no allocation. gpt2_pretokenize_reference() runs the same pattern
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

// The end of the piece that starts at p (< end), one character at a time: the
// scanner's fallback for what its window cannot decide (a non-ASCII White_Space
// character, a run longer than the window) and the slow obvious definition the
// tests hold it to.
// Needs the class table (init_class_table()).
inline const char* next_piece(const char* p, const char* end) {
  const char* start = p;
  if (size_t k = contraction_at(p, end)) return p + k;
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
    return p;
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
  return (p < end && last > start) ? last : p;
}

// Pieces per call of scan_pieces by gpt2_pretokenize.
constexpr size_t kPieceBatch = 64;

// The ends of up to `cap` (>= 1) consecutive pieces from p (< end) into ends[];
// returns how many (>= 1). Classifies 64 bytes at a time with SIMD (Highway; the
// target picked once per process) and finds pieces from the class bit masks; the
// rest goes through next_piece. Thread-safe.
size_t scan_pieces(const char* p, const char* end, const char** ends, size_t cap);
// The same with next_piece only (tests).
size_t scan_pieces_scalar(const char* p, const char* end, const char** ends, size_t cap);
// The SIMD target scan_pieces runs; how many this CPU runs (the best first), and
// a choice among them (tests: not thread-safe, not for use while scanning).
const char* scan_pieces_target();
size_t scan_pieces_targets();
void use_scan_target(size_t i);
}  // namespace detail

template <typename Fn>
void gpt2_pretokenize(std::string_view text, Fn&& fn) {
  const char* p = text.data();
  const char* end = p + text.size();
  const char* ends[detail::kPieceBatch];
  while (p < end) {
    const size_t n = detail::scan_pieces(p, end, ends, detail::kPieceBatch);
    for (size_t k = 0; k < n; ++k) {
      fn(std::string_view(p, static_cast<size_t>(ends[k] - p)));
      p = ends[k];
    }
  }
}

}  // namespace zlm
