#include "common/io/input_files.h"

#include "common/core/error.h"
#include "test_util.h"

namespace zlm {
namespace {

TEST(ExpandInputs, FileDirectoryAndGlobInSortedOrder) {
  test::TempDir dir;
  for (const char* n : {"b.jsonl", "a.jsonl.zst", "c.json.gz", "notes.md"}) test::spit(dir.path(n), "{}\n");
  EXPECT_EQ(expand_inputs(dir.path("b.jsonl")), std::vector<std::string>{dir.path("b.jsonl")});
  EXPECT_EQ(expand_inputs(dir.root().string()),
            (std::vector<std::string>{dir.path("a.jsonl.zst"), dir.path("b.jsonl"), dir.path("c.json.gz")}));
  EXPECT_EQ(expand_inputs(dir.path("*.json*")),
            (std::vector<std::string>{dir.path("a.jsonl.zst"), dir.path("b.jsonl"), dir.path("c.json.gz")}));
}

TEST(FileNumber, OneWidthPerSetSoNamesSortAsNumbers) {
  EXPECT_EQ(file_number(42, 10), "00042");
  EXPECT_EQ(file_number(0, 100000), "00000");
  EXPECT_EQ(file_number(99999, 100000), "99999");
  EXPECT_EQ(file_number(0, 100001), "000000");
  EXPECT_EQ(file_number(10001, 200000), "010001");
  EXPECT_LT(file_number(10001, 200000), file_number(100000, 200000));  // "part-10001" > "part-100000" byte-wise
}

TEST(ExpandInputs, NothingMatchingIsUsageError) {
  test::TempDir dir;
  EXPECT_ZLM_ERROR(expand_inputs(dir.path("*.jsonl")), ErrorKind::Usage, "no such file");
  EXPECT_ZLM_ERROR(expand_inputs(dir.root().string()), ErrorKind::Usage, "holds no");
}

}  // namespace
}  // namespace zlm
