#include "common/text/text_fix.h"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/core/error.h"
#include "common/core/utf8.h"

namespace zlm {
namespace {

#include "common/text/ftfy_tables.inc"

using U32 = std::u32string;

std::string to_utf8(const U32& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

icu::UnicodeString to_icu(const U32& s) {
  return icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(s.data()), static_cast<int32_t>(s.size()));
}

U32 from_icu(const icu::UnicodeString& u) {
  U32 out;
  for (int32_t i = 0; i < u.length();) {
    UChar32 c = u.char32At(i);
    out.push_back(static_cast<char32_t>(c));
    i += U16_LENGTH(c);
  }
  return out;
}

U32 to_u32(std::string_view s) {
  return from_icu(icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size()))));
}

// ---- tables built once ---------------------------------------------------------

struct Tables {
  // Per charmap: code point -> byte for every character it can encode (sloppily).
  std::array<std::unordered_map<char32_t, uint8_t>, kNumCharmaps> encode;
  std::array<std::array<char32_t, 256>, kNumCharmaps> decode;
  int latin1 = -1, windows1252 = -1, macroman = -1;
  std::unordered_map<std::string, U32> entities;
  std::unordered_map<char32_t, U32> width, ligatures;
  std::unordered_set<char32_t> controls;
  std::unordered_map<char32_t, U32> invalid_charrefs;
  std::unique_ptr<icu::RegexPattern> badness, utf8_detector;
  // Non-ASCII characters that occur in the badness pattern (in a class or as a
  // literal): every match contains one, and no match is longer than 6 characters.
  std::vector<bool> badness_chars = std::vector<bool>(0x10000, false);
  // BMP characters >= 0x80 that no ftfy step changes except uncurl_quotes, and
  // that cannot take part in a badness match alone (see is_bad): NFC-inert,
  // not C1, not U+00C2/U+00C3/U+0152/U+0153, no ligature or width mapping, not a
  // line break, not a removed control character.
  std::vector<bool> safe = std::vector<bool>(0x10000, false);
  const icu::Normalizer2* nfc = nullptr;
};

// The characters of a regex pattern's classes and literals (an escape outside
// a class is skipped: \x{..}, \p{..} are ASCII-only in ftfy's patterns).
icu::UnicodeSet pattern_characters(const char* pattern) {
  const icu::UnicodeString pat = icu::UnicodeString::fromUTF8(pattern);
  icu::UnicodeSet all;
  for (int32_t i = 0; i < pat.length();) {
    const UChar32 c = pat.char32At(i);
    if (c == '\\') {
      i += 2;
      continue;
    }
    if (c == '[') {
      int32_t depth = 0, j = i;
      for (; j < pat.length(); ++j) {
        const UChar32 d = pat.charAt(j);
        if (d == '\\') { ++j; continue; }
        if (d == '[') ++depth;
        if (d == ']' && --depth == 0) break;
      }
      UErrorCode cs = U_ZERO_ERROR;
      const icu::UnicodeSet set(icu::UnicodeString(pat, i, j - i + 1), cs);
      if (U_FAILURE(cs)) throw Error(ErrorKind::Internal, "badness class at %d: %s", i, u_errorName(cs));
      all.addAll(set);
      i = j + 1;
      continue;
    }
    all.add(c);
    i += U16_LENGTH(c);
  }
  return all;
}

// The generated tables (ftfy_tables.inc) into lookup structures.
void load_maps(Tables& t) {
  for (int e = 0; e < kNumCharmaps; ++e) {
    const std::string name = kCharmapNames[e];
    if (name == "latin-1") t.latin1 = e;
    if (name == "sloppy-windows-1252") t.windows1252 = e;
    if (name == "macroman") t.macroman = e;
    // ftfy's possible_encoding admits U+0000-0019, U+001B-007F (encoded as
    // themselves) and the decodings of the bytes 0x80-0xFF and 0x1A.
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = kCharmaps[e][b];
      t.decode[e][b] = cp;
      if ((b >= 0x80 || b == 0x1A) && cp != 0xFFFFFFFF) t.encode[e].emplace(cp, static_cast<uint8_t>(b));
    }
  }
  for (const auto& ent : kHtmlEntities) t.entities.emplace(ent.name, to_u32(ent.text));
  for (const auto& m : kWidthMap) t.width.emplace(m.from, to_u32(m.to));
  for (const auto& m : kLigatures) t.ligatures.emplace(m.from, to_u32(m.to));
  for (uint32_t c : kControlChars) t.controls.insert(c);
  for (const auto& m : kInvalidCharrefs) t.invalid_charrefs.emplace(m.from, to_u32(m.to));
}

