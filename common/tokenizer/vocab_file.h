// What the trainer needs of a GPT-2 vocab.json without building the tokenizer:
// the number of entries (Megatron's unpadded vocab size) and the id of
// <|endoftext|>; and Megatron's padding of the vocabulary, which the data tools
// (preprocess_data's log), the trainer and convert_gpt all use.
//
//   auto v = zlm::read_vocab_summary("gpt2-vocab.json");         // {50257, 50256}
//   int64_t padded = zlm::padded_vocab_size(v.entries, 128, 4);  // 50688
//
// read_vocab_summary is a single pass over the top-level object's keys, with no
// JSON library: it is part of the dependency-free library zlm_vocab, so
// pretrain_gpt builds where only LibTorch is installed (the GPU machines have
// no package manager). Gpt2Bpe::load (simdjson) reads the whole vocabulary;
// the unit tests hold the two to the same counts. Throws zlm::Error naming the
// file when it cannot be read or holds no entries.
#pragma once

#include <cstdint>
#include <string>

namespace zlm {

struct VocabSummary {
  int64_t entries = 0;
  int64_t eod_id = -1;  // -1: no <|endoftext|>
};

VocabSummary read_vocab_summary(const std::string& path);

// Megatron's padded vocab size: the smallest multiple of divisor x tp that is
// >= vocab_size (the embedding rows; the padding rows are never a target).
constexpr uint64_t padded_vocab_size(uint64_t vocab_size, uint64_t divisor, uint64_t tensor_parallel = 1) {
  const uint64_t multiple = divisor * tensor_parallel;
  if (multiple == 0) return vocab_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

}  // namespace zlm
