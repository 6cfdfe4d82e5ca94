#include "common/text/text_fix.h"

#include <simdjson.h>

#include <sstream>

#include "test_util.h"

namespace zlm {
namespace {

TEST(FixText, FtfyDocumentedExamples) {
  EXPECT_EQ(fix_text("\xe2\x9c\x94 No problems"), "\xe2\x9c\x94 No problems");
  EXPECT_EQ(fix_text("\xc3\xa2\xc5\x93\xe2\x80\x9d No problems"), "\xe2\x9c\x94 No problems");  // "âœ” No problems"
  EXPECT_EQ(fix_text("s\xc3\x83\xc2\xb3"), "s\xc3\xb3");                                       // "sÃ³" -> "só"
  EXPECT_EQ(fix_text("\xef\xbc\xac\xef\xbc\xaf\xef\xbc\xb5\xef\xbc\xa4"), "LOUD");              // fullwidth
  EXPECT_EQ(fix_text("it&#x2019;s"), "it's");
  EXPECT_EQ(fix_text("<p>&amp;</p>"), "<p>&amp;</p>");  // "auto": no unescaping once '<' is seen
  EXPECT_EQ(fix_text("a\r\nb"), "a\nb");
  EXPECT_EQ(fix_text("plain ascii"), "plain ascii");
}

// Agreement with ftfy 6.3.1 on >= 2000 strings (tests/reference/make_ftfy_goldens.py):
// real OpenWebText lines, mojibake made from them through seven codecs (one or two
// layers, or only part of a line), and constructed cases.
TEST(FixText, AgreesWithFtfyOnTheGoldenSet) {
  simdjson::dom::parser parser;
  std::istringstream in(test::slurp(test::data_path("ftfy/golden.jsonl")));
  std::string line;
  int total = 0, same = 0;
  std::vector<std::string> diffs;
  while (std::getline(in, line)) {
    simdjson::dom::element rec = parser.parse(line);
    std::string_view input = rec["in"].get_string(), want = rec["out"].get_string();
    std::string got = fix_text(input);
    ++total;
    if (got == want) ++same;
    else if (diffs.size() < 40) diffs.push_back("in:   " + std::string(input) + "\n  want: " + std::string(want) + "\n  got:  " + got);
  }
  ASSERT_GE(total, 2000);
  double agreement = static_cast<double>(same) / total;
  std::printf("ftfy agreement: %d / %d = %.4f\n", same, total, agreement);
  for (const auto& d : diffs) std::printf("  %s\n", d.c_str());
  EXPECT_EQ(same, total);  // the README claims ftfy's output on every string of the set
}

}  // namespace
}  // namespace zlm
