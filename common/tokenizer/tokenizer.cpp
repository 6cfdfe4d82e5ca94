#include "common/tokenizer/tokenizer.h"

#include <charconv>

#include "common/core/error.h"
#include "common/tokenizer/gpt2_bpe.h"

namespace zlm {

namespace {

class Gpt2Session : public TokenizerSession {
 public:
  explicit Gpt2Session(const Gpt2Bpe& bpe) : bpe_(bpe) {}
  bool encode(std::string_view text, std::vector<int32_t>& out, std::string*) override {
    bpe_.encode(text, out, &cache_);
    return true;
  }

 private:
  const Gpt2Bpe& bpe_;
  BpeCache cache_;
};

class Gpt2Tokenizer : public Tokenizer {
 public:
  explicit Gpt2Tokenizer(Gpt2Bpe bpe) : bpe_(std::move(bpe)) {}
  std::unique_ptr<TokenizerSession> session() const override { return std::make_unique<Gpt2Session>(bpe_); }
  uint64_t vocab_size() const override { return bpe_.vocab_size(); }
  int64_t eod() const override { return bpe_.eod_id(); }
  const char* name() const override { return "GPT2BPETokenizer"; }

 private:
  Gpt2Bpe bpe_;
};

class NullSession : public TokenizerSession {
 public:
  bool encode(std::string_view text, std::vector<int32_t>& out, std::string* why) override {
    // Python: [int(x) for x in text.split(' ')] -- int() tolerates surrounding whitespace and a sign.
    size_t start = 0;
    for (;;) {
      size_t end = text.find(' ', start);
      std::string_view word = text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
      while (!word.empty() && (word.front() == '\t' || word.front() == '\n' || word.front() == '\r')) word.remove_prefix(1);
      while (!word.empty() && (word.back() == '\t' || word.back() == '\n' || word.back() == '\r')) word.remove_suffix(1);
      if (!word.empty() && word.front() == '+') word.remove_prefix(1);
      int64_t v = 0;
      auto [p, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
      if (word.empty() || ec != std::errc() || p != word.data() + word.size() || v < INT32_MIN || v > INT32_MAX) {
        *why = "NullTokenizer: '" + std::string(word.substr(0, 40)) + "' is not an integer token id";
        return false;
      }
      out.push_back(static_cast<int32_t>(v));
      if (end == std::string_view::npos) return true;
      start = end + 1;
    }
  }
};

class NullTokenizer : public Tokenizer {
 public:
  explicit NullTokenizer(uint64_t vocab_size) : vocab_size_(vocab_size) {}
  std::unique_ptr<TokenizerSession> session() const override { return std::make_unique<NullSession>(); }
  uint64_t vocab_size() const override { return vocab_size_ + 1; }
  int64_t eod() const override { return static_cast<int64_t>(vocab_size_); }
  const char* name() const override { return "NullTokenizer"; }

 private:
  uint64_t vocab_size_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options) {
  if (options.type == "GPT2BPETokenizer") {
    if (options.vocab_file.empty() || options.merge_file.empty())
      throw Error(ErrorKind::Usage, "GPT2BPETokenizer needs --vocab-file and --merge-file");
    return std::make_unique<Gpt2Tokenizer>(Gpt2Bpe::load(options.vocab_file, options.merge_file));
  }
  if (options.type == "NullTokenizer") return std::make_unique<NullTokenizer>(options.null_vocab_size);
  static const char* kMegatronOnly[] = {"BertWordPieceLowerCase", "BertWordPieceCase", "SentencePieceTokenizer",
                                        "GPTSentencePieceTokenizer", "HuggingFaceTokenizer", "Llama2Tokenizer",
                                        "TikTokenizer", "MultimodalTokenizer", "PretrainedFromHF"};
  for (const char* t : kMegatronOnly)
    if (options.type == t)
      throw Error(ErrorKind::Usage, "--tokenizer-type %s is a Megatron tokenizer zerolm does not support yet (supported: GPT2BPETokenizer, NullTokenizer)",
                  t);
  throw Error(ErrorKind::Usage, "unknown --tokenizer-type '%s' (supported: GPT2BPETokenizer, NullTokenizer)", options.type.c_str());
}
}  // namespace zlm
