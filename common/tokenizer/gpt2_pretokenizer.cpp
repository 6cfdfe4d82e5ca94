#include "common/tokenizer/gpt2_pretokenizer.h"

#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <memory>
#include <mutex>

#include "common/core/error.h"

namespace zlm {

namespace detail {
const uint8_t* g_class_table = nullptr;

const uint8_t* init_class_table() {
  static std::once_flag once;
  static std::unique_ptr<uint8_t[]> table;
  std::call_once(once, [] {
    table.reset(new uint8_t[0x110000]);
    for (UChar32 c = 0; c < 0x110000; ++c) {
      CharClass cls = CharClass::Other;
      switch (u_charType(c)) {
        case U_UPPERCASE_LETTER: case U_LOWERCASE_LETTER: case U_TITLECASE_LETTER:
        case U_MODIFIER_LETTER: case U_OTHER_LETTER:
          cls = CharClass::Letter;
          break;
        case U_DECIMAL_DIGIT_NUMBER: case U_LETTER_NUMBER: case U_OTHER_NUMBER:
          cls = CharClass::Number;
          break;
        default:
          if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) cls = CharClass::Space;
      }
      table[c] = static_cast<uint8_t>(cls);
    }
    g_class_table = table.get();
  });
  return g_class_table;
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
