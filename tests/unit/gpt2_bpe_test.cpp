#include "common/tokenizer/gpt2_bpe.h"

#include <simdjson.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <sstream>

#include "common/core/error.h"
#include "common/tokenizer/gpt2_pretokenizer.h"
#include "common/core/utf8.h"
#include "formats/megatron_mmap.h"
#include "test_util.h"

namespace zlm {
namespace {

using test::data_path;

const Gpt2Bpe& full() {
  static Gpt2Bpe bpe = Gpt2Bpe::load(data_path("gpt2/gpt2-vocab.json"), data_path("gpt2/gpt2-merges.txt"));
  return bpe;
}
const Gpt2Bpe& tiny() {
  static Gpt2Bpe bpe = Gpt2Bpe::load(data_path("megatron/gpt2-tiny-vocab.json"), data_path("megatron/gpt2-tiny-merges.txt"));
  return bpe;
}
// A vocab.json of the given entries ("token": id, ...) plus the byte tokens it
// lacks, numbered from next_id (every GPT-2 vocabulary has all 256).
std::string vocab_with_all_bytes(const std::string& entries, int next_id) {
  std::string json = "{" + entries;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = gpt2_byte_to_codepoint(static_cast<uint8_t>(b));
    std::string key;  // UTF-8 of the code point (below U+0800)
    if (cp < 0x80) key += static_cast<char>(cp);
    else key += static_cast<char>(0xC0 | (cp >> 6)), key += static_cast<char>(0x80 | (cp & 0x3F));
    if (key == "\"" || key == "\\") key = "\\" + key;
    if (entries.find("\"" + key + "\":") != std::string::npos) continue;
    json += ", \"" + key + "\": " + std::to_string(next_id++);
  }
  return json + "}";
}

std::vector<int32_t> enc(const Gpt2Bpe& bpe, std::string_view text) {
  std::vector<int32_t> ids;
  BpeCache cache;
  bpe.encode(text, ids, &cache);
  return ids;
}

TEST(Gpt2Bpe, LoadsGpt2Files) {
  EXPECT_EQ(full().vocab_size(), 50257u);
  EXPECT_EQ(full().num_merges(), 50000u);
  EXPECT_EQ(full().eod_id(), 50256);
  EXPECT_TRUE(full().merges_well_formed());
  EXPECT_EQ(tiny().eod_id(), 4999);
  EXPECT_EQ(tiny().vocab_size(), 5000u);
}

// docs/compatibility.md, "Tokenizer".
TEST(Gpt2Bpe, SpecTestVectors) {
  using V = std::vector<int32_t>;
  EXPECT_EQ(enc(full(), "Hello world"), (V{15496, 995}));
  EXPECT_EQ(enc(full(), " Hello world"), (V{18435, 995}));
  EXPECT_EQ(enc(full(), "Hello  world\n\nNew paragraph."), (V{15496, 220, 995, 198, 198, 3791, 7322, 13}));
  EXPECT_EQ(enc(full(), "I'm can't they'LL 12345 3.14"), (V{40, 1101, 460, 470, 484, 6, 3069, 17031, 2231, 513, 13, 1415}));
  EXPECT_EQ(enc(full(), "na\xc3\xafve caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x98\x80"),
            (V{2616, 38776, 40304, 10545, 251, 109, 12859, 105, 30325, 222}));
  EXPECT_EQ(enc(full(), "<|endoftext|>"), (V{27, 91, 437, 1659, 5239, 91, 29}));
  EXPECT_EQ(enc(full(), "   "), (V{220, 220, 220}));
  EXPECT_EQ(enc(full(), "a\tb\r\nc"), (V{64, 197, 65, 201, 198, 66}));
  EXPECT_EQ(enc(full(), "It's 2019-11-07!"), (V{1026, 338, 13130, 12, 1157, 12, 2998, 0}));
  EXPECT_TRUE(enc(full(), "").empty());
}

// Edge cases with ids from tiktoken and HF tokenizers (tests/reference/make_tokenizer_goldens.py).
TEST(Gpt2Bpe, StressSetMatchesTiktokenAndHuggingFace) {
  simdjson::dom::parser parser;
  std::istringstream in(test::slurp(data_path("tokenizer/stress.jsonl")));
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    simdjson::dom::element doc = parser.parse(line);
    std::string_view text = doc["text"].get_string();
    for (auto [key, bpe] : {std::pair{"ids_gpt2", &full()}, std::pair{"ids_tiny", &tiny()}}) {
      std::vector<int32_t> want;
      for (int64_t id : doc[key].get_array()) want.push_back(static_cast<int32_t>(id));
      EXPECT_EQ(enc(*bpe, text), want) << key << " text: " << text;
      EXPECT_EQ(bpe->decode(enc(*bpe, text)), text) << key;
    }
    ++cases;
  }
  EXPECT_GE(cases, 60);
}

