#include "common/text/lang_id.h"

#include <cld2/internal/lang_script.h>
#include <cld2/public/compact_lang_det.h>

#include "common/core/utf8.h"

namespace zlm {

namespace {

// The scope language ID reads: the text's first max_bytes (0: all of it).
std::string_view scope(std::string_view text, size_t max_bytes) { return max_bytes ? utf8_prefix(text, max_bytes) : text; }

constexpr size_t kWindowBytes = 256;
constexpr size_t kSampledAbove = 3072;
constexpr int kWindowPercent = 90;

// The fewest windows K whose gaps, (bytes - K * kWindowBytes) / (K - 1), are at
// most an eighth of the scope each: 6 from 3 KiB to 4 KiB, 9 for a long text.
size_t window_count(size_t bytes) {
  return (9 * bytes + 8 * kWindowBytes + bytes - 1) / (8 * kWindowBytes + bytes);
}

}  // namespace

LangGuess detect_language_sampled(std::string_view text, size_t max_bytes) {
  text = scope(text, max_bytes);
  if (text.size() <= kSampledAbove) return detect_language(text);
  LangGuess agreed;
  const size_t windows = window_count(text.size());
  for (size_t i = 0; i < windows; ++i) {
    size_t start = (text.size() - kWindowBytes) * i / (windows - 1);
    while (start < text.size() && utf8_continuation(text[start])) ++start;
    LangGuess g = detect_language(text.substr(start), kWindowBytes);
    if (!g.reliable || g.percent < kWindowPercent || (i > 0 && g.code != agreed.code)) return detect_language(text);
    if (i == 0 || g.percent < agreed.percent) agreed.percent = g.percent;
    if (i == 0) agreed.code = g.code;
  }
  agreed.reliable = true;
  return agreed;
}

LangGuess detect_language(std::string_view text, size_t max_bytes) {
  text = scope(text, max_bytes);
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
