#include "common/text/lang_id.h"

#include <cld2/internal/lang_script.h>
#include <cld2/public/compact_lang_det.h>

namespace zlm {

namespace {

bool continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// The text's first max_bytes at most, cut before a character that would not fit.
std::string_view prefix(std::string_view text, size_t max_bytes) {
  if (max_bytes == 0 || text.size() <= max_bytes) return text;
  size_t cut = max_bytes;
  while (cut > 0 && continuation_byte(text[cut])) --cut;
  return text.substr(0, cut);
}

constexpr size_t kWindowBytes = 256;
constexpr size_t kSampledAbove = 3072;
constexpr int kWindowPercent = 90;

// Six windows up to 4 KiB; above, enough that the gaps stay at most an eighth
// of the scope each (nine for a long text).
size_t window_count(size_t scope) {
  if (scope <= 4096) return 6;
  return (9 * scope + 8 * kWindowBytes + scope - 1) / (8 * kWindowBytes + scope);
}

}  // namespace

LangGuess detect_language_sampled(std::string_view text, size_t max_bytes) {
  text = prefix(text, max_bytes);
  if (text.size() <= kSampledAbove) return detect_language(text);
  LangGuess agreed;
  const size_t windows = window_count(text.size());
  for (size_t i = 0; i < windows; ++i) {
    size_t start = (text.size() - kWindowBytes) * i / (windows - 1);
    while (start < text.size() && continuation_byte(text[start])) ++start;
    LangGuess g = detect_language(text.substr(start), kWindowBytes);
    if (!g.reliable || g.percent < kWindowPercent || (i > 0 && g.code != agreed.code)) return detect_language(text);
    if (i == 0 || g.percent < agreed.percent) agreed.percent = g.percent;
    if (i == 0) agreed.code = g.code;
  }
  agreed.reliable = true;
  return agreed;
}

LangGuess detect_language(std::string_view text, size_t max_bytes) {
  text = prefix(text, max_bytes);
  CLD2::Language top3[3];
  int percent3[3] = {0, 0, 0};
  int text_bytes = 0;
  bool reliable = false;
  CLD2::Language lang = CLD2::DetectLanguageSummary(text.data(), static_cast<int>(text.size()), /*is_plain_text=*/true,
                                                    top3, percent3, &text_bytes, &reliable);
  LangGuess g;
  // CLD2 answers ENGLISH when the text has nothing to score (no letters);
  // langdetect raises there, and Megatron's cleanup then skips the document.
  if (text_bytes == 0) return g;
  g.code = CLD2::LanguageCode(lang);
  // Not always the first of the three: where English leads and another
  // language has 17% or more, CLD2 names the other one.
  for (int i = 0; i < 3 && g.percent == 0; ++i)
    if (top3[i] == lang) g.percent = percent3[i];
  g.reliable = reliable;
  return g;
}

bool is_language_code(const std::string& code) {
  const CLD2::Language lang = CLD2::GetLanguageFromName(code.c_str());
  return lang != CLD2::UNKNOWN_LANGUAGE && code == CLD2::LanguageCode(lang);
}

}  // namespace zlm
