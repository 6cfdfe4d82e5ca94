#include "trainer/config/json_object.h"

#include "common/core/error.h"
#include "test_util.h"

namespace zlm::trainer {
namespace {

TEST(JsonObject, RepeatedKeysKeepTheLastValueAsPython) {
  test::TempDir dir;
  test::spit(dir.path("a.json"), R"({"stage": 1, "inner": {"x": 1, "x": 2.5}, "stage": 3, "flag": true, "name": "n", "v": [0.9, 0.95]})");
  const JsonObjectView v = read_json_object(dir.path("a.json"));
  EXPECT_EQ(v.integer("stage"), 3);  // json.load keeps the last of a repeated key
  EXPECT_DOUBLE_EQ(v.object("inner").number("x"), 2.5);
  EXPECT_TRUE(v.boolean("flag"));
  EXPECT_EQ(v.string("name"), "n");
  EXPECT_EQ(v.numbers("v"), (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(v.check_keys({"stage", "inner", "flag", "name"}, {"v"}), std::vector<std::string>{"v"});
}

TEST(JsonObject, ErrorsNameFileKeyAndPlace) {
  test::TempDir dir;
  test::spit(dir.path("bad.json"), "{\n  \"a\": 1,\n  \"b\": [1, 2,]\n}");
  EXPECT_ZLM_ERROR(read_json_object(dir.path("bad.json")), ErrorKind::Format, "at line 3");
  test::spit(dir.path("list.json"), "[1]");
  EXPECT_ZLM_ERROR(read_json_object(dir.path("list.json")), ErrorKind::Format, "the top level must be a JSON object");
  test::spit(dir.path("t.json"), R"({"z": {"stage": "two", "f": 1.5}, "unknown_key": 1})");
  const JsonObjectView v = read_json_object(dir.path("t.json"));
  EXPECT_ZLM_ERROR(v.object("z").integer("stage"), ErrorKind::Usage, "t.json: z.stage: must be a number");
  EXPECT_ZLM_ERROR(v.object("z").integer("f"), ErrorKind::Usage, "z.f: must be an integer");
  EXPECT_ZLM_ERROR(v.object("z").boolean("f"), ErrorKind::Usage, "z.f: must be true or false");
  EXPECT_ZLM_ERROR(v.check_keys({"z"}, {}), ErrorKind::Usage, "unknown_key: not a setting zerolm knows");
  EXPECT_ZLM_ERROR(v.integer("missing"), ErrorKind::Usage, "missing: missing");
  EXPECT_ZLM_ERROR(read_json_object(dir.path("nope.json")), ErrorKind::Io, "nope.json");
}

}  // namespace
}  // namespace zlm::trainer
