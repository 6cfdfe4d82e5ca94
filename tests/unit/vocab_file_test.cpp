#include "common/tokenizer/vocab_file.h"

#include <filesystem>
#include <fstream>

#include "common/core/error.h"
#include "common/tokenizer/gpt2_bpe.h"
#include "test_util.h"

namespace zlm {
namespace {

using test::data_path;

// The trainer's scanner against the tokenizer's simdjson reader, on both vocabularies we ship.
TEST(VocabFile, SummaryEqualsTheTokenizersOwnReading) {
  for (const auto& [vocab, merges] : {std::pair{"gpt2/gpt2-vocab.json", "gpt2/gpt2-merges.txt"},
                                      std::pair{"megatron/gpt2-tiny-vocab.json", "megatron/gpt2-tiny-merges.txt"}}) {
    const Gpt2Bpe bpe = Gpt2Bpe::load(data_path(vocab), data_path(merges));
    const VocabSummary s = read_vocab_summary(data_path(vocab));
    EXPECT_EQ(s.entries, static_cast<int64_t>(bpe.vocab_size())) << vocab;
    EXPECT_EQ(s.eod_id, bpe.eod_id()) << vocab;
  }
  EXPECT_EQ(read_vocab_summary(data_path("gpt2/gpt2-vocab.json")).entries, 50257);
}

TEST(VocabFile, EscapedKeysAndMissingEod) {
  const auto dir = std::filesystem::path(testing::TempDir()) / "vocab_file_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "v.json").string();
  std::ofstream(path) << R"({"a\"b": 0, "c:{d}": 1, "<|endoftext|>": 2, "\u0120x": 3})";
  EXPECT_EQ(read_vocab_summary(path).entries, 4);
  EXPECT_EQ(read_vocab_summary(path).eod_id, 2);
  std::ofstream(path) << R"({"a": 0})";
  EXPECT_EQ(read_vocab_summary(path).eod_id, -1);
  std::ofstream(path) << "[]";
  EXPECT_THROW(read_vocab_summary(path), Error);
  EXPECT_THROW(read_vocab_summary((dir / "missing.json").string()), Error);
}

TEST(VocabFile, PaddingAsMegatron) {
  // Megatron's _vocab_size_with_padding: 50257 -> 50304 (128), 50688 with TP 4 (512).
  EXPECT_EQ(padded_vocab_size(50257, 128), 50304u);
  EXPECT_EQ(padded_vocab_size(50257, 128, 4), 50688u);
  EXPECT_EQ(padded_vocab_size(50304, 128), 50304u);
  EXPECT_EQ(padded_vocab_size(7, 1), 7u);
}

}  // namespace
}  // namespace zlm
