#include "formats/megatron_mmap.h"

#include <cstring>
#include <filesystem>
#include <sstream>

#include "common/core/error.h"
#include "test_util.h"

namespace zlm::formats {
namespace {

using test::data_path;
using test::slurp;
using test::spit;
using test::TempDir;

const std::string kOwt = data_path("megatron/meg-gpt2-openwebtext_text_document");
const std::string kNull = data_path("megatron/test_text_document");

TEST(MegatronReader, ReadsOpenWebTextFixture) {
  MegatronReader r(kOwt);
  EXPECT_EQ(r.dtype(), DType::UInt16);
  EXPECT_EQ(r.num_sequences(), 1000u);
  EXPECT_EQ(r.num_documents(), 1000u);
  EXPECT_FALSE(r.multimodal());
  for (uint64_t i = 0; i <= 1000; ++i) EXPECT_EQ(r.doc_idx(i), static_cast<int64_t>(i));
  for (uint64_t i = 0; i < r.num_sequences(); ++i) {
    auto toks = r.sequence_tokens(i);
    ASSERT_FALSE(toks.empty());
    EXPECT_EQ(toks.back(), 4999) << "sequence " << i << " must end with EOD";
  }
  EXPECT_EQ(r.total_tokens() * 2, r.bin_bytes());
}

TEST(MegatronReader, ReadsNullTokenizerFixture) {
  MegatronReader r(kNull);
  EXPECT_EQ(r.dtype(), DType::Int32);
  EXPECT_EQ(r.num_sequences(), 1000u);
  auto toks = r.sequence_tokens(999);
  std::vector<int64_t> want{111214, 343, 54365900, 77, 131072};
  EXPECT_EQ(toks, want);
  EXPECT_EQ(r.sequence_tokens(3, 1, 2), (std::vector<int64_t>{343, 54365900}));
}

TEST(MegatronReader, ReadsInt32AgNewsFixture) {
  MegatronReader r(data_path("megatron/ag_news_prompt_targets_document"));
  EXPECT_EQ(r.dtype(), DType::Int32);
  EXPECT_EQ(r.num_documents(), 100u);
}

// The writer must reproduce Megatron's bytes from the token sequences alone.
TEST(MegatronWriter, ReproducesOpenWebTextFixtureByteForByte) {
  TempDir dir;
  MegatronReader ref(kOwt);
  MegatronWriter w(dir.path("out"), best_fitting_dtype(5000));
  for (uint64_t i = 0; i < ref.num_sequences(); ++i) {
    auto toks = ref.sequence_tokens(i);
    w.add_item(std::span<const int64_t>(toks));
    w.end_document();
  }
  w.finalize();
  EXPECT_EQ(slurp(dir.path("out.bin")), slurp(kOwt + ".bin"));
  EXPECT_EQ(slurp(dir.path("out.idx")), slurp(kOwt + ".idx"));
}

// Tokens computed independently from test.jsonl (NullTokenizer = the integers
// of the text, EOD = vocab size 131072).
TEST(MegatronWriter, ReproducesNullTokenizerFixtureFromText) {
  TempDir dir;
  std::istringstream in(slurp(data_path("megatron/test.jsonl")));
  std::string line;
  MegatronWriter w(dir.path("out"), best_fitting_dtype(131072));
  int docs = 0;
  while (std::getline(in, line)) {
    auto q1 = line.find("\": \"") + 4;
    std::istringstream words(line.substr(q1, line.rfind('"') - q1));
    std::vector<int32_t> toks;
    int32_t v;
    while (words >> v) toks.push_back(v);
    toks.push_back(131072);
    w.add_item(std::span<const int32_t>(toks));
    w.end_document();
    ++docs;
  }
  EXPECT_EQ(docs, 1000);
  w.finalize();
  EXPECT_EQ(slurp(dir.path("out.bin")), slurp(kNull + ".bin"));
  EXPECT_EQ(slurp(dir.path("out.idx")), slurp(kNull + ".idx"));
}

// Bytes written by hand from the spec (the layout in formats/megatron_mmap.h).
TEST(MegatronWriter, IdxBytesMatchHandWrittenSpecExample) {
  std::vector<int32_t> sizes{3, 0, 2};
  std::vector<int64_t> doc_idx{0, 2, 2, 3};
  std::string got = build_idx_bytes(DType::UInt16, sizes, doc_idx);
  std::string want("MMIDIDX\0\0", 9);
  auto u64 = [&](uint64_t v) { for (int i = 0; i < 8; ++i) want.push_back(static_cast<char>((v >> (8 * i)) & 0xff)); };
  auto i32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) want.push_back(static_cast<char>((v >> (8 * i)) & 0xff)); };
  u64(1);
  want.push_back(8);
  u64(3);
  u64(4);
  i32(3); i32(0); i32(2);
  u64(0); u64(6); u64(6);  // pointers in bytes (uint16)
  u64(0); u64(2); u64(2); u64(3);
  EXPECT_EQ(got.size(), 34u + 12 * 3 + 8 * 4);
  EXPECT_EQ(got, want);
}

