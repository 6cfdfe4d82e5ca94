#include "tools/shuffle/bucket_sort.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <tuple>

#include "common/core/error.h"
#include "test_util.h"

namespace zlm::shuffle {
namespace {

struct Line {
  uint64_t key, index;
  std::string text;
};

// Records with keys from a few values (ties broken by index), lines of 0-300 bytes and one
// longer than the whole budget.
std::vector<Line> make_lines(size_t n) {
  std::mt19937_64 rng(17);
  std::vector<Line> lines;
  for (size_t i = 0; i < n; ++i) lines.push_back({rng() % 5000, i, std::string(rng() % 300, static_cast<char>('a' + i % 26))});
  lines[n / 2].text.assign(200000, 'L');
  return lines;
}

// Every budget gives the lines in (key, index) order: in memory (no run), in runs merged
// at once, and in runs merged in groups first.
TEST(BucketSorter, RunsOnDiskGiveTheInMemoryOrder) {
  test::TempDir dir;
  std::vector<Line> lines = make_lines(20000);
  std::vector<Line> sorted = lines;
  std::sort(sorted.begin(), sorted.end(), [](const Line& a, const Line& b) { return std::tie(a.key, a.index) < std::tie(b.key, b.index); });
  std::string want;
  for (const Line& l : sorted) want += l.text + "\n";
  for (uint64_t budget : {uint64_t{1} << 30, uint64_t{1} << 20, uint64_t{0}}) {  // 0: the least, 64 KiB
    BucketSorter sorter(budget, dir.path("b.run"));
    for (const Line& l : lines) sorter.add(l.key, l.index, l.text);
    {
      OutputFile out(dir.path("out"));
      EXPECT_EQ(sorter.finish(out), lines.size());
      out.commit();
    }
    EXPECT_EQ(test::slurp(dir.path("out")), want) << "budget " << budget;
    if (budget == 1u << 30) {
      EXPECT_EQ(sorter.runs(), 0u);
    } else {
      EXPECT_GT(sorter.runs(), budget == 0 ? 40u : 4u);
    }
    if (budget == 0) {
      EXPECT_GT(sorter.merge_passes(), 10u) << "64 KiB merges 2 runs at once";
    }
  }
  size_t left = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.root())) left += e.path().filename() != "out";
  EXPECT_EQ(left, 0u) << "the run files are removed";
}

// A record cut short and one whose length runs past the body are errors naming the file and byte.
TEST(RecordReader, NamesTheFileAndByteOfABadRecord) {
  test::TempDir dir;
  std::string body;
  auto rec = [&](uint64_t key, uint64_t len, const std::string& text) {
    const uint64_t h[3] = {key, 0, len};
    body.append(reinterpret_cast<const char*>(h), sizeof h);
    body += text;
  };
  rec(1, 3, "abc");
  rec(2, 50, "short");
  test::spit(dir.path("f"), body);
  Record r;
  RecordReader long_one(dir.path("f"), body.size(), 64);
  ASSERT_TRUE(long_one.next(r));
  EXPECT_EQ(r.line, "abc");
  EXPECT_ZLM_ERROR(long_one.next(r), ErrorKind::Format, "f: byte 27: a record longer than the file");
  RecordReader cut(dir.path("f"), 40, 64);
  ASSERT_TRUE(cut.next(r));
  EXPECT_ZLM_ERROR(cut.next(r), ErrorKind::Format, "f: byte 27: a record cut short");
}

}  // namespace
}  // namespace zlm::shuffle
