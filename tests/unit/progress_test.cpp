#include "common/core/progress.h"

#include "test_util.h"

namespace zlm {
namespace {

TEST(Progress, LineHasRatesAndEta) {
  Progress p({.label = "docs", .total_bytes = 4000000, .force_tty = 0, .extra_label = "tok"});
  p.add(1000, 1000000, 250000);
  std::string line = p.format_line(2.0);
  EXPECT_NE(line.find("1.00 k docs"), std::string::npos) << line;
  EXPECT_NE(line.find("500/s"), std::string::npos) << line;
  EXPECT_NE(line.find("0.50 MB/s"), std::string::npos) << line;
  EXPECT_NE(line.find("125.00 k tok/s"), std::string::npos) << line;
  EXPECT_NE(line.find("25.0%, ETA 6s"), std::string::npos) << line;
}

TEST(Progress, KeptFractionAndNoEtaWithoutTotal) {
  Progress p({.label = "urls", .force_tty = 0});
  p.add(200, 0);
  p.set_kept(50);
  std::string line = p.format_line(1.0);
  EXPECT_NE(line.find("kept 25.0%"), std::string::npos) << line;
  EXPECT_EQ(line.find("ETA"), std::string::npos) << line;
}

TEST(Progress, FinishPrintsOnce) {
  Progress p({.label = "docs", .force_tty = 0});
  p.add(3, 30);
  testing::internal::CaptureStderr();
  p.finish();
  p.finish();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("done:"), err.rfind("done:")) << err;
  EXPECT_NE(err.find("3 docs"), std::string::npos) << err;
}

TEST(HumanFormat, CountsAndDurations) {
  EXPECT_EQ(human_count(999), "999");
  EXPECT_EQ(human_count(1234567), "1.23 M");
  EXPECT_EQ(human_duration(5), "5s");
  EXPECT_EQ(human_duration(125), "2m05s");
  EXPECT_EQ(human_duration(3725), "1h02m");
}

}  // namespace
}  // namespace zlm
