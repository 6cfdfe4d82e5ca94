#include "common/core/utf8.h"

#include <random>
#include <string>
#include <vector>

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

// The inline decoder against the slow definition, over every sequence of up to
// three bytes whose lead byte can start a multi-byte form, and every 4-byte
// sequence with a 4-byte lead followed by continuation bytes or boundary values.
void expect_same(const std::string& s) {
  const Utf8Step fast = utf8_step(s.data(), s.data() + s.size());
  const Utf8Step ref = utf8_step_reference(s);
  ASSERT_EQ(fast.ok, ref.ok) << testing::PrintToString(s);
  ASSERT_EQ(fast.len, ref.len) << testing::PrintToString(s);
  if (fast.ok) {
    ASSERT_EQ(fast.cp, ref.cp) << testing::PrintToString(s);
  }
}

TEST(Utf8, StepEqualsReferenceExhaustively) {
  std::string s;
  for (int a = 0; a < 256; ++a) {
    expect_same(std::string(1, static_cast<char>(a)));
    for (int b = 0; b < 256; ++b) {
      s = {static_cast<char>(a), static_cast<char>(b)};
      expect_same(s);
      if (a < 0xE0 || a > 0xF4) continue;
      for (int c = 0; c < 256; ++c) {
        s = {static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)};
        expect_same(s);
      }
    }
  }
  std::vector<int> tail;
  for (int v = 0x80; v <= 0xBF; ++v) tail.push_back(v);
  for (int v : {0x00, 0x41, 0x7F, 0xC0, 0xC2, 0xE0, 0xF0, 0xFF}) tail.push_back(v);
  for (int a = 0xF0; a <= 0xF4; ++a)
    for (int b : tail)
      for (int c : tail)
        for (int d : tail) {
          s = {static_cast<char>(a), static_cast<char>(b), static_cast<char>(c), static_cast<char>(d)};
          expect_same(s);
        }
}

TEST(Utf8, MaximalSubpartsAsPython) {
  // Python: b"\xe6\x9d\x41".decode(errors="replace") == "\ufffdA" (one U+FFFD for 2 bytes).
  auto len = [](std::string_view s) { return utf8_step(s.data(), s.data() + s.size()).len; };
  EXPECT_EQ(len("\xe6\x9d\x41"), 2u);
  EXPECT_EQ(len("\xf0\x9f\x98"), 3u);  // truncated 4-byte form
  EXPECT_EQ(len("\xed\xa0\x80"), 1u);  // a surrogate: ED then A0 is already ill-formed
  EXPECT_EQ(len("\xc0\xaf"), 1u);
  EXPECT_EQ(len("\xf4\x90\x80\x80"), 1u);
}

TEST(Utf8, ValidEqualsStepByStep) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20000; ++trial) {
    std::string s(rng() % 40, 'a');
    for (char& ch : s) ch = static_cast<char>(rng() % 4 == 0 ? rng() % 256 : 'a' + rng() % 26);
    size_t expected_bad = s.size();
    for (size_t i = 0; i < s.size();) {
      const Utf8Step st = utf8_step_reference(std::string_view(s).substr(i));
      if (!st.ok) {
        expected_bad = i;
        break;
      }
      i += st.len;
    }
    size_t bad = s.size();
    EXPECT_EQ(utf8_valid(s, &bad), expected_bad == s.size());
    EXPECT_EQ(bad, expected_bad);
  }
}

TEST(Utf8, ValidReportsFirstBadOffset) {
  size_t bad = 0;
  EXPECT_TRUE(utf8_valid("plain ascii text that is long enough for the fast path"));
  EXPECT_FALSE(utf8_valid("0123456789abcdef\xff", &bad));
  EXPECT_EQ(bad, 16u);
}

}  // namespace
}  // namespace zlm
