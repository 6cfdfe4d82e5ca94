#include "common/core/stats.h"

#include "test_util.h"

namespace zlm {
namespace {

TEST(Stats, JsonKeepsOrderAndTypes) {
  Stats s("tool");
  s.set("docs_in", uint64_t{10});
  s.set("delta", int64_t{-3});
  s.set("ratio", 0.5);
  s.set("note", "a\"b");
  s.set("docs_in", uint64_t{11});
  std::string json = s.to_json();
  EXPECT_NE(json.find("\"tool\": \"tool\""), std::string::npos);
  auto a = json.find("\"docs_in\": 11"), b = json.find("\"delta\": -3"), c = json.find("\"ratio\": 0.5"),
       d = json.find("\"note\": \"a\\\"b\"");
  ASSERT_NE(a, std::string::npos) << json;
  ASSERT_NE(b, std::string::npos) << json;
  ASSERT_NE(c, std::string::npos) << json;
  ASSERT_NE(d, std::string::npos) << json;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_LT(c, d);
}

TEST(Stats, WriteJsonIsAtomicFile) {
  test::TempDir dir;
  Stats s("t");
  s.set("x", 1);
  s.write_json(dir.path("s.json"));
  EXPECT_NE(test::slurp(dir.path("s.json")).find("\"x\": 1"), std::string::npos);
}

}  // namespace
}  // namespace zlm