// The compiled patterns, the badness characters and the safe set (see Tables).
void load_patterns(Tables& t) {
  UErrorCode st = U_ZERO_ERROR;
  UParseError pe;
  t.badness.reset(icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(kBadnessPattern), pe, st));
  if (U_FAILURE(st)) throw Error(ErrorKind::Internal, "badness regex: %s at offset %d", u_errorName(st), pe.offset);
  t.utf8_detector.reset(icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(kUtf8DetectorPattern), pe, st));
  if (U_FAILURE(st)) throw Error(ErrorKind::Internal, "utf8 detector regex: %s at offset %d", u_errorName(st), pe.offset);
  const icu::UnicodeSet all = pattern_characters(kBadnessPattern);
  for (UChar32 c = 0x80; c < 0x10000; ++c) t.badness_chars[c] = all.contains(c);
  t.nfc = icu::Normalizer2::getNFCInstance(st);
  if (U_FAILURE(st)) throw Error(ErrorKind::Internal, "NFC: %s", u_errorName(st));
  for (UChar32 c = 0xA0; c < 0x10000; ++c) {
    if (U16_IS_SURROGATE(c) || c == 0xC2 || c == 0xC3 || c == 0x152 || c == 0x153) continue;
    if (c == 0x2028 || c == 0x2029 || t.controls.count(c) || t.width.count(c) || t.ligatures.count(c)) continue;
    if (!t.nfc->isInert(c)) continue;
    t.safe[c] = true;
  }
}

const Tables& tables() {
  static std::once_flag once;
  static Tables t;
  std::call_once(once, [] {
    load_maps(t);
    load_patterns(t);
  });
  return t;
}

// Per-thread matchers (ICU matchers are not thread-safe).
icu::RegexMatcher& matcher(const icu::RegexPattern& p) {
  thread_local std::unordered_map<const icu::RegexPattern*, std::unique_ptr<icu::RegexMatcher>> m;
  auto& slot = m[&p];
  if (!slot) {
    UErrorCode st = U_ZERO_ERROR;
    slot.reset(p.matcher(st));
  }
  return *slot;
}

// ftfy's is_bad: a search of the badness regex. The regex only runs in small
// windows around the characters that can take part in a match (transparent
// bounds keep the lookarounds and \b exact; anchoring bounds are off so ^ still
// means the start of the text), which skips clean text quickly.
bool is_bad(const U32& text) {
  const Tables& t = tables();
  icu::RegexMatcher& m = matcher(*t.badness);
  icu::UnicodeString u = to_icu(text);
  m.reset(u);
  m.useTransparentBounds(true);
  m.useAnchoringBounds(false);
  const int32_t n = u.length();
  int32_t covered = 0;  // windows already searched end here
  // Only C1 controls, U+00C2, U+00C3, U+0152 and U+0153 take part in a match
  // alone; every other branch of the pattern needs a second non-ASCII
  // character within the (<= 6 character) match.
  auto lone_trigger = [](UChar c) { return (c >= 0x80 && c <= 0x9F) || c == 0xC2 || c == 0xC3 || c == 0x152 || c == 0x153; };
  int32_t prev_non_ascii = -100;
  std::vector<int32_t> non_ascii;
  for (int32_t i = 0; i < n; ++i)
    if (u.charAt(i) >= 0x80) non_ascii.push_back(i);
  size_t k = 0;
  for (int32_t i = 0; i < n; ++i) {
    UChar c = u.charAt(i);
    if (c < 0x80) continue;
    int32_t next_non_ascii = k + 1 < non_ascii.size() ? non_ascii[k + 1] : INT32_MAX;
    bool near_other = i - prev_non_ascii <= 5 || next_non_ascii - i <= 5;
    prev_non_ascii = i;
    ++k;
    if (U16_IS_SURROGATE(c) || !t.badness_chars[c]) continue;
    if (!lone_trigger(c) && !near_other) continue;
    int32_t start = std::max(covered, std::max(0, i - 6)), limit = std::min(n, i + 7);
    if (start >= limit) continue;
    UErrorCode st = U_ZERO_ERROR;
    m.region(start, limit, st);
    if (m.find(st)) return true;
    covered = std::max(covered, i + 1);
  }
  return false;
}

