#include "common/tokenizer/gpt2_pretokenizer.h"

#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <cstdlib>
#include <new>
#include <cstring>
#include <memory>
#include <mutex>

#include "common/core/error.h"

namespace zlm {

namespace detail {
const uint8_t* g_class_table = nullptr;

namespace {
CharClass class_of_type(int8_t type) {
  switch (type) {
    case U_UPPERCASE_LETTER: case U_LOWERCASE_LETTER: case U_TITLECASE_LETTER: case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return CharClass::Letter;
    case U_DECIMAL_DIGIT_NUMBER: case U_LETTER_NUMBER: case U_OTHER_NUMBER:
      return CharClass::Number;
    default:
      return CharClass::Other;
  }
}

// ICU reports the general category as ranges (a few thousand of them): the table is filled
// range by range. White_Space characters are all separators or controls (Zs, Zl, Zp, Cc),
// so only those ranges are checked code point by code point.
UBool fill_range(const void* context, UChar32 start, UChar32 limit, UCharCategory type) {
  auto* table = static_cast<uint8_t*>(const_cast<void*>(context));
  const CharClass cls = class_of_type(static_cast<int8_t>(type));
  // The table starts zeroed (Other), so Other ranges, most of the code space, are never written
  // and their pages never touched: a cold process pays for the classes text uses.
  if (cls != CharClass::Other) std::memset(table + start, static_cast<int>(cls), static_cast<size_t>(limit - start));
  if (type == U_SPACE_SEPARATOR || type == U_LINE_SEPARATOR || type == U_PARAGRAPH_SEPARATOR ||
      type == U_CONTROL_CHAR) {
    for (UChar32 c = start; c < limit; ++c)
      if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) table[c] = static_cast<uint8_t>(CharClass::Space);
  }
  return true;
}
}  // namespace

const uint8_t* init_class_table() {
  static std::once_flag once;
  static std::unique_ptr<uint8_t, decltype(&std::free)> table(nullptr, &std::free);
  std::call_once(once, [] {
    table.reset(static_cast<uint8_t*>(std::calloc(0x110000, 1)));  // zero pages until written
    if (!table) throw std::bad_alloc();
    u_enumCharTypes(fill_range, table.get());
    g_class_table = table.get();
  });
  return g_class_table;
}

// The definition the table follows, one code point at a time (tests).
CharClass class_reference(uint32_t c) {
  const auto type = static_cast<int8_t>(u_charType(static_cast<UChar32>(c)));
  const CharClass cls = class_of_type(type);
  if (cls == CharClass::Other && u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE))
    return CharClass::Space;
  return cls;
}
}  // namespace detail

CharClass gpt2_char_class_at(const char* p, const char* end, size_t* len) {
  if (!detail::g_class_table) detail::init_class_table();
  return detail::class_at(p, end, len);
}

CharClass gpt2_char_class(uint32_t cp) {
  if (cp >= 0x110000) return CharClass::Other;
  return static_cast<CharClass>(detail::init_class_table()[cp]);
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> out;
  gpt2_pretokenize(text, [&](std::string_view piece) { out.push_back(piece); });
  return out;
}

std::vector<std::string> gpt2_pretokenize_reference(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  // \s spelled as the White_Space property (ICU's own \s differs slightly).
  icu::UnicodeString pattern = icu::UnicodeString::fromUTF8(
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\p{White_Space}\\p{L}\\p{N}]+"
      "|\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+");
  icu::RegexPattern* compiled = icu::RegexPattern::compile(pattern, 0, status);
  if (U_FAILURE(status)) throw Error(ErrorKind::Internal, "ICU regex: %s", u_errorName(status));
  std::unique_ptr<icu::RegexPattern> holder(compiled);
  icu::UnicodeString input = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  std::unique_ptr<icu::RegexMatcher> m(compiled->matcher(input, status));
  std::vector<std::string> out;
  while (m->find(status) && U_SUCCESS(status)) {
    std::string piece;
    m->group(status).toUTF8String(piece);
    out.push_back(std::move(piece));
  }
  return out;
}

}  // namespace zlm
