#include "tools/download_urls/charset.h"

#include <unicode/ucnv.h>
#include <unicode/ucsdet.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "common/core/ascii.h"
#include "common/core/utf8.h"

namespace zlm::web {
namespace {

std::string lower_trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '"' || s.front() == '\'')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '"' || s.back() == '\'' || s.back() == ';'))
    s.remove_suffix(1);
  return ascii_lower(s);
}

// The value after "charset" (and '=') at s[pos...], unquoted; "" when there is none.
std::string value_after_charset(std::string_view s, size_t pos) {
  pos += 7;  // "charset"
  while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t')) ++pos;
  if (pos >= s.size() || s[pos] != '=') return {};
  ++pos;
  while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '"' || s[pos] == '\'')) ++pos;
  size_t end = pos;
  while (end < s.size() && s[end] != '"' && s[end] != '\'' && s[end] != ';' && s[end] != ' ' && s[end] != '>' &&
         s[end] != '/' && s[end] != ',')
    ++end;
  return lower_trim(s.substr(pos, end - pos));
}

size_t find_ci(std::string_view hay, std::string_view needle, size_t from) {
  for (size_t i = from; i + needle.size() <= hay.size(); ++i)
    if (ascii_iequals(hay.substr(i, needle.size()), needle)) return i;
  return std::string_view::npos;
}

// Converts with ICU, invalid input as U+FFFD (counted through the callback context).
bool convert_with_icu(std::string_view in, const std::string& charset, DecodedPage& page) {
  UErrorCode status = U_ZERO_ERROR;
  UConverter* conv = ucnv_open(charset.c_str(), &status);
  if (U_FAILURE(status) || !conv) return false;
  std::unique_ptr<UConverter, void (*)(UConverter*)> guard(conv, ucnv_close);
  // UTF-16 first, then UTF-8 (ucnv_toUChars, then u_strToUTF8 through a second converter).
  std::vector<UChar> u16(in.size() * 2 + 16);
  const int32_t n16 = ucnv_toUChars(conv, u16.data(), static_cast<int32_t>(u16.size()), in.data(),
                                    static_cast<int32_t>(in.size()), &status);
  if (U_FAILURE(status)) return false;
  std::string utf8;
  utf8.reserve(static_cast<size_t>(n16) * 3 / 2);
  uint64_t replaced = 0;
  for (int32_t i = 0; i < n16; ++i) {
    uint32_t cp = u16[i];
    if (cp >= 0xD800 && cp <= 0xDBFF && i + 1 < n16 && u16[i + 1] >= 0xDC00 && u16[i + 1] <= 0xDFFF) {
      cp = 0x10000 + ((cp - 0xD800) << 10) + (u16[i + 1] - 0xDC00);
      ++i;
    } else if (cp >= 0xD800 && cp <= 0xDFFF) {
      cp = 0xFFFD;
    }
    if (cp == 0xFFFD || cp == 0x1A) ++replaced;  // ICU substitutes U+FFFD (Unicode charsets) or SUB (legacy ones)
    if (cp == 0x1A) cp = 0xFFFD;
    append_utf8(utf8, cp);
  }
  page.utf8 = std::move(utf8);
  const char* name = ucnv_getName(conv, &status);
  const char* iana = U_SUCCESS(status) ? ucnv_getStandardName(name, "IANA", &status) : nullptr;
  page.charset = U_SUCCESS(status) && iana ? iana : name ? name : charset;
  page.replaced = replaced;
  return true;
}

std::string detect_charset(std::string_view body) {
  UErrorCode status = U_ZERO_ERROR;
  UCharsetDetector* det = ucsdet_open(&status);
  if (U_FAILURE(status)) return {};
  std::unique_ptr<UCharsetDetector, void (*)(UCharsetDetector*)> guard(det, ucsdet_close);
  const size_t n = std::min<size_t>(body.size(), 64 * 1024);
  ucsdet_enableInputFilter(det, true);  // skip markup
  ucsdet_setText(det, body.data(), static_cast<int32_t>(n), &status);
  const UCharsetMatch* match = ucsdet_detect(det, &status);
  if (U_FAILURE(status) || !match) return {};
  const char* name = ucsdet_getName(match, &status);
  return U_SUCCESS(status) && name ? canonical_charset(name) : std::string{};
}

}  // namespace

// Mostly UTF-8: some valid multi-byte sequences, and invalid ones at most 1/ratio of
// them (a page in UTF-8 with a few broken bytes, not a page in another charset).
bool mostly_utf8(std::string_view s, uint64_t ratio) {
  uint64_t valid = 0, invalid = 0;
  const char* p = s.data();
  const char* end = p + s.size();
  while (p < end) {
    if (static_cast<unsigned char>(*p) < 0x80) {
      ++p;
      continue;
    }
    const Utf8Step st = utf8_step(p, end);
    (st.ok ? valid : invalid) += 1;
    p += st.len;
  }
  return valid > 0 && invalid * ratio <= valid;
}

