// Language identification with CLD2 (Google's Compact Language Detector 2,
// Debian's libcld2): deterministic, ~100x faster than langdetect, which
// Megatron's cleanup_dataset.py calls unseeded.
//
//   zlm::LangGuess g = zlm::detect_language(text);
//   if (g.code == "en" && g.percent >= 50) ...
//
// `code` is CLD2's ISO 639-1 style code ("en", "fr", "zh", ...), "un" when the
// text has no detectable language (Megatron's langdetect raises there).
// `percent` is the share of the text's letters in that language; `reliable`
// is CLD2's own confidence flag. Thread-safe; O(n), no allocation.
#pragma once

#include <string>
#include <string_view>

namespace zlm {

struct LangGuess {
  std::string code = "un";
  int percent = 0;
  bool reliable = false;
};

// Reads at most max_bytes of the text (cut at a character boundary; 0 = all):
// CLD2 runs at ~25 MB/s, and a few KiB decide the language of a web page.
LangGuess detect_language(std::string_view utf8_text, size_t max_bytes = 0);

// detect_language's language code for the same max_bytes, most often read from
// less (then `percent` is the least window's share and `reliable` is true).
// Where that scope is over 3 KiB, CLD2 first reads 256-byte windows spread
// evenly over it (the first at its start, the last at its end): six up to
// 4 KiB, and above that as many as keep each gap between two windows within an
// eighth of the scope (nine at most, for a long text). When all windows are
// reliable (CLD2's flag) and agree on one language with at least 90% of their
// letters in it, that language is the answer, with the least of their
// percentages; otherwise the whole scope is read, as detect_language does.
// Why the gaps are an eighth: CLD2 lets a language other than English win a
// mostly English text from 17% of it, and a run of another language longer
// than a gap reaches into a window, which then falls under 90% or loses the
// reliable flag. That reasoning is in bytes where CLD2 counts the letters it
// scores, so text sparse in letters (figures, lists) narrows the margin; the
// unit test's two-language texts, runs at any place and length included,
// are the evidence. What it gives up: text that alternates languages in step
// with the windows. It reads 1.5 KiB of a 4 KiB scope, 2.3 KiB of a long text.
LangGuess detect_language_sampled(std::string_view utf8_text, size_t max_bytes = 0);

// Whether detect_language can answer `code` (a CLD2 code such as "en", "zh-Hant").
bool is_language_code(const std::string& code);

}  // namespace zlm