TEST(MegatronWriter, EmptyDocumentRepeatsDocIdx) {
  TempDir dir;
  MegatronWriter w(dir.path("e"), DType::UInt16);
  std::vector<int32_t> a{1, 2};
  w.add_item(std::span<const int32_t>(a));
  w.end_document();
  w.end_document();  // empty document
  w.add_item(std::span<const int32_t>(a));
  w.end_document();
  w.finalize();
  MegatronReader r(dir.path("e"));
  EXPECT_EQ(r.num_documents(), 3u);
  EXPECT_EQ(r.doc_idx(1), 1);
  EXPECT_EQ(r.doc_idx(2), 1);
  EXPECT_EQ(r.doc_idx(3), 2);
}

// The first id outside [0, limit) is found and placed (document, sequence);
// the check agrees with a plain scan for every limit around the real maximum.
TEST(MegatronReader, FindsTokenIdsOutsideTheVocabulary) {
  TempDir dir;
  for (DType dt : {DType::UInt16, DType::Int32}) {
    const std::string prefix = dir.path(dt == DType::UInt16 ? "u16" : "i32");
    MegatronWriter w(prefix, dt);
    std::vector<std::vector<int32_t>> docs = {{5, 7}, {}, {9, 60000, 3}, {61000}};
    for (const auto& d : docs) {
      if (!d.empty()) w.add_item(std::span<const int32_t>(d));
      w.end_document();
    }
    w.finalize();
    MegatronReader r(prefix);
    EXPECT_FALSE(find_token_id_out_of_range(r, 61001).has_value());
    auto bad = find_token_id_out_of_range(r, 61000);
    ASSERT_TRUE(bad.has_value());
    EXPECT_EQ(bad->id, 61000);
    EXPECT_EQ(bad->document, 3u);
    EXPECT_EQ(bad->sequence, 2u);
    bad = find_token_id_out_of_range(r, 50257);
    ASSERT_TRUE(bad.has_value());
    EXPECT_EQ(bad->id, 60000);
    EXPECT_EQ(bad->document, 2u);
    EXPECT_EQ(bad->sequence, 1u);
  }
}

TEST(MegatronWriter, AddIndexShiftsDocIdxAndAppendsBin) {
  TempDir dir;
  auto make = [&](const std::string& name, std::vector<std::vector<int32_t>> docs) {
    MegatronWriter w(dir.path(name), DType::Int32);
    for (auto& d : docs) {
      w.add_item(std::span<const int32_t>(d));
      w.end_document();
    }
    w.finalize();
  };
  make("a", {{1, 2, 3}, {4}});
  make("b", {{5, 6}, {7, 8, 9}, {10}});
  {
    MegatronWriter w(dir.path("m"), DType::Int32);
    MegatronReader a(dir.path("a")), b(dir.path("b"));
    w.add_index(a);
    w.add_index(b);
    w.finalize();
  }
  MegatronReader m(dir.path("m"));
  EXPECT_EQ(m.num_sequences(), 5u);
  std::vector<int64_t> doc_idx;
  for (uint64_t k = 0; k < m.num_doc_idx(); ++k) doc_idx.push_back(m.doc_idx(k));
  EXPECT_EQ(doc_idx, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(m.sequence_tokens(3), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(slurp(dir.path("m.bin")), slurp(dir.path("a.bin")) + slurp(dir.path("b.bin")));
}

TEST(MegatronWriter, MergeOfDifferentDtypesIsAnError) {
  TempDir dir;
  MegatronWriter w(dir.path("m"), DType::UInt16);
  MegatronReader other(kNull);
  EXPECT_ZLM_ERROR(w.add_index(other), ErrorKind::Format, "dtype int32");
}

TEST(MegatronWriter, IdOutsideDtypeIsAnError) {
  TempDir dir;
  MegatronWriter w(dir.path("x"), DType::UInt16);
  std::vector<int32_t> toks{70000};
  EXPECT_ZLM_ERROR(w.add_item(std::span<const int32_t>(toks)), ErrorKind::Format, "does not fit dtype uint16");
  // The message names the first id out of range, below or above it, in every narrow dtype.
  std::vector<int64_t> mixed{5, 65535, -3, 70000};
  EXPECT_ZLM_ERROR(w.add_item(std::span<const int64_t>(mixed)), ErrorKind::Format, "token id -3 does not fit dtype uint16");
  MegatronWriter w8(dir.path("y"), DType::Int8);
  std::vector<int32_t> wide{-128, 127, 128, -129};
  EXPECT_ZLM_ERROR(w8.add_item(std::span<const int32_t>(wide)), ErrorKind::Format, "token id 128 does not fit dtype int8");
  MegatronWriter w32(dir.path("z"), DType::Int32);
  std::vector<int64_t> big{1, int64_t{1} << 31};
  EXPECT_ZLM_ERROR(w32.add_item(std::span<const int64_t>(big)), ErrorKind::Format, "token id 2147483648 does not fit dtype int32");
}

TEST(MegatronWriter, UnfinalizedWriterLeavesNoFiles) {
  TempDir dir;
  {
    MegatronWriter w(dir.path("x"), DType::UInt16);
    std::vector<int32_t> toks{1, 2};
    w.add_item(std::span<const int32_t>(toks));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.root()));
}

TEST(BestFittingDtype, ThresholdIs65500) {
  EXPECT_EQ(best_fitting_dtype(50257), DType::UInt16);
  EXPECT_EQ(best_fitting_dtype(65499), DType::UInt16);
  EXPECT_EQ(best_fitting_dtype(65500), DType::Int32);
  EXPECT_EQ(best_fitting_dtype(131072), DType::Int32);
}

// ---- damaged inputs: each must be refused with a message naming the problem ----

class DamagedIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    idx_ = slurp(kOwt + ".idx");
    bin_ = slurp(kOwt + ".bin");
  }
  void expect_refused(const std::string& needle) {
    spit(dir_.path("d.idx"), idx_);
    spit(dir_.path("d.bin"), bin_);
    try {
      MegatronReader r(dir_.path("d"));
      ADD_FAILURE() << "accepted a damaged dataset; expected: " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Format);
      std::string msg = e.what();
      EXPECT_NE(msg.find(dir_.path("d.idx")), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  }
  void put_u64(size_t off, uint64_t v) { std::memcpy(idx_.data() + off, &v, 8); }
  void put_i32(size_t off, int32_t v) { std::memcpy(idx_.data() + off, &v, 4); }
  TempDir dir_;
  std::string idx_, bin_;
  static constexpr size_t kN = 1000, kPtr = 34 + 4 * kN, kDoc = kPtr + 8 * kN;
};