bool all_ascii(const U32& s) {
  for (char32_t c : s)
    if (c >= 0x80) return false;
  return true;
}

bool possible_encoding(const U32& s, int e) {
  const auto& enc = tables().encode[e];
  for (char32_t c : s)
    if ((c >= 0x80 || c == 0x1A) && !enc.count(c)) return false;
  return true;
}

std::string encode_charmap(const U32& s, int e) {
  const auto& enc = tables().encode[e];
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) out.push_back(c < 0x80 && c != 0x1A ? static_cast<char>(c) : static_cast<char>(enc.at(c)));
  return out;
}

// ---- byte-level fixes on the re-encoded bytes -------------------------------------

bool in(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }
bool cont_no_85_a0(uint8_t b) { return in(b, 0x80, 0x84) || in(b, 0x86, 0x9F) || in(b, 0xA1, 0xBF); }

// Length of a match of ftfy's ALTERED_UTF8_RE at p (0: none).
size_t altered_utf8_at(const std::string& s, size_t p) {
  auto at = [&](size_t k) -> int { return p + k < s.size() ? static_cast<uint8_t>(s[p + k]) : -1; };
  int a = at(0), b = at(1), c = at(2), d = at(3);
  if ((a == 0xC2 || a == 0xC3 || a == 0xC5 || a == 0xCE || a == 0xD0 || a == 0xD9) && b == 0x20) return 2;
  if ((a == 0xE2 || a == 0xE3) && b == 0x20 && c >= 0 && cont_no_85_a0(static_cast<uint8_t>(c))) return 3;
  if (a >= 0xE0 && a <= 0xE3 && b >= 0 && cont_no_85_a0(static_cast<uint8_t>(b)) && c == 0x20) return 3;
  auto cb = [](int x) { return x >= 0x80 && x <= 0xBF; };
  if (a == 0xF0 && b == 0x20 && cb(c) && cb(d)) return 4;
  if (a == 0xF0 && cb(b) && c == 0x20 && cb(d)) return 4;
  if (a == 0xF0 && cb(b) && cb(c) && d == 0x20) return 4;
  return 0;
}

bool has_altered_utf8(const std::string& s) {
  for (size_t p = 0; p < s.size(); ++p)
    if (altered_utf8_at(s, p)) return true;
  return false;
}

std::string restore_byte_a0(const std::string& in_bytes) {
  // \xc3 followed by a space that does not start " ", "quele", "quela", "quilo" or "s " -> "\xc3\xa0 ".
  std::string s;
  for (size_t p = 0; p < in_bytes.size(); ++p) {
    if (static_cast<uint8_t>(in_bytes[p]) == 0xC3 && p + 1 < in_bytes.size() && in_bytes[p + 1] == ' ') {
      std::string_view rest(in_bytes.data() + p + 2, in_bytes.size() - p - 2);
      bool excluded = rest.substr(0, 1) == " " || rest.substr(0, 5) == "quele" || rest.substr(0, 5) == "quela" ||
                      rest.substr(0, 5) == "quilo" || rest.substr(0, 2) == "s ";
      if (!excluded) {
        s += "\xc3\xa0 ";
        ++p;
        continue;
      }
    }
    s.push_back(in_bytes[p]);
  }
  std::string out;
  for (size_t p = 0; p < s.size();) {
    size_t n = altered_utf8_at(s, p);
    if (n) {
      for (size_t k = 0; k < n; ++k) out.push_back(s[p + k] == ' ' ? '\xa0' : s[p + k]);
      p += n;
    } else {
      out.push_back(s[p++]);
    }
  }
  return out;
}

