// Sentence splitting for preprocess_data --split-sentences, on ICU's sentence
// BreakIterator (UAX #29 rules with the locale's exceptions). This is NOT
// NLTK's Punkt, which Megatron uses: boundaries differ on abbreviations,
// initials and line breaks (ICU also breaks after a paragraph separator such as
// "\n"), so sentence-level outputs are not byte-identical to Megatron's.
//
//   zlm::SentenceSplitter splitter("english");     // one per thread
//   for (std::string_view s : splitter.split(text, /*keep_newlines=*/false)) ...
//
// Without keep_newlines each sentence is stripped of surrounding whitespace
// (Punkt's sentences carry none) and empty ones are dropped. With it, each
// sentence keeps its trailing whitespace and newlines, except at the very end
// of the text (Megatron's --keep-newlines); a piece of whitespace alone (a blank
// line between paragraphs) is dropped, where Punkt leaves it on the sentence
// before. Views point into `text`.
// Cost: O(n); not thread-safe (owns an ICU iterator).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zlm {

class SentenceSplitter {
 public:
  // `lang` is Megatron's --lang (an NLTK language name such as "english") or a BCP-47 tag.
  explicit SentenceSplitter(const std::string& lang);
  ~SentenceSplitter();
  const std::vector<std::string_view>& split(std::string_view text, bool keep_newlines);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<std::string_view> out_;
};

}  // namespace zlm
