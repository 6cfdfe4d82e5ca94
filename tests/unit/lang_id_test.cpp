#include "common/text/lang_id.h"

#include <sstream>

#include "test_util.h"

namespace zlm {
namespace {

// A hand-labelled multilingual set (tests/data/langid/labelled.tsv) with
// langdetect's seeded predictions (tests/reference/make_langid_goldens.py).
TEST(LangId, AccuracyAndAgreementWithLangdetect) {
  std::istringstream labelled(test::slurp(test::data_path("langid/labelled.tsv")));
  std::istringstream ld(test::slurp(test::data_path("langid/langdetect.tsv")));
  std::string line, ld_guess;
  int total = 0, correct = 0, agree = 0, english_right = 0;
  while (std::getline(labelled, line) && std::getline(ld, ld_guess)) {
    auto tab = line.find('\t');
    std::string label = line.substr(0, tab), text = line.substr(tab + 1);
    LangGuess g = detect_language(text);
    std::string code = g.code == "zh-Hant" ? "zh" : g.code;
    ++total;
    correct += code == label;
    agree += code == ld_guess;
    english_right += (code == "en") == (label == "en");
    if (code != label) std::printf("  CLD2 says %s for %s: %s\n", code.c_str(), label.c_str(), text.c_str());
  }
  std::printf("CLD2 accuracy %d/%d, agreement with langdetect %d/%d, English vs not %d/%d\n", correct, total, agree, total,
              english_right, total);
  ASSERT_GE(total, 50);
  // docs/benchmarks.md states 50/50 for each: the test holds that claim.
  EXPECT_EQ(english_right, total);  // the decision cleanup makes
  EXPECT_EQ(correct, total);
  EXPECT_EQ(agree, total);
}

TEST(LangId, NoLettersIsUnknownAndPrefixIsUsed) {
  EXPECT_EQ(detect_language("12345 67890 !!!").code, "un");
  std::string text = "The committee will publish its final report on the new railway line early next spring. ";
  std::string mixed = text + std::string(20000, ' ') + "Le comité publiera son rapport final sur la nouvelle ligne.";
  EXPECT_EQ(detect_language(mixed, 200).code, "en");
}

}  // namespace
}  // namespace zlm