uint64_t fnv64(const std::vector<int32_t>& ids) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t id : ids)
    for (int k = 0; k < 4; ++k) h = (h ^ ((static_cast<uint32_t>(id) >> (8 * k)) & 0xff)) * 1099511628211ULL;
  return h;
}

std::vector<std::string> owt_texts() {
  std::vector<std::string> texts;
  simdjson::dom::parser parser;
  std::istringstream in(test::slurp(data_path("megatron/openwebtext-1000.decoded.jsonl")));
  std::string line;
  while (std::getline(in, line)) texts.emplace_back(std::string_view(parser.parse(line)["text"].get_string()));
  return texts;
}

// A large real text (4.7 MB of OpenWebText) with the full GPT-2 vocab: same ids as the references.
TEST(Gpt2Bpe, OpenWebTextMatchesReferenceHashes) {
  auto texts = owt_texts();
  std::istringstream hashes(test::slurp(data_path("tokenizer/owt_hashes.txt")));
  ASSERT_EQ(texts.size(), 1000u);
  BpeCache cache;
  for (size_t i = 0; i < texts.size(); ++i) {
    size_t count;
    std::string hex;
    hashes >> count >> hex;
    std::vector<int32_t> ids;
    full().encode(texts[i], ids, &cache);
    EXPECT_EQ(ids.size(), count) << "document " << i;
    EXPECT_EQ(fnv64(ids), std::stoull(hex, nullptr, 16)) << "document " << i;
  }
}

// Megatron's own output: each document re-encoded with the tiny vocab + EOD
// equals the fixture's sequence.
TEST(Gpt2Bpe, TinyVocabReproducesMegatronFixtureTokens) {
  auto texts = owt_texts();
  formats::MegatronReader ref(data_path("megatron/meg-gpt2-openwebtext_text_document"));
  BpeCache cache;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ids;
    tiny().encode(texts[i], ids, &cache);
    ids.push_back(tiny().eod_id());
    auto want = ref.sequence_tokens(i);
    ASSERT_EQ(std::vector<int64_t>(ids.begin(), ids.end()), want) << "document " << i;
  }
}

std::string random_text(std::mt19937& rng, size_t n) {
  static const std::vector<std::string> atoms = {
      "a", "b", "e", "th", "Z", " ", " ", "  ", "\n", "\t", "'", "'s", "'ll", "1", "42", ".", ",", "!", "-",
      "\xc3\xa9", "\xe6\x9d\xb1", "\xf0\x9f\x98\x80", "\xc2\xa0", "\xe2\x80\xa8", "\xd9\xa3", "\xcc\x81", "\x1c", "\x85",
      "\xff", "\xe2\x80", "\xe3\x80\x80", "\xe2\x85\xab"};
  std::string s;
  while (s.size() < n) s += atoms[rng() % atoms.size()];
  return s;
}

TEST(Gpt2PreTokenizer, MatchesIcuRegexReference) {
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text = random_text(rng, 1 + rng() % 40);
    // The ICU reference works on valid UTF-8 only.
    std::string valid;
    for (size_t i = 0; i < text.size();) {
      uint32_t cp;
      size_t len = utf8_decode(std::string_view(text).substr(i), &cp);
      if (len) valid.append(text, i, len);
      i += len ? len : 1;
    }
    auto fast = gpt2_pretokenize(valid);
    std::vector<std::string> got(fast.begin(), fast.end());
    ASSERT_EQ(got, gpt2_pretokenize_reference(valid)) << "text: " << valid;
  }
}

// Longer texts than the scanner's 64-byte window, cut at every length, so that pieces cross
// windows, runs outlast them, and contractions, non-ASCII characters and ill-formed bytes
// fall at every position of a window.
std::string long_random_text(std::mt19937& rng, size_t n) {
  static const std::vector<std::string> runs = {std::string(70, ' '), std::string(65, 'x'), std::string(63, '7'),
                                                std::string(66, '.'), " \n \n", "\r\n\r\n  ", "don't", "we'll"};
  std::string s;
  while (s.size() < n) s += rng() % 16 == 0 ? runs[rng() % runs.size()] : random_text(rng, 1 + rng() % 8);
  s.resize(n);
  return s;
}