std::string charset_from_content_type(std::string_view content_type) {
  const size_t at = find_ci(content_type, "charset", 0);
  if (at == std::string_view::npos) return {};
  return value_after_charset(content_type, at);
}

std::string charset_from_meta(std::string_view html, size_t scan_bytes) {
  html = html.substr(0, std::min(html.size(), scan_bytes));
  for (size_t at = find_ci(html, "<meta", 0); at != std::string_view::npos; at = find_ci(html, "<meta", at + 5)) {
    const size_t close = html.find('>', at);
    const std::string_view tag = html.substr(at, close == std::string_view::npos ? html.size() - at : close - at);
    const size_t cs = find_ci(tag, "charset", 0);
    if (cs == std::string_view::npos) continue;
    std::string value = value_after_charset(tag, cs);
    if (!value.empty()) return value;
  }
  return {};
}

std::string canonical_charset(std::string_view label) {
  const std::string l = lower_trim(label);
  if (l.empty()) return {};
  static constexpr std::string_view kWindows1252[] = {"iso-8859-1", "iso8859-1", "latin1", "l1", "us-ascii", "ascii",
                                                      "iso_8859-1", "cp819", "ibm819", "iso-ir-100", "cp1252",
                                                      "x-cp1252", "windows-1252", "ansi_x3.4-1968", "iso_8859-1:1987"};
  if (std::find(std::begin(kWindows1252), std::end(kWindows1252), l) != std::end(kWindows1252)) return "windows-1252";
  if (l == "utf8" || l == "utf-8" || l == "unicode-1-1-utf-8") return "UTF-8";
  if (l == "gb2312" || l == "gbk" || l == "x-gbk" || l == "chinese" || l == "csgb2312") return "GBK";
  if (l == "iso-8859-9" || l == "latin5" || l == "iso8859-9") return "windows-1254";
  if (l == "tis-620" || l == "iso-8859-11") return "windows-874";
  if (l == "ks_c_5601-1987" || l == "euc-kr" || l == "korean") return "windows-949";
  if (l == "shift_jis" || l == "sjis" || l == "x-sjis" || l == "ms_kanji" || l == "windows-31j") return "windows-31j";
  UErrorCode status = U_ZERO_ERROR;
  UConverter* conv = ucnv_open(l.c_str(), &status);
  if (U_FAILURE(status) || !conv) return {};
  const char* name = ucnv_getName(conv, &status);
  std::string out = U_SUCCESS(status) && name ? name : "";
  ucnv_close(conv);
  return out;
}

DecodedPage decode_page(std::string_view body, std::string_view content_type, bool html) {
  DecodedPage page;
  auto take_utf8 = [&](std::string_view bytes, const char* source, bool valid = false) {
    if (valid) {
      page.utf8.assign(bytes);
    } else {
      page.replaced = utf8_replace_invalid(bytes, page.utf8);
    }
    page.charset = "UTF-8";
    page.source = source;
    return page;
  };
  // 1. A byte-order mark.
  if (body.substr(0, 3) == "\xEF\xBB\xBF") return take_utf8(body.substr(3), "bom");
  for (auto [bom, name] : {std::pair<std::string_view, const char*>{"\xFF\xFE", "UTF-16LE"}, {"\xFE\xFF", "UTF-16BE"}}) {
    if (body.substr(0, 2) == bom && convert_with_icu(body.substr(2), name, page)) {
      page.source = "bom";
      return page;
    }
  }
  const bool valid_utf8 = utf8_valid(body);
  // 2. The header, 3. <meta>.
  std::string label = canonical_charset(charset_from_content_type(content_type));
  const char* source = "header";
  if (label.empty() && html) {
    label = canonical_charset(charset_from_meta(body));
    if (label.rfind("UTF-16", 0) == 0) label = "UTF-8";  // the WHATWG rule: a page read as ASCII cannot be UTF-16
    source = "meta";
  }
  if (label == "UTF-8" && (valid_utf8 || mostly_utf8(body, 1))) return take_utf8(body, source, valid_utf8);
  if (!label.empty() && label != "UTF-8" && convert_with_icu(body, label, page)) {
    page.source = source;
    return page;
  }
  // 4. No usable label (or UTF-8 declared over other bytes): valid UTF-8 stays UTF-8, otherwise ICU's guess.
  if (valid_utf8 || mostly_utf8(body, 4)) return take_utf8(body, "utf-8", valid_utf8);
  const std::string guess = detect_charset(body);
  if (!guess.empty() && guess != "UTF-8" && convert_with_icu(body, guess, page)) {
    page.source = "detected";
    return page;
  }
  take_utf8(body, "detected");
  return page;
}

}  // namespace zlm::web