// Length of a match of ftfy's LOSSY_UTF8_RE at p (0: none).
size_t lossy_at(const std::string& s, size_t p) {
  auto at = [&](size_t k) -> int { return p + k < s.size() ? static_cast<uint8_t>(s[p + k]) : -1; };
  auto q = [](int x) { return x == 0x1A || x == '?'; };
  auto c1 = [](int x) { return x == 0x1A || (x >= 0x80 && x <= 0xBF); };
  auto c2 = [](int x) { return x == 0x1A || x == '?' || (x >= 0x80 && x <= 0xBF); };
  int a = at(0), b = at(1), c = at(2), d = at(3), e = at(4), f = at(5);
  if (a >= 0xC2 && a <= 0xDF && b == 0x1A) return 2;
  if ((a == 0xC2 || a == 0xC3) && b == '?') return 2;
  if (a == 0xED && b >= 0xA0 && b <= 0xAF && q(c) && d == 0xED && e >= 0xB0 && e <= 0xBF && c2(f)) return 6;
  if (a == 0xED && b >= 0xA0 && b <= 0xAF && c2(c) && d == 0xED && e >= 0xB0 && e <= 0xBF && q(f)) return 6;
  if (a >= 0xE0 && a <= 0xEF && q(b) && c1(c)) return 3;
  if (a >= 0xE0 && a <= 0xEF && c1(b) && q(c)) return 3;
  if (a >= 0xF0 && a <= 0xF4 && q(b) && c1(c) && c1(d)) return 4;
  if (a >= 0xF0 && a <= 0xF4 && c1(b) && q(c) && c1(d)) return 4;
  if (a >= 0xF0 && a <= 0xF4 && c1(b) && c1(c) && q(d)) return 4;
  if (a == 0x1A) return 1;
  return 0;
}

std::string replace_lossy_sequences(const std::string& s) {
  std::string out;
  for (size_t p = 0; p < s.size();) {
    size_t n = lossy_at(s, p);
    if (n) {
      out += "\xef\xbf\xbd";
      p += n;
    } else {
      out.push_back(s[p++]);
    }
  }
  return out;
}