std::vector<std::string_view> scan_all(std::string_view text, size_t cap, bool scalar) {
  std::vector<const char*> ends(cap);
  std::vector<std::string_view> out;
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end) {
    const size_t n = scalar ? detail::scan_pieces_scalar(p, end, ends.data(), cap)
                            : detail::scan_pieces(p, end, ends.data(), cap);
    EXPECT_GE(n, 1u);
    EXPECT_LE(n, cap);
    for (size_t k = 0; k < n; ++k) {
      out.emplace_back(p, static_cast<size_t>(ends[k] - p));
      p = ends[k];
    }
  }
  return out;
}

// The SIMD scanner (every Highway target this machine runs, and every batch size down to one
// piece) against the one-character-at-a-time scan, ill-formed UTF-8 included, and against
// ICU's regex on well-formed text.
TEST(Gpt2PreTokenizer, WindowScannerEqualsTheScalarScanOnEveryTarget) {
  std::vector<std::string> texts;
  std::mt19937 rng(77);
  for (int iter = 0; iter < 400; ++iter) texts.push_back(long_random_text(rng, 1 + rng() % 300));
  for (int c = 0; c < 128; ++c) texts.push_back(std::string("ab") + static_cast<char>(c) + "cd " + static_cast<char>(c));
  // Each of these at every offset of the first two windows, after short words.
  const std::string words = [] {
    std::string w;
    while (w.size() < 140) w += "ab ";
    return w;
  }();
  for (const char* snippet :
       {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'x", "''s", "!'re", " 're", "\n'll", "  b", "\n\nb", "\n b",
        " \xc2\xa0" "b", "  \xc2\xa0", " \xc2\xa0\xc2\xa0" "x", "\xe3\x80\x80" "x",  // non-ASCII spaces
        "a\xc3\xa9", "1\xd9\xa3", ".\xe2\x80\x94", "\xd0\xbc\xd0\xb8\xd1\x80 \xd0\xb4", "\xe6\x9d\xb1\xe4\xba\xac" "1",
        "\xff\xfe!", "a\xe2\x80"})  // ill-formed
    for (size_t offset = 0; offset < 140; ++offset) {
      texts.push_back(words.substr(0, offset) + snippet + "x y");
      texts.push_back(words.substr(0, offset) + snippet);
    }
#if defined(__x86_64__)
  EXPECT_GE(detail::scan_pieces_targets(), 2u);  // the static target and at least SSE4 on any x86-64 of this century
#endif
  for (size_t target = detail::scan_pieces_targets(); target-- > 0;) {  // the default, 0, last
    detail::use_scan_target(target);
    SCOPED_TRACE(detail::scan_pieces_target());
    for (const std::string& text : texts)
      for (size_t cap : {size_t{1}, size_t{3}, detail::kPieceBatch})
        ASSERT_EQ(scan_all(text, cap, false), scan_all(text, cap, true)) << "cap " << cap << ", text: " << text;
  }
  for (size_t t = 0; t < 150; ++t) {
    std::string valid;
    utf8_replace_invalid(texts[t], valid);
    auto fast = gpt2_pretokenize(valid);
    ASSERT_EQ(std::vector<std::string>(fast.begin(), fast.end()), gpt2_pretokenize_reference(valid)) << valid;
  }
}

// The class table, built from ICU's category ranges, against ICU's per-code-point answer for
// every code point.
TEST(Gpt2PreTokenizer, ClassTableEqualsIcuForEveryCodePoint) {
  size_t letters = 0, spaces = 0;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    const CharClass want = detail::class_reference(cp);
    ASSERT_EQ(gpt2_char_class(cp), want) << "U+" << std::hex << cp;
    letters += want == CharClass::Letter;
    spaces += want == CharClass::Space;
  }
  EXPECT_GT(letters, 100000u);
  EXPECT_EQ(spaces, 25u);  // Unicode's White_Space property
}

TEST(Gpt2PreTokenizer, PiecesCoverInvalidUtf8) {
  std::string text = "ab\xff\xfe cd\xe2\x80 x";
  std::string joined;
  for (auto p : gpt2_pretokenize(text)) joined += p;
  EXPECT_EQ(joined, text);
}

