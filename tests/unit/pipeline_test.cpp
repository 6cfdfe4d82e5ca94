#include "common/io/pipeline.h"

#include <stdexcept>

#include "test_util.h"

namespace zlm {
namespace {

std::vector<uint64_t> run(int threads, uint64_t batches) {
  uint64_t next = 0;
  std::vector<uint64_t> out;
  run_ordered_pipeline<uint64_t, uint64_t>(
      threads, 8,
      [&](uint64_t& b) {
        if (next == batches) return false;
        b = next++;
        return true;
      },
      [&](uint64_t& b, uint64_t& r) {
        uint64_t x = b;  // uneven work so batches finish out of order
        for (uint64_t i = 0; i < (b % 7) * 20000; ++i) x = x * 6364136223846793005ULL + 1;
        r = b * 1000 + (x & 0);
      },
      [&](uint64_t& r) { out.push_back(r); });
  return out;
}

TEST(OrderedPipeline, OutputOrderIsInputOrderForAnyThreadCount) {
  auto one = run(1, 500);
  ASSERT_EQ(one.size(), 500u);
  for (uint64_t i = 0; i < 500; ++i) EXPECT_EQ(one[i], i * 1000);
  EXPECT_EQ(run(2, 500), one);
  EXPECT_EQ(run(8, 500), one);
}

TEST(OrderedPipeline, ExceptionsReachTheCaller) {
  uint64_t next = 0;
  EXPECT_THROW((run_ordered_pipeline<int, int>(
                   4, 4,
                   [&](int& b) {
                     b = static_cast<int>(next++);
                     return next < 100;
                   },
                   [&](int& b, int&) {
                     if (b == 42) throw std::runtime_error("boom");
                   },
                   [&](int&) {})),
               std::runtime_error);
}

}  // namespace
}  // namespace zlm
