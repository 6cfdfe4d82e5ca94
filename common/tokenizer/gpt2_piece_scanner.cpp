// scan_pieces with Highway: compiled once per x86 target (SSE4, AVX2, AVX-512) and
// once without SIMD by foreach_target.h, which includes this file again for each.
// The target is picked once per process (runnable_targets-inl.h), not by
// HWY_DYNAMIC_DISPATCH: that needs libhwy.so, whose load-time initialiser
// (nanobenchmark's timer calibration) costs ~6 ms per process on this machine,
// as much as the rest of preprocess_data's start-up.
//
// A window of 64 bytes from the scan position is classified with SIMD into one
// bit mask per ASCII class (letter, number, space, other) and masks of ' ',
// apostrophes and non-ASCII bytes; the window's non-ASCII characters, if any, are
// then decoded one by one and their bytes put in their class's mask. Where pieces
// start follows from the masks with a few shifts for all 64 bytes at once
// (piece_starts), and the starts are read off with a count of trailing zeros
// each: ASCII text costs no branch per byte or per piece. The window then moves
// to the start of its last piece, whose end it cannot see. What a window cannot
// decide goes to next_piece, one character at a time: a piece that starts with a
// non-ASCII White_Space character or runs on past the window.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "common/tokenizer/gpt2_piece_scanner.cpp"
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_AVX3_DL)  // not picked by runnable_targets-inl.h
#endif
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <vector>
#include <bit>
#include <cstring>

#include "common/core/simd_support.h"
#include "common/tokenizer/gpt2_pretokenizer.h"

