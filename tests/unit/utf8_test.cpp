#include "common/utf8.h"

#include "test_util.h"

namespace zlm {
namespace {

TEST(Utf8, DecodesAllLengths) {
  uint32_t cp = 0;
  EXPECT_EQ(utf8_decode("A", &cp), 1u);
  EXPECT_EQ(cp, 0x41u);
  EXPECT_EQ(utf8_decode("\xc3\xa9", &cp), 2u);
  EXPECT_EQ(cp, 0xE9u);
  EXPECT_EQ(utf8_decode("\xe6\x9d\xb1", &cp), 3u);
  EXPECT_EQ(cp, 0x6771u);
  EXPECT_EQ(utf8_decode("\xf0\x9f\x98\x80", &cp), 4u);
  EXPECT_EQ(cp, 0x1F600u);
}

TEST(Utf8, RejectsIllFormedSequences) {
  uint32_t cp;
  EXPECT_EQ(utf8_decode("\xc0\xaf", &cp), 0u);          // overlong
  EXPECT_EQ(utf8_decode("\xed\xa0\x80", &cp), 0u);      // surrogate U+D800
  EXPECT_EQ(utf8_decode("\xf4\x90\x80\x80", &cp), 0u);  // > U+10FFFF
  EXPECT_EQ(utf8_decode("\xe6\x9d", &cp), 0u);          // truncated
  EXPECT_EQ(utf8_decode("\x80", &cp), 0u);              // lone continuation
}

TEST(Utf8, ValidReportsFirstBadOffset) {
  size_t bad = 0;
  EXPECT_TRUE(utf8_valid("plain ascii text that is long enough for the fast path"));
  EXPECT_FALSE(utf8_valid("0123456789abcdef\xff", &bad));
  EXPECT_EQ(bad, 16u);
}

}  // namespace
}  // namespace zlm