TEST(Gpt2Bpe, HeapMatchesReferenceOnLongPieces) {
  std::mt19937 rng(99);
  const std::vector<std::string> syll = {"th", "e", "in", "an", "er", "a", "o", "re", "on", "s", "t", "ing", "x"};
  for (int iter = 0; iter < 40; ++iter) {
    std::string piece;
    size_t n = 65 + rng() % 2000;
    while (piece.size() < n) piece += syll[rng() % syll.size()];
    for (const Gpt2Bpe* bpe : {&full(), &tiny()}) {
      std::vector<int32_t> got;
      bpe->encode_piece(piece, got, nullptr);
      ASSERT_EQ(got, bpe->encode_piece_reference(piece)) << "length " << piece.size();
    }
  }
}

// Short pieces (2-64 bytes, not whole tokens) take the one-merge-at-a-time loop: Megatron's
// result on pieces made of syllables that merge alike in many places (repeated pairs, runs of
// one letter), of random bytes, and of the same pair over and over.
TEST(Gpt2Bpe, LeftmostMergeLoopMatchesReferenceOnShortPieces) {
  std::mt19937 rng(7);
  const std::vector<std::string> syll = {"th", "e", "in", "an", "er", "a", "aa", "o", "re", "on", "s", "t", "ing", "x", " ", "'", "1", "\xc3\xa9"};
  size_t checked = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string piece;
    const size_t n = 2 + rng() % 63;
    if (iter % 3 == 0) {
      while (piece.size() < n) piece += syll[rng() % syll.size()];
    } else if (iter % 3 == 1) {
      while (piece.size() < n) piece += static_cast<char>(rng() % 256);
    } else {
      const std::string pair = syll[rng() % syll.size()] + syll[rng() % syll.size()];
      while (piece.size() < n) piece += pair;
    }
    piece.resize(std::min<size_t>(piece.size(), 64));
    for (const Gpt2Bpe* bpe : {&full(), &tiny()}) {
      std::vector<int32_t> got;
      bpe->encode_piece(piece, got, nullptr);
      ASSERT_EQ(got, bpe->encode_piece_reference(piece)) << "piece of " << piece.size() << " bytes, iteration " << iter;
      checked += got.size() > 1;
    }
  }
  EXPECT_GT(checked, 20000u);  // most are several tokens: the merge loop ran
}

// 1 MB single word and 1 MB without spaces: must finish well inside the test timeout
// (quadratic BPE would need ~10^12 steps). Speed itself is measured in tests/bench.
TEST(Gpt2Bpe, NoQuadraticBlowUp) {
  std::string word(1 << 20, 'a');
  auto ids = enc(full(), word);
  EXPECT_EQ(full().decode(ids), word);
  std::string nospace;
  while (nospace.size() < (1u << 20)) nospace += "abc,def.ghi;";
  ids = enc(full(), nospace);
  EXPECT_EQ(full().decode(ids), nospace);
}

