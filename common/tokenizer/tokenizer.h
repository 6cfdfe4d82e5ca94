// The tokenizers preprocess_data (and later the trainer) can use, behind one
// interface: Megatron's GPT2BPETokenizer (common/tokenizer/gpt2_bpe.h) and NullTokenizer.
//
//   auto tok = zlm::make_tokenizer({.type = "GPT2BPETokenizer", .vocab_file = v, .merge_file = m});
//   auto session = tok->session();                // one per thread
//   std::vector<int32_t> ids;
//   if (!session->encode(text, ids, &why)) ...    // false: the text cannot be tokenized
//
// NullTokenizer (Megatron's _NullTokenizer): the text is integers separated by
// single spaces; vocab_size() = --vocab-size + 1 and EOD = --vocab-size. A text
// that is not such a list is a per-record failure (Megatron raises and aborts).
// Tokenizers are immutable and thread-safe; sessions are not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/vocab_file.h"  // padded_vocab_size

namespace zlm {

struct TokenizerOptions {
  std::string type;            // GPT2BPETokenizer | NullTokenizer
  std::string vocab_file, merge_file;
  uint64_t null_vocab_size = 786;
};

class TokenizerSession {
 public:
  virtual ~TokenizerSession() = default;
  // Appends the ids of `text` to `out`; on failure returns false with a reason.
  virtual bool encode(std::string_view text, std::vector<int32_t>& out, std::string* why) = 0;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::unique_ptr<TokenizerSession> session() const = 0;
  // Megatron's tokenizer.vocab_size (unpadded): decides the .bin dtype.
  virtual uint64_t vocab_size() const = 0;
  // End-of-document id, or -1 when the vocabulary has none.
  virtual int64_t eod() const = 0;
  virtual const char* name() const = 0;
};

// Throws zlm::Error(Usage) for an unknown or unsupported type, naming the supported ones.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options);

}  // namespace zlm