// Strict UTF-8 (Python's decoder); with `variants`, also CESU-8 surrogate pairs
// and the two-byte null C0 80 (ftfy's "utf-8-variants"). false on any error.
bool decode_utf8(const std::string& s, bool variants, U32* out) {
  out->clear();
  size_t i = 0;
  auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  while (i < s.size()) {
    uint8_t c = b(i);
    if (variants && c == 0xC0 && i + 1 < s.size() && b(i + 1) == 0x80) {
      out->push_back(0);
      i += 2;
      continue;
    }
    if (variants && c == 0xED && i + 5 < s.size() && in(b(i + 1), 0xA0, 0xAF) && in(b(i + 2), 0x80, 0xBF) && b(i + 3) == 0xED &&
        in(b(i + 4), 0xB0, 0xBF) && in(b(i + 5), 0x80, 0xBF)) {
      uint32_t hi = 0xD000 | ((b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F);
      uint32_t lo = 0xD000 | ((b(i + 4) & 0x3F) << 6) | (b(i + 5) & 0x3F);
      out->push_back(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
      i += 6;
      continue;
    }
    const Utf8Step st = utf8_step(s.data() + i, s.data() + s.size());
    if (!st.ok) return false;
    out->push_back(st.cp);
    i += st.len;
  }
  return true;
}

U32 fix_encoding(const U32& text);

U32 fix_c1_controls(const U32& text) {
  const Tables& t = tables();
  U32 out = text;
  for (char32_t& c : out)
    if (c >= 0x80 && c <= 0x9F) c = t.decode[t.windows1252][c];
  return out;
}

U32 decode_inconsistent_utf8(const U32& text) {
  icu::RegexMatcher& m = matcher(*tables().utf8_detector);
  icu::UnicodeString u = to_icu(text);
  m.reset(u);
  UErrorCode st = U_ZERO_ERROR;
  icu::UnicodeString result;
  int32_t last = 0;
  std::vector<std::pair<int32_t, int32_t>> spans;
  while (m.find(st) && U_SUCCESS(st)) spans.emplace_back(m.start(st), m.end(st));
  for (auto [a, b] : spans) {
    result.append(u, last, a - last);
    U32 sub = from_icu(icu::UnicodeString(u, a, b - a));
    if (sub.size() < text.size() && is_bad(sub)) result.append(to_icu(fix_encoding(sub)));
    else result.append(u, a, b - a);
    last = b;
  }
  result.append(u, last, u.length() - last);
  return from_icu(result);
}

// One step of ftfy's fix_encoding; returns the text unchanged when done.
U32 fix_encoding_step(const U32& text) {
  const Tables& t = tables();
  if (text.empty() || all_ascii(text) || !is_bad(text)) return text;
  std::vector<int> possible;
  for (int e = 0; e < kNumCharmaps; ++e) {
    if (!possible_encoding(text, e)) continue;
    possible.push_back(e);
    std::string bytes = encode_charmap(text, e);
    if (e != t.macroman && has_altered_utf8(bytes)) bytes = restore_byte_a0(bytes);
    if (std::string_view(kCharmapNames[e]).substr(0, 6) == "sloppy") bytes = replace_lossy_sequences(bytes);
    bool variants = bytes.find('\xed') != std::string::npos || bytes.find('\xc0') != std::string::npos;
    U32 fixed;
    if (decode_utf8(bytes, variants, &fixed)) return fixed;
  }
  {
    icu::RegexMatcher& m = matcher(*t.utf8_detector);
    icu::UnicodeString u = to_icu(text);
    m.reset(u);
    UErrorCode st = U_ZERO_ERROR;
    if (m.find(0, st)) {
      U32 fixed = decode_inconsistent_utf8(text);
      if (fixed != text) return fixed;
    }
  }
  auto has = [&](int e) { return std::find(possible.begin(), possible.end(), e) != possible.end(); };
  if (has(t.latin1)) {
    if (has(t.windows1252)) return text;
    // encode latin-1, decode windows-1252 (strict: undefined bytes fail)
    U32 fixed;
    bool ok = true;
    for (char32_t c : text) {
      if (c >= 0x80 && c <= 0xFF) {
        static const std::u32string undefined = U"\x81\x8d\x8f\x90\x9d";
        if (undefined.find(c) != std::u32string::npos) ok = false;
        fixed.push_back(t.decode[t.windows1252][c]);
      } else {
        fixed.push_back(c);
      }
    }
    if (ok && fixed != text) return fixed;
  }
  for (char32_t c : text)
    if (c >= 0x80 && c <= 0x9F) return fix_c1_controls(text);
  return text;
}

U32 fix_encoding(const U32& text) {
  U32 cur = text;
  for (;;) {
    U32 next = fix_encoding_step(cur);
    if (next == cur) return cur;
    cur = std::move(next);
  }
}

// ---- the other fixers -------------------------------------------------------------

bool ascii_alnum(char32_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Python html.unescape of one numeric reference "&#...;" (None-like empty result means: keep).
U32 unescape_numeric(const U32& ref) {
  const Tables& t = tables();
  bool hex = ref.size() > 3 && (ref[2] == 'x' || ref[2] == 'X');
  size_t start = hex ? 3 : 2;
  uint64_t v = 0;
  size_t digits = 0;
  for (size_t i = start; i + 1 < ref.size(); ++i, ++digits) {
    char32_t c = ref[i];
    int d = (c >= '0' && c <= '9') ? c - '0' : hex && (c >= 'a' && c <= 'f') ? c - 'a' + 10 : hex && (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
    if (d < 0) return ref;  // html.unescape leaves it (then it still contains ';')
    v = std::min<uint64_t>(v * (hex ? 16 : 10) + static_cast<uint64_t>(d), 0x110000);
  }
  if (digits == 0) return ref;
  auto it = t.invalid_charrefs.find(static_cast<char32_t>(v));
  if (it != t.invalid_charrefs.end()) return it->second;
  if ((v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF) return U"\ufffd";
  static const std::u32string invalid_codepoints = U"\x01\x02\x03\x04\x05\x06\x07\x08\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f\x80\x81\x82\x83\x84\x85\x86\x87\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f\x90\x91\x92\x93\x94\x95\x96\x97\x98\x99\x9a\x9b\x9c\x9d\x9e\x9f\x0b";
  bool invalid = (v >= 0xFDD0 && v <= 0xFDEF) || (v & 0xFFFE) == 0xFFFE || invalid_codepoints.find(static_cast<char32_t>(v)) != std::u32string::npos;
  if (invalid) return U"";  // html.unescape drops these
  return U32(1, static_cast<char32_t>(v));
}

U32 unescape_html(const U32& text) {
  const Tables& t = tables();
  U32 out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '&') {
      size_t j = i + 1;
      if (j < text.size() && text[j] == '#') ++j;
      size_t k = j;
      while (k < text.size() && k - j < 25 && ascii_alnum(text[k])) ++k;
      if (k > j && k - j <= 24 && k < text.size() && text[k] == ';') {
        U32 ref = text.substr(i, k - i + 1);
        std::string key = to_utf8(ref);
        auto it = t.entities.find(key);
        if (it != t.entities.end()) {
          out += it->second;
          i = k + 1;
          continue;
        }
        if (ref.size() > 1 && ref[1] == '#') {
          // ftfy: numeric references through html.unescape; if the result still has ';', keep the text.
          U32 rep = ref.size() >= 4 ? unescape_numeric(ref) : ref;
          if (rep.find(U';') == U32::npos) {
            out += rep;
            i = k + 1;
            continue;
          }
        }
        out += ref;
        i = k + 1;
        continue;
      }
    }
    out.push_back(text[i++]);
  }
  return out;
}

U32 remove_terminal_escapes(const U32& text) {
  U32 out;
  for (size_t i = 0; i < text.size();) {
    if (text[i] == 0x1B && i + 1 < text.size() && text[i + 1] == '[') {
      size_t k = i + 2;
      while (k < text.size() && ((text[k] >= '0' && text[k] <= '9') || text[k] == ';' || u_charType(static_cast<UChar32>(text[k])) == U_DECIMAL_DIGIT_NUMBER)) ++k;
      if (k < text.size() && ((text[k] >= 'a' && text[k] <= 'z') || (text[k] >= 'A' && text[k] <= 'Z'))) {
        i = k + 1;
        continue;
      }
    }
    out.push_back(text[i++]);
  }
  return out;
}

U32 translate(const U32& text, const std::unordered_map<char32_t, U32>& map) {
  bool any = false;  // ligatures and width forms live above U+0131
  for (char32_t c : text) any |= c >= 0x132 && map.count(c);
  if (!any) return text;
  U32 out;
  out.reserve(text.size());
  for (char32_t c : text) {
    auto it = map.find(c);
    if (it != map.end()) out += it->second;
    else out.push_back(c);
  }
  return out;
}

U32 other_fixers(const U32& in_text) {
  const Tables& t = tables();
  U32 text = in_text;
  for (char32_t c : text)
    if (c >= 0x80 && c <= 0x9F) {
      text = fix_c1_controls(text);
      break;
    }
  text = translate(text, t.ligatures);
  text = translate(text, t.width);
  for (char32_t& c : text) {  // uncurl_quotes
    if (c == 0x02BC || (c >= 0x2018 && c <= 0x201B)) c = '\'';
    else if (c >= 0x201C && c <= 0x201F) c = '"';
  }
  U32 lines;  // fix_line_breaks
  for (size_t i = 0; i < text.size(); ++i) {
    char32_t c = text[i];
    if (c == '\r') {
      lines.push_back('\n');
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else if (c == 0x2028 || c == 0x2029 || c == 0x85) {
      lines.push_back('\n');
    } else {
      lines.push_back(c);
    }
  }
  text = remove_terminal_escapes(lines);  // (fix_surrogates: no surrogates in valid UTF-8)
  U32 out;
  out.reserve(text.size());
  for (char32_t c : text)
    if (!t.controls.count(c)) out.push_back(c);
  return out;
}

U32 fix_segment(const U32& segment, bool unescape) {
  const Tables& t = tables();
  U32 text = segment;
  for (;;) {
    U32 orig = text;
    if (unescape) text = unescape_html(text);
    text = fix_encoding(text);
    text = other_fixers(text);
    bool inert = true;  // NFC cannot change a text of normalization-inert characters
    for (char32_t c : text)
      if (c >= 0x300 && !t.nfc->isInert(static_cast<UChar32>(c))) {
        inert = false;
        break;
      }
    if (!inert) {
      UErrorCode st = U_ZERO_ERROR;
      icu::UnicodeString u = to_icu(text);
      if (!t.nfc->isNormalized(u, st)) text = from_icu(t.nfc->normalize(u, st));
    }
    if (text == orig) return text;
  }
}

}  // namespace

bool text_is_bad(std::string_view text) { return is_bad(to_u32(text)); }

// A line that no step can change: ASCII without '&' (while entities are
// unescaped), '\r' or a control character ftfy removes.
bool trivially_clean(std::string_view line, bool unescape) {
  for (char ch : line) {
    auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80 || c == '\r' || (c == '&' && unescape)) return false;
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\f') return false;
    if (c == 0x7F) return false;
  }
  return true;
}

// Fast path for a line whose non-ASCII characters are all "safe" and at least
// 6 characters apart (so no badness match is possible): ftfy then only
// uncurls quotes. Appends the result and returns true, or returns false.
bool fix_simple_line(std::string_view line, bool unescape, std::string& out) {
  const Tables& t = tables();
  const size_t mark = out.size();
  int64_t last_non_ascii = -100, chars = 0;
  auto give_up = [&] {
    out.resize(mark);
    return false;
  };
  for (size_t i = 0; i < line.size(); ++chars) {
    auto c = static_cast<unsigned char>(line[i]);
    if (c < 0x80) {
      if (c == '\r' || (c == '&' && unescape) || c == 0x7F || (c < 0x20 && c != '\t' && c != '\n' && c != '\f')) return give_up();
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (n == 4 || i + n > line.size()) return give_up();  // astral characters: the full path
    uint32_t cp = n == 2 ? ((c & 0x1Fu) << 6) | (line[i + 1] & 0x3F)
                         : ((c & 0x0Fu) << 12) | ((line[i + 1] & 0x3Fu) << 6) | (line[i + 2] & 0x3F);
    if (!t.safe[cp] || chars - last_non_ascii <= 5) return give_up();
    last_non_ascii = chars;
    if (cp == 0x2BC || (cp >= 0x2018 && cp <= 0x201B)) out.push_back('\'');
    else if (cp >= 0x201C && cp <= 0x201F) out.push_back('"');
    else out.append(line.substr(i, n));
    i += n;
  }
  return true;
}

std::string fix_text(std::string_view utf8) {
  std::string out;
  out.reserve(utf8.size());
  bool unescape = true;  // ftfy's "auto": off from the first segment that contains '<' on
  const size_t kMaxSegment = 1000000;
  size_t pos = 0;
  while (pos < utf8.size()) {
    size_t nl = utf8.find('\n', pos);
    size_t end = nl == std::string_view::npos ? utf8.size() : nl + 1;
    std::string_view line = utf8.substr(pos, end - pos);
    if (unescape && line.find('<') != std::string_view::npos) unescape = false;
    if (trivially_clean(line, unescape)) {
      out.append(line);
      pos = end;
      continue;
    }
    if (fix_simple_line(line, unescape, out)) {
      pos = end;
      continue;
    }
    // ftfy segments are lines of at most 1M code points.
    U32 text = to_u32(line);
    for (size_t p = 0; p < text.size(); p += kMaxSegment) {
      U32 segment = text.substr(p, kMaxSegment);
      out += to_utf8(fix_segment(segment, unescape));
    }
    pos = end;
  }
  return out;
}

}  // namespace zlm
