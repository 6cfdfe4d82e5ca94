#include "common/json_escape.h"

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

}  // namespace
}  // namespace zlm
