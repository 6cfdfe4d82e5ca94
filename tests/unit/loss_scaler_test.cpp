#include "trainer/zero/loss_scaler.h"

#include <simdjson.h>

#include <vector>

#include "test_util.h"

namespace zlm::trainer {
namespace {

// Megatron's DynamicGradScaler (megatron/core/optimizer/grad_scaler.py), worked
// by hand: an overflow resets the growth count and spends one unit of
// hysteresis; with none left every further overflow halves the scale (never
// below the minimum); `window` clean steps in a row double it and restore the
// hysteresis.
TEST(LossScaler, DynamicAsMegatronsGradScaler) {
  LossScaler s(/*initial=*/1024, /*min_scale=*/256, /*window=*/3, /*hysteresis=*/2, /*dynamic=*/true);
  struct Step {
    bool found_inf;
    double scale_after;
  };
  const std::vector<Step> steps = {
      {false, 1024}, {false, 1024}, {false, 2048},  // 3 clean steps: doubled, hysteresis back to 2
      {true, 2048},                                 // hysteresis 2 -> 1: kept
      {true, 1024},                                 // 1 -> 0: halved
      {true, 512},                                  // still none left: halved again
      {false, 512},                                 // growth 1
      {true, 256},                                  // growth reset, halved
      {true, 256},                                  // 128 would be below the minimum
      {false, 256}, {false, 256}, {false, 512},     // 3 clean: doubled, hysteresis 2
      {true, 512},                                  // 2 -> 1
      {false, 512}, {false, 512},                   // growth 2 (the overflow reset it)
      {true, 256},                                  // 1 -> 0: halved
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    s.update(steps[i].found_inf);
    EXPECT_EQ(s.scale(), steps[i].scale_after) << "after step " << i;
  }
}

// megatron-core's DynamicGradScaler itself, stepped by
// tests/reference/make_grad_scaler_golden.py over 7500 overflow / clean steps
// in three configurations (Megatron's defaults among them): the same scale
// after every step.
TEST(LossScaler, EqualsMegatronCoresDynamicGradScaler) {
  simdjson::dom::parser parser;
  simdjson::dom::element golden = parser.load(test::data_path("grad_scaler/dynamic.json"));
  int cases = 0;
  for (simdjson::dom::element c : golden["cases"].get_array()) {
    LossScaler s(c["initial"].get_double(), c["min_scale"].get_double(), c["window"].get_int64(), c["hysteresis"].get_int64(), true);
    std::vector<int64_t> found_inf;
    std::vector<double> scale;
    for (simdjson::dom::element v : c["found_inf"].get_array()) found_inf.push_back(v.get_int64());
    for (simdjson::dom::element v : c["scale"].get_array()) scale.push_back(v.get_double());
    ASSERT_EQ(found_inf.size(), scale.size());
    ASSERT_GT(found_inf.size(), 100u);
    for (size_t i = 0; i < found_inf.size(); ++i) {
      s.update(found_inf[i] != 0);
      ASSERT_EQ(s.scale(), scale[i]) << "case " << cases << ", after step " << i;
    }
    ++cases;
  }
  EXPECT_EQ(cases, 3);
}

TEST(LossScaler, StaticNeverMoves) {
  LossScaler s(/*initial=*/128, /*min_scale=*/1, /*window=*/1, /*hysteresis=*/1, /*dynamic=*/false);
  for (bool inf : {true, true, false, false, true}) {
    s.update(inf);
    EXPECT_EQ(s.scale(), 128);
  }
}

}  // namespace
}  // namespace zlm::trainer