TEST_F(DamagedIndex, TruncatedIdx) {
  idx_.resize(idx_.size() - 3);
  expect_refused("truncated");
}
TEST_F(DamagedIndex, TruncatedHeader) {
  idx_.resize(20);
  expect_refused("truncated");
}
TEST_F(DamagedIndex, TruncatedBin) {
  bin_.resize(bin_.size() - 100);
  expect_refused("truncated .bin");
}
TEST_F(DamagedIndex, WrongMagic) {
  idx_[0] = 'X';
  expect_refused("wrong magic");
}
TEST_F(DamagedIndex, LegacyMagic) {
  std::memcpy(idx_.data(), "TNTIDX\0\0", 8);
  expect_refused("legacy");
}
TEST_F(DamagedIndex, UnknownVersion) {
  put_u64(9, 2);
  expect_refused("unknown version 2");
}
TEST_F(DamagedIndex, UnknownDtype) {
  idx_[17] = 9;
  expect_refused("unknown dtype code 9");
}
TEST_F(DamagedIndex, SizesDoNotFitBin) {
  put_i32(34 + 4 * 999, 1 << 30);
  expect_refused("ends at byte");
}
TEST_F(DamagedIndex, PointerInconsistent) {
  put_u64(kPtr + 8 * 5, 12345);
  expect_refused("pointers[5]");
}
TEST_F(DamagedIndex, NegativeSize) {
  put_i32(34 + 4 * 7, -1);
  expect_refused("sizes[7]");
}
TEST_F(DamagedIndex, NonMonotonicDocIdx) {
  put_u64(kDoc + 8 * 10, 3);
  expect_refused("not monotonic");
}
TEST_F(DamagedIndex, DocIdxNotStartingAtZero) {
  put_u64(kDoc, 1);
  expect_refused("doc_idx[0]");
}
TEST_F(DamagedIndex, DocIdxNotEndingAtN) {
  put_u64(kDoc + 8 * 1000, 999);
  expect_refused("expected N");
}
TEST_F(DamagedIndex, HugeCounts) {
  put_u64(18, ~0ull / 4);
  expect_refused("cannot fit");
}
TEST_F(DamagedIndex, ExtraBinBytes) {
  bin_ += "xx";
  expect_refused("the index describes");
}

TEST(MegatronReader, MissingFilesAreIoErrors) {
  TempDir dir;
  EXPECT_ZLM_ERROR(MegatronReader r(dir.path("nope")), ErrorKind::Io, "nope.idx");
  spit(dir.path("half.idx"), slurp(kOwt + ".idx"));
  EXPECT_ZLM_ERROR(MegatronReader r(dir.path("half")), ErrorKind::Io, "half.bin");
}

}  // namespace
}  // namespace zlm::formats
