#include "common/text/sentence_splitter.h"

#include <unicode/brkiter.h>
#include <unicode/locid.h>
#include <unicode/utext.h>

#include <map>

#include "common/core/error.h"
#include "common/tokenizer/gpt2_pretokenizer.h"

namespace zlm {

struct SentenceSplitter::Impl {
  std::unique_ptr<icu::BreakIterator> it;
};

static std::string locale_for(const std::string& lang) {
  static const std::map<std::string, std::string> nltk = {
      {"english", "en"}, {"german", "de"}, {"french", "fr"}, {"spanish", "es"}, {"italian", "it"},
      {"portuguese", "pt"}, {"dutch", "nl"}, {"russian", "ru"}, {"polish", "pl"}, {"czech", "cs"},
      {"danish", "da"}, {"estonian", "et"}, {"finnish", "fi"}, {"greek", "el"}, {"norwegian", "nb"},
      {"slovene", "sl"}, {"swedish", "sv"}, {"turkish", "tr"}, {"malayalam", "ml"}};
  auto it = nltk.find(lang);
  return it == nltk.end() ? lang : it->second;
}

SentenceSplitter::SentenceSplitter(const std::string& lang) : impl_(std::make_unique<Impl>()) {
  UErrorCode status = U_ZERO_ERROR;
  impl_->it.reset(icu::BreakIterator::createSentenceInstance(icu::Locale(locale_for(lang).c_str()), status));
  if (U_FAILURE(status) || !impl_->it)
    throw Error(ErrorKind::Usage, "cannot create a sentence splitter for --lang '%s': %s", lang.c_str(), u_errorName(status));
}

SentenceSplitter::~SentenceSplitter() = default;

static bool is_space_at(std::string_view s, size_t i, size_t* len) {
  return gpt2_char_class_at(s.data() + i, s.data() + s.size(), len) == CharClass::Space;
}

static std::string_view strip(std::string_view s, bool leading, bool trailing) {
  size_t b = 0, e = s.size(), len;
  if (leading)
    while (b < e && is_space_at(s, b, &len)) b += len;
  if (trailing)
    while (e > b) {
      // step back one code point
      size_t k = e - 1;
      while (k > b && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) --k;
      if (!is_space_at(s, k, &len) || k + len != e) break;
      e = k;
    }
  return s.substr(b, e - b);
}

const std::vector<std::string_view>& SentenceSplitter::split(std::string_view text, bool keep_newlines) {
  out_.clear();
  UErrorCode status = U_ZERO_ERROR;
  UText* ut = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  if (U_FAILURE(status)) throw Error(ErrorKind::Internal, "utext_openUTF8: %s", u_errorName(status));
  impl_->it->setText(ut, status);
  int32_t start = impl_->it->first();
  for (int32_t end = impl_->it->next(); end != icu::BreakIterator::DONE; start = end, end = impl_->it->next()) {
    std::string_view sentence = text.substr(static_cast<size_t>(start), static_cast<size_t>(end - start));
    bool last = static_cast<size_t>(end) == text.size();
    sentence = strip(sentence, true, !keep_newlines || last);
    if (!sentence.empty()) out_.push_back(sentence);
  }
  utext_close(ut);
  return out_;
}

}  // namespace zlm
