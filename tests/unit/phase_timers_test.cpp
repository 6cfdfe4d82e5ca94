#include "trainer/report/phase_timers.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/core/error.h"
#include "test_util.h"

namespace zlm::trainer {
namespace {

// Megatron's lines (megatron/core/timers.py): the name and a space dotted to 48, two decimals.
TEST(PhaseTimers, PrintsAsMegatron) {
  const std::vector<std::vector<PhaseTimes>> ranks = {{{"forward-backward", 412.314}, {"optimizer", 21.4}},
                                                      {{"forward-backward", 415.019}, {"optimizer", 21.43}, {"embedding-grads-all-reduce", 1.5}}};
  EXPECT_EQ(format_phase_times(ranks, "minmax"),
            "(min, max) time across ranks (ms):\n"
            "    forward-backward ...............................: (412.31, 415.02)\n"
            "    optimizer ......................................: (21.40, 21.43)\n"
            "    embedding-grads-all-reduce .....................: (1.50, 1.50)");
  EXPECT_EQ(format_phase_times(ranks, "max"),
            "max time across ranks (ms):\n"
            "    forward-backward ...............................: 415.02\n"
            "    optimizer ......................................: 21.43\n"
            "    embedding-grads-all-reduce .....................: 1.50");
  EXPECT_EQ(format_phase_times(ranks, "all"),
            "times across ranks (ms):\n  forward-backward:\n     rank  0: 412.31\n     rank  1: 415.02\n"
            "  optimizer:\n     rank  0: 21.40\n     rank  1: 21.43\n  embedding-grads-all-reduce:\n     rank  1: 1.50");
  EXPECT_EQ(format_phase_times({{}}, "minmax"), "");
}

TEST(PhaseTimers, TimesPhasesOfTheLevelAndResets) {
  int syncs = 0;
  PhaseTimers t(1, [&] { ++syncs; });
  for (int it = 0; it < 2; ++it) {
    t.start("forward-backward");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    t.stop("forward-backward");
    t.start("forward-compute", 2);  // above the level: not timed, no wait
    t.stop("forward-compute", 2);
  }
  EXPECT_EQ(syncs, 4);
  std::vector<PhaseTimes> got = t.take(2);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, "forward-backward");
  EXPECT_GE(got[0].ms, 19.0);
  EXPECT_LT(got[0].ms, 200.0);
  got = t.take(2);
  EXPECT_EQ(got[0].ms, 0.0);
  EXPECT_DEATH(t.stop("forward-backward"), "stopped without a start");
}

TEST(PhaseTimers, EncodesForTheExchange) {
  const std::vector<PhaseTimes> times = {{"forward-backward", 412.3141592653589}, {"optimizer-inner-step", 0.001}};
  const std::vector<PhaseTimes> back = decode_phase_times(encode_phase_times(times));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].name, "optimizer-inner-step");
  EXPECT_EQ(back[0].ms, times[0].ms);
  EXPECT_TRUE(decode_phase_times("").empty());
}

}  // namespace
}  // namespace zlm::trainer
