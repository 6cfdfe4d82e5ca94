// Megatron's gradient-accumulation fusion (trainer/model/fused_linear.h) on the
// CPU, where the backward computes what autograd's linear backward computes and
// adds it: the fp32 buffers get exactly autograd's 16-bit gradients added (bit
// for bit), twice over two backward passes, the input's gradient is autograd's,
// take_added answers once per backward, and an unregistered weight takes
// at::linear's own path. The CUDA path (one GEMM with an fp32 output) is
// checked on the device (tests/gpu/fused_linear_gpu_test.cpp).
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "trainer/model/fused_linear.h"

namespace zlm::trainer {
namespace {

struct Case {
  torch::Tensor x, w, b, gy;
};

Case make_case(torch::ScalarType dtype, bool bias) {
  torch::manual_seed(5);
  Case c;
  c.x = torch::randn({3, 7, 16}).to(dtype).requires_grad_(true);
  c.w = torch::randn({24, 16}).mul(0.1).to(dtype).requires_grad_(true);
  if (bias) c.b = torch::randn({24}).to(dtype).requires_grad_(true);
  c.gy = torch::randn({3, 7, 24}).to(dtype);
  return c;
}

TEST(FusedLinear, AddsAutogradsGradientsIntoTheMainBuffers) {
  for (auto dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat})
    for (bool bias : {true, false}) {
      Case ref = make_case(dtype, bias);
      at::linear(ref.x, ref.w, ref.b).backward(ref.gy);

      Case c = make_case(dtype, bias);
      MainGrads main;
      auto main_w = torch::randn({24, 16}), main_b = torch::randn({24});
      const auto w0 = main_w.clone(), b0 = main_b.clone();
      main.set(c.w, main_w);
      if (bias) main.set(c.b, main_b);
      auto y = fused_linear(c.x, c.w, c.b, &main);
      EXPECT_TRUE(torch::equal(y, at::linear(c.x, c.w, c.b)));
      y.backward(c.gy);
      EXPECT_TRUE(torch::equal(c.x.grad(), ref.x.grad()));
      // The placeholders reached the parameters' accumulators (so the engine's hooks run).
      EXPECT_TRUE(c.w.grad().defined());
      if (bias) EXPECT_TRUE(c.b.grad().defined());
      EXPECT_TRUE(torch::equal(main_w, w0 + ref.w.grad().to(torch::kFloat))) << c10::toString(dtype);
      EXPECT_TRUE(main.take_added(c.w));
      EXPECT_FALSE(main.take_added(c.w));
      if (bias) {
        EXPECT_TRUE(torch::equal(main_b, b0 + ref.b.grad().to(torch::kFloat))) << c10::toString(dtype);
        EXPECT_TRUE(main.take_added(c.b));
      }
      fused_linear(c.x, c.w, c.b, &main).backward(c.gy);  // a second micro-batch adds again
      EXPECT_TRUE(torch::equal(main_w, w0 + ref.w.grad().to(torch::kFloat) + ref.w.grad().to(torch::kFloat)));
      EXPECT_TRUE(main.take_added(c.w));
    }
}

TEST(FusedLinear, UnregisteredOrWithoutGradModeIsAtLinear) {
  Case c = make_case(torch::kBFloat16, true);
  MainGrads main;
  fused_linear(c.x, c.w, c.b, &main).backward(c.gy);  // nothing registered: autograd's gradients
  Case ref = make_case(torch::kBFloat16, true);
  at::linear(ref.x, ref.w, ref.b).backward(ref.gy);
  EXPECT_TRUE(torch::equal(c.w.grad(), ref.w.grad()));
  EXPECT_TRUE(torch::equal(c.b.grad(), ref.b.grad()));

  auto main_w = torch::zeros({24, 16});
  main.set(c.w, main_w);
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(fused_linear(c.x, c.w, c.b, &main), at::linear(c.x, c.w, c.b)));
  }
  // A weight registered without its bias: neither is fused.
  c.w.mutable_grad().reset();
  fused_linear(c.x, c.w, c.b, &main).backward(c.gy);
  EXPECT_TRUE(torch::equal(c.w.grad(), ref.w.grad()));
  EXPECT_EQ(main_w.abs().sum().item<float>(), 0.0f);
  EXPECT_FALSE(main.take_added(c.w));
  main.clear();
  EXPECT_TRUE(main.empty());
}

}  // namespace
}  // namespace zlm::trainer
