#include "common/core/log.h"

#include "test_util.h"

namespace zlm {
namespace {

int g_evaluations = 0;
int count_eval() { return ++g_evaluations; }

TEST(Log, SkipsArgumentEvaluationBelowThreshold) {
  log_set_level(LogLevel::Wrn);
  g_evaluations = 0;
  ZLM_LOG_DBG("%d", count_eval());
  ZLM_LOG_INF("%d", count_eval());
  EXPECT_EQ(g_evaluations, 0);
  testing::internal::CaptureStderr();
  ZLM_LOG_WRN("warned %d", count_eval());
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(g_evaluations, 1);
  EXPECT_NE(err.find("WRN warned 1"), std::string::npos) << err;
  log_set_level(LogLevel::Inf);
}

TEST(Log, LinesCarryToolNameAndElapsedTime) {
  log_init("mytool");
  testing::internal::CaptureStderr();
  ZLM_LOG_INF("hello");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.rfind("mytool [", 0), 0u) << err;
  EXPECT_NE(err.find("s] INF hello\n"), std::string::npos) << err;
}

}  // namespace
}  // namespace zlm
