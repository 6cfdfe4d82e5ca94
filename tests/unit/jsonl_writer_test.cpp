#include "common/core/jsonl_writer.h"

#include <limits>

#include "test_util.h"

namespace zlm {
namespace {

TEST(JsonlWriter, WritesEscapedObjectsAndRawLines) {
  test::TempDir dir;
  JsonlWriter w(dir.path("o.jsonl"));
  w.write_raw_line(R"({"keep": "as is"})");
  w.begin_object();
  w.field("url", "http://a/\"b\"\n");
  w.field("score", 0.5);
  w.field("n", int64_t{-3});
  w.field_raw("ids", "[1, 2]");
  w.end_object();
  EXPECT_EQ(w.lines(), 2u);
  w.commit();
  EXPECT_EQ(test::slurp(dir.path("o.jsonl")),
            "{\"keep\": \"as is\"}\n{\"url\": \"http://a/\\\"b\\\"\\n\", \"score\": 0.5, \"n\": -3, \"ids\": [1, 2]}\n");
}

TEST(JsonNumber, ShortestRoundTripLikePython) {
  EXPECT_EQ(json_number(1.0), "1.0");
  EXPECT_EQ(json_number(0.1), "0.1");
  EXPECT_EQ(json_number(1.0 / 3), "0.3333333333333333");
}

}  // namespace
}  // namespace zlm

namespace zlm {
namespace {

TEST(PythonFloatRepr, NonFiniteAndWholeNumbers) {
  EXPECT_EQ(python_float_repr(2.0), "2.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1234.5678901234567), "1234.5678901234567");
  EXPECT_EQ(python_float_repr(std::numeric_limits<double>::infinity()), "inf");
}

}  // namespace
}  // namespace zlm
