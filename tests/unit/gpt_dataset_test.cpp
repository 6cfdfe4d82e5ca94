#include "formats/gpt_dataset.h"
#include "formats/npy.h"

#include <filesystem>

#include <simdjson.h>

#include "common/core/error.h"
#include "test_util.h"

namespace zlm::formats {
namespace {

TEST(SplitRangesLegacy, SpecExamples) {
  auto r = split_ranges_legacy("949,50,1", 1000);
  EXPECT_EQ(r[0].end, 949);
  EXPECT_EQ(r[1].end, 999);
  EXPECT_EQ(r[2].end, 1000);
  r = split_ranges_legacy("1,1,1", 10);
  EXPECT_EQ(r[0].end, 4);
  EXPECT_EQ(r[1].end, 7);
  EXPECT_EQ(r[2].end, 10);
  r = split_ranges_legacy("969, 30, 1", 123);
  EXPECT_EQ(r[0].end, 119);
  EXPECT_EQ(r[1].end, 123);
  EXPECT_EQ(r[2].size(), 0);
  r = split_ranges_legacy("98/2", 100);
  EXPECT_EQ(r[0].end, 98);
  EXPECT_EQ(r[2].size(), 0);
  EXPECT_ZLM_ERROR(split_ranges_legacy("9x,1", 10), ErrorKind::Usage, "9x");
}

// What strtod reads but is no share of the documents: NaN gave a negative range,
// an overflow (inf) silently put everything in the training split.
TEST(SplitRangesLegacy, RefusesWeightsThatAreNotFiniteNonNegativeWithAPositiveSum) {
  EXPECT_ZLM_ERROR(parse_split_weights("nan,1,1"), ErrorKind::Usage, "'nan' is not a finite non-negative number");
  EXPECT_ZLM_ERROR(parse_split_weights("1e400,1,1"), ErrorKind::Usage, "'1e400' is not a finite");
  EXPECT_ZLM_ERROR(parse_split_weights("inf"), ErrorKind::Usage, "'inf'");
  EXPECT_ZLM_ERROR(parse_split_weights("1,-1,1"), ErrorKind::Usage, "'-1'");
  EXPECT_ZLM_ERROR(parse_split_weights("0,0,0"), ErrorKind::Usage, "sum to zero");
  EXPECT_ZLM_ERROR(parse_split_weights("1e308,1e308,1"), ErrorKind::Usage, "sum is not a finite number");
  const auto w = parse_split_weights("98/2");
  EXPECT_EQ(w[0], 98.0);
  EXPECT_EQ(w[1], 2.0);
  EXPECT_EQ(w[2], 0.0);
  EXPECT_EQ(parse_split_weights("1,2,3,4")[2], 3.0);  // Megatron reads the first three
}

TEST(NumpyRandomState, MatchesNumpyStreamAndShuffle) {
  NumpyRandomState rng(1234);
  EXPECT_EQ(rng.next32(), 822569775u);
  EXPECT_EQ(rng.next32(), 2137449171u);
  NumpyRandomState rng2(1234);
  std::vector<int> a{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  rng2.shuffle(std::span<int>(a));
  EXPECT_EQ(a, (std::vector<int>{7, 2, 9, 1, 0, 8, 4, 5, 6, 3}));
}

std::vector<int64_t> ints(simdjson::dom::element e) {
  std::vector<int64_t> out;
  for (simdjson::dom::element x : e.get_array()) {
    simdjson::dom::array pair;
    if (!x.get_array().get(pair)) {
      for (int64_t v : pair) out.push_back(v);
    } else {
      out.push_back(int64_t(x));
    }
  }
  return out;
}

// Golden arrays computed with numpy's RandomState and checked against Megatron's
// own legacy functions (tests/data/megatron/gpt_index_golden.json).
TEST(GptIndex, MatchesMegatronGoldenArraysForEverySplit) {
  simdjson::dom::parser parser;
  simdjson::padded_string json = simdjson::padded_string::load(test::data_path("megatron/gpt_index_golden.json"));
  simdjson::dom::element golden = parser.parse(json);
  MegatronReader data(test::data_path("megatron/meg-gpt2-openwebtext_text_document"));
  auto ranges = split_ranges_legacy(std::string(std::string_view(golden["split_string"].get_string())), data.num_sequences());
  const char* names[3] = {"train", "valid", "test"};
  for (int s = 0; s < 3; ++s) {
    simdjson::dom::element g = golden["splits"][names[s]];
    GptIndex ix = build_gpt_index(data, ranges[s], int64_t(golden["num_samples"][names[s]]), int64_t(golden["seq_length"]),
                                  static_cast<uint32_t>(int64_t(golden["seed"])));
    SCOPED_TRACE(names[s]);
    EXPECT_EQ(ix.tokens_per_epoch, int64_t(g["tokens_per_epoch"]));
    EXPECT_EQ(ix.num_epochs, int64_t(g["num_epochs"]));
    EXPECT_EQ(ix.separate_last_epoch, bool(g["separate_last_epoch"]));
    auto doc_idx = ints(g["doc_idx"]);
    EXPECT_EQ(std::vector<int64_t>(ix.doc_idx.begin(), ix.doc_idx.end()), doc_idx);
    EXPECT_EQ(ix.sample_idx, ints(g["sample_idx"]));
    EXPECT_EQ(ix.shuffle_idx, ints(g["shuffle_idx"]));
  }
}

TEST(GptIndex, TrainSampleZeroIsMegatronsTokens) {
  MegatronReader data(test::data_path("megatron/meg-gpt2-openwebtext_text_document"));
  auto ranges = split_ranges_legacy("949,50,1", data.num_sequences());
  GptIndex ix = build_gpt_index(data, ranges[0], 800, 1024, 1234);
  auto s0 = gpt_sample(data, ix, 0);
  ASSERT_EQ(s0.size(), 1025u);
  EXPECT_EQ(std::vector<int64_t>(s0.begin(), s0.begin() + 8), (std::vector<int64_t>{287, 683, 326, 1254, 82, 257, 1310, 1643}));
  for (int64_t i = 0; i < ix.num_samples(); i += 97) EXPECT_EQ(gpt_sample(data, ix, i).size(), 1025u);
}

// Consecutive-integer documents (llm.c's test_dataloader idea): every sample is a
// run of the concatenated token stream in doc_idx order, so it can be checked by arithmetic.
TEST(GptIndex, SamplesAreContiguousRunsOfTheShuffledStream) {
  test::TempDir dir;
  MegatronWriter w(dir.path("c"), DType::Int32);
  std::vector<int32_t> sizes;
  int32_t next = 0;
  for (int d = 0; d < 37; ++d) {
    std::vector<int32_t> toks(5 + (d * 7) % 23);
    for (auto& t : toks) t = next++;
    sizes.push_back(static_cast<int32_t>(toks.size()));
    w.add_item(std::span<const int32_t>(toks));
    w.end_document();
  }
  w.finalize();
  MegatronReader data(dir.path("c"));
  GptIndex ix = build_gpt_index(data, {0, 37}, 100, 16, 7);
  std::vector<int64_t> stream;
  for (int32_t d : ix.doc_idx) {
    auto t = data.sequence_tokens(d);
    stream.insert(stream.end(), t.begin(), t.end());
  }
  for (int64_t j = 0; j < ix.num_samples(); ++j) {
    // Unshuffled sample j starts at token 16 * j of the stream.
    auto it = std::find(ix.shuffle_idx.begin(), ix.shuffle_idx.end(), j);
    auto sample = gpt_sample(data, ix, it - ix.shuffle_idx.begin());
    EXPECT_EQ(sample, std::vector<int64_t>(stream.begin() + 16 * j, stream.begin() + 16 * j + 17)) << j;
  }
}

TEST(BlendIndex, SpecExamples) {
  std::vector<double> raw{0.3, 0.7};
  auto w = normalize_blend_weights(raw);
  EXPECT_EQ(blend_targets_legacy(800, w), (std::vector<int64_t>{242, 563}));
  auto b = build_blend_index(w, 20);
  EXPECT_EQ(b.dataset, (std::vector<uint8_t>{1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1}));
  std::vector<double> raw3{1, 1, 2};
  b = build_blend_index(normalize_blend_weights(raw3), 12);
  EXPECT_EQ(b.dataset, (std::vector<uint8_t>{2, 0, 1, 2, 0, 2, 1, 2, 0, 2, 1, 2}));
}

}  // namespace
}  // namespace zlm::formats

namespace zlm::formats {
namespace {

// numpy.save's bytes for np.array([1, 2, 3], dtype=np.int32) (numpy >= 1.x, 64-byte aligned header).
TEST(Npy, HeaderBytesAsNumpyWritesThem) {
  int32_t v[3] = {1, 2, 3};
  std::string b = npy_bytes("<i4", {3}, v, sizeof v);
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }";
  ASSERT_EQ(b.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(b.substr(10, header.size()), header);
  EXPECT_EQ((b.size() - sizeof v) % 64, 0u);
  EXPECT_EQ(b[b.size() - sizeof v - 1], '\n');
  EXPECT_NE(npy_bytes("<i4", {3, 2}, v, 0).find("'shape': (3, 2)"), std::string::npos);
}

TEST(GptIndexCache, WritesMegatronNamedNpyAndLoadsThemBack) {
  test::TempDir dir;
  for (const char* ext : {".bin", ".idx"})
    std::filesystem::copy_file(test::data_path(std::string("megatron/meg-gpt2-openwebtext_text_document") + ext), dir.path(std::string("d") + ext));
  MegatronReader data(dir.path("d"));
  auto ranges = split_ranges_legacy("949,50,1", data.num_sequences());
  bool loaded = true;
  std::string why;
  GptIndex built = build_gpt_index_cached(data, ranges[1], "valid", 800, 1024, 1234, &loaded, &why);
  EXPECT_FALSE(loaded);
  EXPECT_TRUE(why.empty()) << why;
  std::string base = dir.path("d_valid_indexmap_800ns_1024sl_1234s");
  EXPECT_TRUE(std::filesystem::exists(base + "_doc_idx.npy"));
  EXPECT_EQ(read_npy(base + "_shuffle_idx.npy").descr, "<u4");
  GptIndex again = build_gpt_index_cached(data, ranges[1], "valid", 800, 1024, 1234, &loaded, &why);
  EXPECT_TRUE(loaded);
  EXPECT_EQ(again.doc_idx, built.doc_idx);
  EXPECT_EQ(again.sample_idx, built.sample_idx);
  EXPECT_EQ(again.shuffle_idx, built.shuffle_idx);
  // A damaged cache is rebuilt, not trusted.
  test::spit(base + "_sample_idx.npy", "garbage");
  GptIndex third = build_gpt_index_cached(data, ranges[1], "valid", 800, 1024, 1234, &loaded, &why);
  EXPECT_FALSE(loaded);
  EXPECT_EQ(third.shuffle_idx, built.shuffle_idx);
}

}  // namespace
}  // namespace zlm::formats
