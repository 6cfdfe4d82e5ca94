#include "common/text/lang_id.h"

#include <cld2/internal/lang_script.h>
#include <cld2/public/compact_lang_det.h>

namespace zlm {

LangGuess detect_language(std::string_view text, size_t max_bytes) {
  if (max_bytes && text.size() > max_bytes) {
    size_t cut = max_bytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut);
  }
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
  g.percent = top3[0] == lang ? percent3[0] : 0;
  g.reliable = reliable;
  return g;
}

bool is_language_code(const std::string& code) {
  const CLD2::Language lang = CLD2::GetLanguageFromName(code.c_str());
  return lang != CLD2::UNKNOWN_LANGUAGE && code == CLD2::LanguageCode(lang);
}

}  // namespace zlm
