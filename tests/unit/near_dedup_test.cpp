// near_dedup's stage files (truncation, damage, other settings refused) and
// the bucket verification rule shared with find_duplicates.
#include <filesystem>
#include <fstream>
#include <map>

#include "common/core/error.h"
#include "common/dedup/lsh.h"
#include "test_util.h"
#include "tools/near_dedup/stage_file.h"

namespace zlm::near_dedup {
namespace {

struct Rec {
  uint64_t a, b;
};

void write(const std::string& path, uint64_t n, uint64_t settings = 7, uint64_t subject = 3) {
  StageFileWriter w(path, StageFileKind::Pairs, sizeof(Rec), settings, subject);
  for (uint64_t i = 0; i < n; ++i) {
    Rec r{i, i * i};
    w.add(&r);
  }
  w.commit();
}

std::string error_of(const std::function<void()>& fn, ErrorKind* kind = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

TEST(StageFile, RoundTripAndRefusals) {
  test::TempDir dir;
  const std::string path = dir.path("x.pairs");
  write(path, 1000);
  StageFileReader r(path, StageFileKind::Pairs, sizeof(Rec), 7, 3, true);
  ASSERT_EQ(r.count(), 1000u);
  EXPECT_EQ(r.get<Rec>(999).b, 999u * 999u);

  ErrorKind kind{};
  EXPECT_NE(error_of([&] { StageFileReader(path, StageFileKind::Pairs, sizeof(Rec), 8, 3, false); }, &kind).find("other settings"), std::string::npos);
  EXPECT_EQ(kind, ErrorKind::Usage);
  EXPECT_NE(error_of([&] { StageFileReader(path, StageFileKind::Pairs, sizeof(Rec), 7, 4, false); }).find("another shard or band"), std::string::npos);
  EXPECT_NE(error_of([&] { StageFileReader(path, StageFileKind::Docs, sizeof(Rec), 7, 3, false); }).find("document table"), std::string::npos);
  EXPECT_NE(error_of([&] { StageFileReader(path, StageFileKind::Pairs, 24, 7, 3, false); }).find("16-byte records, expected 24"), std::string::npos);

  // Truncated anywhere: refused naming the file.
  const auto size = std::filesystem::file_size(path);
  for (uintmax_t keep : {uintmax_t{0}, uintmax_t{40}, size / 2, size - 1}) {
    std::filesystem::copy_file(path, dir.path("cut"), std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(dir.path("cut"), keep);
    const std::string e = error_of([&] { StageFileReader(dir.path("cut"), StageFileKind::Pairs, sizeof(Rec), 7, 3, true); }, &kind);
    EXPECT_NE(e.find(dir.path("cut")), std::string::npos) << keep;
    EXPECT_EQ(kind, ErrorKind::Format) << keep;
  }
  // One byte changed inside the records: the checksum, when verified.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);
    f.put('\x5a');
  }
  EXPECT_NO_THROW(StageFileReader(path, StageFileKind::Pairs, sizeof(Rec), 7, 3, false));
  EXPECT_NE(error_of([&] { StageFileReader(path, StageFileKind::Pairs, sizeof(Rec), 7, 3, true); }).find("checksum mismatch"), std::string::npos);

  // An empty file of records is valid.
  write(dir.path("empty"), 0);
  EXPECT_EQ(StageFileReader(dir.path("empty"), StageFileKind::Pairs, sizeof(Rec), 7, 3, true).count(), 0u);
}

// The rounds of a bucket: main = first remaining member; similar members leave.
TEST(VerifyBucket, RoundsAsMegatron) {
  // Sets chosen so that sim(0,1) = 1, sim(0,2) = 0, sim(0,3) = 0, sim(2,3) = 1.
  std::map<uint32_t, std::vector<uint64_t>> sets{{0, {1, 2}}, {1, {1, 2}}, {2, {5, 6}}, {3, {5, 6}}};
  auto shingles = [&](uint32_t d) -> const std::vector<uint64_t>& { return sets.at(d); };
  std::vector<uint32_t> docs{0, 1, 2, 3};
  for (int rounds : {1, 2, -1}) {
    std::vector<std::pair<uint32_t, uint32_t>> reported;
    uint64_t computed = 0;
    verify_bucket(docs, {.threshold = 0.5, .heuristic_iter = rounds}, shingles, {},
                  [&](uint32_t m, uint32_t o, double sim, bool fresh) {
                    EXPECT_TRUE(fresh);
                    EXPECT_EQ(sim, 1.0);
                    reported.emplace_back(m, o);
                  },
                  [&](uint32_t, uint32_t, double) { ++computed; });
    std::vector<std::pair<uint32_t, uint32_t>> want{{0, 1}};
    if (rounds != 1) want.emplace_back(2, 3);
    EXPECT_EQ(reported, want) << rounds;
    EXPECT_EQ(computed, rounds == 1 ? 3u : 4u) << rounds;
  }
  // A similarity known from an earlier band is reused and reported as not fresh.
  int fresh = 0, stale = 0;
  verify_bucket(docs, {}, shingles, [](uint32_t a, uint32_t b) { return a == 0 && b == 1 ? std::optional<double>(1.0) : std::nullopt; },
                [&](uint32_t, uint32_t, double, bool f) { (f ? fresh : stale)++; });
  EXPECT_EQ(stale, 1);
  EXPECT_EQ(fresh, 0);
}

}  // namespace
}  // namespace zlm::near_dedup
