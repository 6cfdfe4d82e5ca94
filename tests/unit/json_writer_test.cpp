#include "common/core/json_writer.h"

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "common/core/error.h"
#include "test_util.h"

namespace zlm {
namespace {

TEST(JsonEscape, EscapesQuotesBackslashesAndControls) {
  EXPECT_EQ(json_string("a\"b\\c\n\t\r\b\f"), "\"a\\\"b\\\\c\\n\\t\\r\\b\\f\"");
  EXPECT_EQ(json_string(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(json_string(std::string("\0", 1)), "\"\\u0000\"");
}

TEST(JsonEscape, KeepsUtf8LikeEnsureAsciiFalse) { EXPECT_EQ(json_string("caf\xc3\xa9 \xf0\x9f\x98\x80"), "\"caf\xc3\xa9 \xf0\x9f\x98\x80\""); }

TEST(JsonEscape, AsciiOnlyLikePythonDefault) {
  // json.dumps("café 😀") == '"caf\\u00e9 \\ud83d\\ude00"'
  EXPECT_EQ(json_string("caf\xc3\xa9 \xf0\x9f\x98\x80", true), "\"caf\\u00e9 \\ud83d\\ude00\"");
  EXPECT_EQ(json_string("\xff", true), "\"\\ufffd\"");
}

TEST(JsonObject, FieldsInOrderAsJsonDumps) {
  // json.dumps({"i": 3, "x": 0.1, "s": "a\"b", "t": True, "n": None, "big": 2**63 - 1, "one": 1.0, "arr": [1, 2]})
  JsonObject o;
  o.add("i", 3).add("x", 0.1).add("s", "a\"b").add("t", true).add_null("n").add("big", int64_t{9223372036854775807}).add("one", 1.0);
  o.add_raw("arr", json_array(std::vector<int64_t>{1, 2}));
  EXPECT_EQ(o.str(), R"({"i": 3, "x": 0.1, "s": "a\"b", "t": true, "n": null, "big": 9223372036854775807, "one": 1.0, "arr": [1, 2]})");
  EXPECT_EQ(JsonObject().str(), "{}");
  EXPECT_EQ(JsonObject().add("u", uint64_t{18446744073709551615ULL}).str(), R"({"u": 18446744073709551615})");
}

TEST(JsonObject, OptionalIsNullAndNonFiniteIsAnError) {
  EXPECT_EQ(JsonObject().add("a", std::optional<double>{}).add("b", std::optional<double>{2.5}).str(), R"({"a": null, "b": 2.5})");
  EXPECT_THROW(JsonObject().add("a", std::numeric_limits<double>::infinity()), Error);
  EXPECT_THROW(JsonObject().add("a", std::nan("")), Error);
}

TEST(JsonObject, NestedAndAsciiOnlyKeys) {
  const std::string inner = JsonObject().add("format", "pt").str();
  EXPECT_EQ(JsonObject(true).add_raw("__metadata__", inner).add("caf\xc3\xa9", "\xc3\xa9").str(),
            R"({"__metadata__": {"format": "pt"}, "caf\u00e9": "\u00e9"})");
}

}  // namespace
}  // namespace zlm