TEST(Gpt2Bpe, DecodeReplacesInvalidUtf8LikePython) {
  // Byte tokens: GPT-2 ids 0..255 are not in byte order, so look them up by encoding.
  auto byte_id = [](uint8_t b) {
    std::vector<int32_t> ids;
    full().encode_piece(std::string(1, static_cast<char>(b)), ids);
    return ids.at(0);
  };
  // b"\xe6\x9d" + b"a" -> "\ufffda" ; b"\xff" -> "\ufffd"; b"\xf0\x9f\x98" + b"!" -> "\ufffd!"
  EXPECT_EQ(full().decode({byte_id(0xE6), byte_id(0x9D), byte_id('a')}), "\xef\xbf\xbd" "a");
  EXPECT_EQ(full().decode({byte_id(0xFF)}), "\xef\xbf\xbd");
  EXPECT_EQ(full().decode({byte_id(0xF0), byte_id(0x9F), byte_id(0x98), byte_id('!')}), "\xef\xbf\xbd!");
  EXPECT_EQ(full().decode({byte_id(0xC0), byte_id(0xAF)}), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_ZLM_ERROR(full().decode_bytes({60000}), ErrorKind::Usage, "60000");
}

// A vocabulary giving one id to two strings (never GPT-2's, but a JSON object allows it):
// Megatron's encoder maps both strings to the id, its decoder the id to the last one.
TEST(Gpt2Bpe, TwoTokensWithOneIdAsMegatron) {
  test::TempDir dir;
  test::spit(dir.path("v.json"), vocab_with_all_bytes(R"("a": 0, "b": 0, "ab": 2, "x": 1)", 3));
  test::spit(dir.path("m.txt"), "#version: 0.2\na b\n");
  const auto bpe = Gpt2Bpe::load(dir.path("v.json"), dir.path("m.txt"));
  EXPECT_EQ(enc(bpe, "a"), (std::vector<int32_t>{0}));
  EXPECT_EQ(enc(bpe, "b"), (std::vector<int32_t>{0}));
  EXPECT_EQ(enc(bpe, "ab"), (std::vector<int32_t>{2}));
  EXPECT_EQ(bpe.decode({0}), "b");
}

// A piece that is a vocabulary token encodes as that token without merging only where BPE of its
// bytes gives it back: "abc" is in this vocabulary, but "b c" merges first and "a bc" is no merge.
TEST(Gpt2Bpe, WholeTokenOnlyWhereTheMergesMakeIt) {
  test::TempDir dir;
  test::spit(dir.path("v.json"), vocab_with_all_bytes(R"("a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "xy": 6)", 7));
  test::spit(dir.path("m.txt"), "#version: 0.2\nb c\na b\nab c\nx y\n");
  const auto bpe = Gpt2Bpe::load(dir.path("v.json"), dir.path("m.txt"));
  EXPECT_EQ(enc(bpe, "abc"), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(enc(bpe, "abc"), bpe.encode_piece_reference("abc"));
  EXPECT_EQ(enc(bpe, "ab"), (std::vector<int32_t>{3}));
  EXPECT_EQ(enc(bpe, "xy"), (std::vector<int32_t>{6}));
}

// Every GPT-2 token's bytes alone (2 to 128 bytes; through the whole-token tables up to 16 bytes,
// past that the merge loop) give what Megatron's merge loop gives, with and without a cache.
TEST(Gpt2Bpe, EveryTokenAloneEqualsTheReference) {
  const Gpt2Bpe& bpe = full();
  BpeCache cache;
  size_t checked = 0;
  for (int32_t id = 0; id < static_cast<int32_t>(bpe.vocab_size()); ++id) {
    const std::string bytes = bpe.decode_bytes({id});
    if (bytes.size() < 2) continue;
    std::vector<int32_t> plain, cached;
    bpe.encode_piece(bytes, plain);
    bpe.encode_piece(bytes, cached, &cache);
    const std::vector<int32_t> want = bpe.encode_piece_reference(bytes);
    ASSERT_EQ(plain, want) << "token " << id;
    ASSERT_EQ(cached, want) << "token " << id;
    // One byte more or less is (mostly) another piece: it must not be taken for this token.
    const std::string longer = bytes + "q", shorter = bytes.substr(0, bytes.size() - 1);
    plain.clear();
    bpe.encode_piece(longer, plain);
    ASSERT_EQ(plain, bpe.encode_piece_reference(longer)) << "token " << id << " + q";
    plain.clear();
    bpe.encode_piece(shorter, plain);
    ASSERT_EQ(plain, bpe.encode_piece_reference(shorter)) << "token " << id << " less its last byte";
    ++checked;
  }
  EXPECT_GT(checked, 50000u);
}

// encode() reads a piece's 16 bytes in place where the text goes on that far, and copies it
// first where it does not: placed at the very end of a readable page followed by one that is
// not, a text that ends in any token (or a few bytes of one) encodes without a fault, and as
// the same text does in the middle of a longer buffer; with a cache seeded or not.
TEST(Gpt2Bpe, NeverReadsPastTheTextsEnd) {
  const Gpt2Bpe& bpe = full();
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* map = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  char* guard = static_cast<char*>(map) + page;
  ASSERT_EQ(mprotect(guard, page, PROT_NONE), 0);
  BpeCache cache, seeded(size_t{1} << 18, 0);
  size_t checked = 0;
  for (int32_t id = 0; id < static_cast<int32_t>(bpe.vocab_size()); id += 7) {
    const std::string token = bpe.decode_bytes({id});
    for (const std::string& text : {token, "x " + token, token.substr(0, token.size() / 2)}) {
      if (text.empty() || text.size() > 64) continue;
      char* at = guard - text.size();
      std::memcpy(at, text.data(), text.size());
      std::vector<int32_t> at_end, at_end_seeded;
      bpe.encode(std::string_view(at, text.size()), at_end, &cache);
      bpe.encode(std::string_view(at, text.size()), at_end_seeded, &seeded);
      const std::string padded = text + std::string(32, '\n');
      std::vector<int32_t> inside;
      bpe.encode(std::string_view(padded.data(), text.size()), inside);
      ASSERT_EQ(at_end, inside) << "token " << id;
      ASSERT_EQ(at_end_seeded, inside) << "token " << id << ", seeded cache";
      ++checked;
    }
  }
  munmap(map, 2 * page);
  EXPECT_GT(checked, 15000u);
}

TEST(Gpt2Bpe, MegatronMergesQuirks) {
  test::TempDir dir;
  test::spit(dir.path("v.json"), vocab_with_all_bytes(R"("a": 0, "b": 1, "ab": 2, "c": 3, "abc": 4, "<|endoftext|>": 5)", 6));
  // First line dropped even when not a header; last merge lost without a trailing newline.
  test::spit(dir.path("m1.txt"), "a b\nab c");
  auto bpe = Gpt2Bpe::load(dir.path("v.json"), dir.path("m1.txt"));
  EXPECT_EQ(bpe.num_merges(), 0u);
  test::spit(dir.path("m2.txt"), "#version: 0.2\na b\nab c\n");
  bpe = Gpt2Bpe::load(dir.path("v.json"), dir.path("m2.txt"));
  EXPECT_EQ(bpe.num_merges(), 2u);
  std::vector<int32_t> ids;
  bpe.encode("abc", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{4}));
  EXPECT_EQ(bpe.eod_id(), 5);
}

// Thousands of distinct short pieces that are no token (random letters, many of them merged
// into several ids; a few longer than 16 bytes) encoded with a cache bounded at 1500 (cleared
// again and again) and at 2^18, seeded (BpeCache's comment) never, at once or half way through
// the first pass (taking the pieces it holds): the ids equal those without a cache, on a first
// pass and on a second that finds them.
TEST(BpeCache, ManyShortPiecesThroughTheBound) {
  const Gpt2Bpe& bpe = full();
  std::mt19937 rng(11);
  std::string text;
  for (int k = 0; k < 20000; ++k) {  // with the space: 2 to 8 bytes, 9 to 16, or now and then 17 to 40
    text += ' ';
    const size_t len = k % 4 == 0 ? 1 + rng() % 7 : k % 97 == 1 ? 16 + rng() % 24 : 8 + rng() % 8;
    for (size_t n = len; n > 0; --n) text += static_cast<char>('a' + rng() % 26);
  }
  std::vector<int32_t> want;
  bpe.encode(text, want);
  const size_t half = text.find(' ', text.size() / 2);  // where a piece starts: the halves' pieces are the whole text's
  const std::string_view halves[] = {std::string_view(text).substr(0, half), std::string_view(text).substr(half)};
  for (const size_t bound : {size_t{1500}, size_t{1} << 18}) {
    for (const size_t seed_after : {SIZE_MAX, size_t{0}, half + 1}) {  // half + 1: at the second half
      BpeCache cache(bound, seed_after);
      for (int pass = 0; pass < 2; ++pass) {
        std::vector<int32_t> got;
        for (const std::string_view half : halves) bpe.encode(half, got, &cache);
        ASSERT_EQ(got, want) << "bound " << bound << ", seeded after " << seed_after << " bytes, pass " << pass;
      }
    }
  }
}

// One cache used with two models in turn: each model's ids, as with a cache of its own (the
// cache is emptied when another model uses it, its seeded table too; it once gave the other
// model's ids).
TEST(BpeCache, ServesTwoModelsInTurn) {
  const std::string text = "The tokenizer's cache holds pieces like Megatron-LM and 1234567 or zxqvbnm.";
  std::vector<int32_t> want_full, want_tiny;
  full().encode(text, want_full);
  tiny().encode(text, want_tiny);
  ASSERT_NE(want_full, want_tiny);
  for (const size_t seed_after : {size_t{8} << 20, size_t{0}}) {
    BpeCache cache(size_t{1} << 18, seed_after);
    for (int round = 0; round < 2; ++round) {
      std::vector<int32_t> got;
      full().encode(text, got, &cache);
      EXPECT_EQ(got, want_full) << "round " << round << ", seeded after " << seed_after;
      got.clear();
      tiny().encode(text, got, &cache);
      EXPECT_EQ(got, want_tiny) << "round " << round << ", seeded after " << seed_after;
    }
  }
}

// The piece cache against a plain map: pieces of 1 to 80 bytes (kept in the slot up to 16, in the
// arena past it) with 1 to 9 ids (in the slot for one), through growth (past 32,768 pieces, half
// the first table) and through clearing when full; pieces over 255 bytes are not kept.
TEST(BpeCache, FindsWhatWasInsertedInlineOrNot) {
  std::mt19937 rng(5);
  std::map<std::string, std::vector<int32_t>> want;
  BpeCache cache(40000);
  std::vector<int32_t> got;
  for (int k = 0; k < 36000; ++k) {
    std::string piece(1 + rng() % 80, ' ');
    for (char& c : piece) c = static_cast<char>('a' + rng() % 3);
    if (want.count(piece)) continue;
    std::vector<int32_t> ids(1 + rng() % 9);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 60000);
    cache.insert(piece, ids.data(), ids.size());
    want[piece] = ids;
  }
  EXPECT_EQ(cache.size(), want.size());
  size_t inline_both = 0;
  for (const auto& [piece, ids] : want) {
    got.assign({-7});
    ASSERT_TRUE(cache.find(piece, got)) << piece;
    EXPECT_EQ(got, [&] { auto v = ids; v.insert(v.begin(), -7); return v; }()) << piece;
    inline_both += piece.size() <= 16 && ids.size() == 1;
    got.clear();
    EXPECT_FALSE(cache.find(piece + "z", got));
  }
  EXPECT_GT(inline_both, 10u);
  const std::string first = want.begin()->first;
  EXPECT_GT(want.size(), 32768u);
  for (int k = 0; cache.size() < 40000; ++k) {  // fill to the bound: the next insert clears
    const std::string p = "fill" + std::to_string(k);
    const int32_t id = k;
    cache.insert(p, &id, 1);
  }
  const int32_t id = 1;
  cache.insert("after", &id, 1);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_FALSE(cache.find(first, got));
  cache.insert(std::string(256, 'x'), &id, 1);
  EXPECT_FALSE(cache.find(std::string(256, 'x'), got));
}

// ZLM_CACHE_DIR for one scope ("" : no saved models).
class CacheDir {
 public:
  explicit CacheDir(const std::string& dir) {
    if (const char* old = std::getenv("ZLM_CACHE_DIR")) old_ = old;
    ::setenv("ZLM_CACHE_DIR", dir.c_str(), 1);
  }
  ~CacheDir() { old_ ? (void)::setenv("ZLM_CACHE_DIR", old_->c_str(), 1) : (void)::unsetenv("ZLM_CACHE_DIR"); }

 private:
  std::optional<std::string> old_;
};

std::vector<std::string> saved_models(const std::string& dir) {
  std::vector<std::string> out;
  if (!std::filesystem::exists(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().string());
  return out;
}

// Every case of the stress set (ids from tiktoken and Hugging Face) through `bpe`.
void expect_stress_set(const Gpt2Bpe& bpe, const char* key) {
  simdjson::dom::parser parser;
  std::istringstream in(test::slurp(data_path("tokenizer/stress.jsonl")));
  for (std::string line; std::getline(in, line);) {
    simdjson::dom::element doc = parser.parse(line);
    std::vector<int32_t> want;
    for (int64_t id : doc[key].get_array()) want.push_back(static_cast<int32_t>(id));
    EXPECT_EQ(enc(bpe, doc["text"].get_string().value()), want) << key;
  }
}

// The saved model: parsing the files, the load that saves the model and the one that reads it back
// give the same ids as tiktoken; a damaged saved model, or one of another format version, is parsed
// again and rewritten; another
// merges file is another model; a cache directory that cannot be written costs only the time.
TEST(Gpt2Bpe, SavedModelIsTheFilesModel) {
  test::TempDir dir;
  const std::string cache = dir.path("cache"), vocab = data_path("gpt2/gpt2-vocab.json"), merges = data_path("gpt2/gpt2-merges.txt");
  {
    CacheDir none("");
    expect_stress_set(Gpt2Bpe::load(vocab, merges), "ids_gpt2");
  }
  CacheDir scoped(cache);
  const Gpt2Bpe saving = Gpt2Bpe::load(vocab, merges);
  const std::vector<std::string> files = saved_models(cache);
  ASSERT_EQ(files.size(), 1u);
  const std::string saved_bytes = test::slurp(files[0]);
  const Gpt2Bpe saved = Gpt2Bpe::load(vocab, merges);
  for (const Gpt2Bpe* bpe : {&saving, &saved}) {
    expect_stress_set(*bpe, "ids_gpt2");
    EXPECT_EQ(bpe->vocab_size(), 50257u);
    EXPECT_EQ(bpe->num_merges(), 50000u);
    EXPECT_EQ(bpe->eod_id(), 50256);
    EXPECT_TRUE(bpe->merges_well_formed());
  }
  for (const std::string& damaged : {saved_bytes.substr(0, saved_bytes.size() / 2), saved_bytes.substr(0, 20) + "x" + saved_bytes.substr(21),
                                     saved_bytes.substr(0, saved_bytes.size() - 1) + "y", "ZLMBPE01" + saved_bytes.substr(8)}) {
    test::spit(files[0], damaged);
    expect_stress_set(Gpt2Bpe::load(vocab, merges), "ids_gpt2");
    EXPECT_EQ(test::slurp(files[0]), saved_bytes) << "the damaged saved model is rewritten";
  }
  expect_stress_set(Gpt2Bpe::load(data_path("megatron/gpt2-tiny-vocab.json"), data_path("megatron/gpt2-tiny-merges.txt")), "ids_tiny");
  expect_stress_set(Gpt2Bpe::load(data_path("megatron/gpt2-tiny-vocab.json"), data_path("megatron/gpt2-tiny-merges.txt")), "ids_tiny");
  EXPECT_EQ(saved_models(cache).size(), 2u);
  // One id for two strings (the aliases) survives the round trip.
  test::spit(dir.path("v.json"), vocab_with_all_bytes(R"("a": 0, "b": 0, "ab": 2, "x": 1)", 3));
  test::spit(dir.path("m.txt"), "#version: 0.2\na b\n");
  for (int pass = 0; pass < 2; ++pass) {
    const auto bpe = Gpt2Bpe::load(dir.path("v.json"), dir.path("m.txt"));
    EXPECT_EQ(enc(bpe, "a"), (std::vector<int32_t>{0})) << pass;
    EXPECT_EQ(enc(bpe, "ab"), (std::vector<int32_t>{2})) << pass;
    EXPECT_EQ(bpe.decode({0}), "b") << pass;
  }
  test::spit(dir.path("file"), "");
  CacheDir unwritable(dir.path("file") + "/cache");
  expect_stress_set(Gpt2Bpe::load(vocab, merges), "ids_gpt2");
}

TEST(Gpt2Bpe, BadFilesAreClearErrors) {
  test::TempDir dir;
  test::spit(dir.path("bad.json"), "[1, 2]");
  test::spit(dir.path("m.txt"), "#v\n");
  EXPECT_ZLM_ERROR(Gpt2Bpe::load(dir.path("bad.json"), dir.path("m.txt")), ErrorKind::Format, "bad.json");
  EXPECT_ZLM_ERROR(Gpt2Bpe::load(dir.path("none.json"), dir.path("m.txt")), ErrorKind::Io, "none.json");
  test::spit(dir.path("v.json"), R"({"a": 0})");
  EXPECT_ZLM_ERROR(Gpt2Bpe::load(dir.path("v.json"), dir.path("none.txt")), ErrorKind::Io, "none.txt");
  // A vocabulary without every byte, and merges that use or make tokens it lacks.
  EXPECT_ZLM_ERROR(Gpt2Bpe::load(dir.path("v.json"), dir.path("m.txt")), ErrorKind::Format, "the byte 0x00 has no token");
  test::spit(dir.path("v2.json"), vocab_with_all_bytes(R"("a": 0, "b": 1, "ab": 2)", 3));
  test::spit(dir.path("uses.txt"), "#v\na b\nab zz\n");
  EXPECT_ZLM_ERROR(Gpt2Bpe::load(dir.path("v2.json"), dir.path("uses.txt")), ErrorKind::Format, "uses.txt: line 3: 'zz' is not in");
  test::spit(dir.path("makes.txt"), "#v\na b\nab a\n");
  EXPECT_ZLM_ERROR(Gpt2Bpe::load(dir.path("v2.json"), dir.path("makes.txt")), ErrorKind::Format, "makes.txt: line 3: 'ab a' makes a token");
  EXPECT_NO_THROW(Gpt2Bpe::load(dir.path("v2.json"), dir.path("m.txt")));
}

}  // namespace
}  // namespace zlm
