#include "common/text/sentence_splitter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace zlm {
namespace {

std::vector<std::string> split(SentenceSplitter& s, const std::string& text, bool keep_newlines) {
  std::vector<std::string> out;
  for (std::string_view v : s.split(text, keep_newlines)) out.emplace_back(v);
  return out;
}

TEST(SentenceSplitter, SplitsAndStripsWithoutKeepNewlines) {
  SentenceSplitter s("english");
  EXPECT_EQ(split(s, "  The first one. The second one!  Is this the third?  ", false),
            (std::vector<std::string>{"The first one.", "The second one!", "Is this the third?"}));
  EXPECT_TRUE(split(s, "   \n  ", false).empty());
  EXPECT_TRUE(split(s, "", false).empty());
}

// --keep-newlines: each piece keeps its trailing newline, except at the very
// end. A piece of whitespace alone (the blank line between paragraphs, which
// ICU breaks on its own) is dropped; Punkt would leave it on the sentence before.
TEST(SentenceSplitter, KeepNewlinesKeepsTrailingWhitespace) {
  SentenceSplitter s("english");
  EXPECT_EQ(split(s, "One sentence here.\nAnother one follows.\n\nA last one.\n", true),
            (std::vector<std::string>{"One sentence here.\n", "Another one follows.\n", "A last one."}));
  EXPECT_EQ(split(s, "First. Second.", true), (std::vector<std::string>{"First. ", "Second."}));
}

// The views point into the text given; a second split reuses the splitter.
TEST(SentenceSplitter, ViewsPointIntoTheTextAndTheSplitterIsReusable) {
  SentenceSplitter s("en");
  const std::string a = "Alpha beta. Gamma delta.";
  const auto& first = s.split(a, false);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_GE(first[0].data(), a.data());
  EXPECT_LE(first[1].data() + first[1].size(), a.data() + a.size());
  EXPECT_EQ(split(s, "Only one.", false), (std::vector<std::string>{"Only one."}));
}

}  // namespace
}  // namespace zlm
