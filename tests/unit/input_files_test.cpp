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

TEST(ExpandInputs, NothingMatchingIsUsageError) {
  test::TempDir dir;
  EXPECT_ZLM_ERROR(expand_inputs(dir.path("*.jsonl")), ErrorKind::Usage, "no such file");
  EXPECT_ZLM_ERROR(expand_inputs(dir.root().string()), ErrorKind::Usage, "holds no");
}

}  // namespace
}  // namespace zlm