#ifndef ZLM_GPT2_PIECE_SCANNER_ONCE
#define ZLM_GPT2_PIECE_SCANNER_ONCE
namespace zlm::detail {
constexpr size_t kWindow = 64;

// The window's first n bytes as a mask (n <= 64; a shift by 64 is undefined).
inline uint64_t first_bytes(size_t n) { return n >= kWindow ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

// The class masks of one window: bit k is byte k of the window; bits at or past
// the text's end are clear.
struct WindowMasks {
  uint64_t other, letter, number, space;  // ASCII bytes by class (space: White_Space)
  uint64_t high;                          // bytes >= 0x80
  uint64_t quote;                         // '\''
  uint64_t blank;                         // ' '
  uint64_t valid;                         // the bytes that are text
};

// Where pieces start in the window, all at once. The window starts at a piece's
// start. Elsewhere a piece starts where the class changes, except that
//  - a ' ' before text that is not a space starts the run after it (" ?X+");
//  - a run of spaces followed by text leaves its last space to what follows
//    (\s+(?!\S)): either that ' ' joins the run, or a lone space piece results.
// So byte k's bit depends on bytes k-1, k and k+1 only. Contractions are not
// looked at here (the caller stops at an apostrophe that starts a piece).
inline uint64_t piece_starts(const WindowMasks& m) {
  const auto changed = [](uint64_t c) { return c ^ (c << 1); };
  const uint64_t change =
      (changed(m.letter) | changed(m.number) | changed(m.other) | changed(m.space) | 1) & m.valid;
  const uint64_t after_space = change & ~m.space & (m.space << 1);  // text right after a space
  return (change & ~(after_space & (m.blank << 1))) | (after_space >> 1);
}

// Whether the apostrophe at w[k] starts a lowercase contraction: 0 if not, else
// its length, or kWindow when the window ends too soon to tell.
inline size_t contraction_in_window(const uint8_t* w, size_t k, bool more) {
  if (k + 3 > kWindow && more) return kWindow;
  const uint8_t a = k + 1 < kWindow ? w[k + 1] : 0, b = k + 2 < kWindow ? w[k + 2] : 0;  // zeros past the text
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// How many bytes of the window have starts that piece_starts tells right. Those
// it finds at k need byte k+1 only to add a start at k (a space before text),
// so past the window's end they may miss one but never put one wrong: every
// byte counts, and the window ends at its last start. A non-ASCII space has no
// class here (classify_non_ascii): the byte before it is out. A contraction that starts a piece ends
// what counts after its start (the next window starts with it).
inline size_t decided_bytes(const WindowMasks& m, const uint8_t* w, uint64_t starts, size_t limit, bool more) {
  size_t t = limit;
  if (m.high) t = std::min(t, static_cast<size_t>(std::countr_zero(m.high)) - 1);  // high's first bit > 0 here
  for (uint64_t q = starts & m.quote & first_bytes(t) & ~uint64_t{1}; q; q &= q - 1) {
    const auto k = static_cast<size_t>(std::countr_zero(q));
    if (contraction_in_window(w, k, more)) return k + 1;
  }
  return t;
}

// One piece by next_piece, then more while the text goes on with non-ASCII bytes.
inline size_t scalar_pieces(const char*& p, const char* end, const char** ends, size_t n, size_t cap) {
  do {
    p = next_piece(p, end);
    ends[n++] = p;
  } while (n < cap && p < end && static_cast<uint8_t>(*p) >= 0x80);
  return n;
}

// Gives the window's non-ASCII characters (the text at p) their class: each of
// their bytes joins the class's mask, so piece_starts treats the character as one
// unit. A White_Space character stays in `high` with what follows it (its last
// byte is not where a run of spaces gives up its last character), and so do
// ill-formed bytes' neighbours only as far as class_at takes them: one Other
// character per ill-formed byte, as next_piece reads them.
inline void classify_non_ascii(WindowMasks& m, const char* p, const char* end) {
  while (m.high) {
    const auto k = static_cast<size_t>(std::countr_zero(m.high));
    size_t len;
    const CharClass cls = class_at(p + k, end, &len);
    if (cls == CharClass::Space) return;
    const uint64_t bytes = first_bytes(std::min(len, kWindow - k)) << k & m.valid;
    (cls == CharClass::Letter ? m.letter : cls == CharClass::Number ? m.number : m.other) |= bytes;
    m.high &= ~bytes;
  }
}
}  // namespace zlm::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace zlm {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The masks of the 64 bytes at w (all readable); bits at or past limit are clear.
HWY_INLINE detail::WindowMasks classify(const uint8_t* w, size_t limit) {
  uint8_t bits[7][8] = {};
#if HWY_TARGET == HWY_SCALAR
  for (size_t k = 0; k < detail::kWindow; ++k) {
    const uint8_t c = w[k];
    const uint8_t lower = c | 0x20;
    const bool letter = lower >= 'a' && lower <= 'z', number = c >= '0' && c <= '9';
    const bool space = c == ' ' || (c >= 9 && c <= 13), high = c >= 0x80;
    const bool flags[7] = {!letter && !number && !space && !high, letter, number, space, high, c == '\'', c == ' '};
    for (int f = 0; f < 7; ++f) bits[f][k / 8] |= static_cast<uint8_t>(flags[f] << (k % 8));
  }
#else
  const hn::CappedTag<int8_t, detail::kWindow> d;  // never past the window's 64 bytes
  const size_t lanes = hn::Lanes(d);
  for (size_t k = 0; k < detail::kWindow; k += lanes) {
    const auto v = hn::LoadU(d, reinterpret_cast<const int8_t*>(w + k));
    const auto lower = hn::Or(v, hn::Set(d, 0x20));
    const auto letter = hn::And(hn::Gt(lower, hn::Set(d, 'a' - 1)), hn::Lt(lower, hn::Set(d, 'z' + 1)));
    const auto number = hn::And(hn::Gt(v, hn::Set(d, '0' - 1)), hn::Lt(v, hn::Set(d, '9' + 1)));
    const auto blank = hn::Eq(v, hn::Set(d, ' '));
    const auto space = hn::Or(blank, hn::And(hn::Gt(v, hn::Set(d, 8)), hn::Lt(v, hn::Set(d, 14))));
    const auto high = hn::Lt(v, hn::Zero(d));  // bytes >= 0x80 as int8
    const auto other = hn::Not(hn::Or(hn::Or(letter, number), hn::Or(space, high)));
    hn::StoreMaskBits(d, other, bits[0] + k / 8);
    hn::StoreMaskBits(d, letter, bits[1] + k / 8);
    hn::StoreMaskBits(d, number, bits[2] + k / 8);
    hn::StoreMaskBits(d, space, bits[3] + k / 8);
    hn::StoreMaskBits(d, high, bits[4] + k / 8);
    hn::StoreMaskBits(d, hn::Eq(v, hn::Set(d, '\'')), bits[5] + k / 8);
    hn::StoreMaskBits(d, blank, bits[6] + k / 8);
  }
#endif
  const uint64_t valid = detail::first_bytes(limit);
  uint64_t mask[7];
  for (int f = 0; f < 7; ++f) {
    std::memcpy(&mask[f], bits[f], 8);
    mask[f] &= valid;
  }
  return {mask[0], mask[1], mask[2], mask[3], mask[4], mask[5], mask[6], valid};
}

size_t ScanPieces(const char* p, const char* end, const char** ends, size_t cap) {
  if (!detail::g_class_table) detail::init_class_table();
  size_t n = 0;
  uint8_t tail[detail::kWindow];
  while (n < cap && p < end) {
    if (const size_t k = detail::contraction_at(p, end)) {  // a piece of its own wherever it starts one
      ends[n++] = p += k;
      continue;
    }
    const auto avail = static_cast<size_t>(end - p);
    const uint8_t* w = reinterpret_cast<const uint8_t*>(p);
    if (avail < detail::kWindow) {  // the text's last bytes: a zero-padded copy
      std::memcpy(tail, p, avail);
      std::memset(tail + avail, 0, detail::kWindow - avail);
      w = tail;
    }
    const size_t limit = std::min(avail, detail::kWindow);
    const bool more = avail > detail::kWindow;
    detail::WindowMasks m = classify(w, limit);
    if (m.high) [[unlikely]] {
      detail::classify_non_ascii(m, p, end);
      if (m.high & 1) {  // a White_Space character that is not ASCII
        n = detail::scalar_pieces(p, end, ends, n, cap);
        continue;
      }
    }
    const uint64_t starts = detail::piece_starts(m);
    const size_t decided = detail::decided_bytes(m, w, starts, limit, more);
    // The pieces between the decided starts are whole; so is the last one when
    // the window holds the rest of the text.
    uint64_t inner = starts & ~uint64_t{1} & detail::first_bytes(decided);
    const bool last_is_whole = decided == limit && !more;
    if (!inner && !last_is_whole) {  // the first piece goes past what the window tells
      n = detail::scalar_pieces(p, end, ends, n, cap);
      continue;
    }
    const char* last = p;
    for (; inner && n < cap; inner &= inner - 1) ends[n++] = last = p + std::countr_zero(inner);
    if (!inner && n < cap && last_is_whole) ends[n++] = last = p + limit;
    p = last;
  }
  return n;
}

}  // namespace HWY_NAMESPACE
}  // namespace zlm
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zlm::detail {
namespace {
#define ZLM_TARGET_FN ScanPieces
#include "common/core/runnable_targets-inl.h"
#undef ZLM_TARGET_FN
}  // namespace

size_t scan_pieces(const char* p, const char* end, const char** ends, size_t cap) { return target_table_of_ScanPieces().fn()(p, end, ends, cap); }

size_t scan_pieces_scalar(const char* p, const char* end, const char** ends, size_t cap) {
  if (!g_class_table) init_class_table();
  size_t n = 0;
  while (n < cap && p < end) ends[n++] = p = next_piece(p, end);
  return n;
}

const char* scan_pieces_target() { return target_table_of_ScanPieces().name(); }
size_t scan_pieces_targets() { return target_table_of_ScanPieces().size(); }
void use_scan_target(size_t i) { target_table_of_ScanPieces().use(i); }

}  // namespace zlm::detail
#endif
