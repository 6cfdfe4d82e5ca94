// The gradient-accumulation fusion of the layer norms (trainer/model/
// fused_layer_norm.h) on the CPU, where the backward computes what autograd's
// layer-norm backward computes and adds it: the fp32 buffers get exactly
// autograd's 16-bit gradients added (bit for bit), again on a second backward,
// the input's gradient and the output are autograd's, take_added answers once
// per backward, and without both targets (or grad mode) it is at::layer_norm.
// The CUDA kernel is checked on the device (tests/gpu/fused_layer_norm_gpu_test.cpp).
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "trainer/model/fused_layer_norm.h"

namespace zlm::trainer {
namespace {

struct Case {
  torch::Tensor x, w, b, gy;
};

Case make_case(torch::ScalarType dtype) {
  torch::manual_seed(7);
  Case c;
  c.x = (torch::randn({3, 5, 24}) * 2 + 0.5).to(dtype).requires_grad_(true);
  c.w = (1 + torch::randn({24}) * 0.1).to(dtype).requires_grad_(true);
  c.b = (torch::randn({24}) * 0.1).to(dtype).requires_grad_(true);
  c.gy = torch::randn({3, 5, 24}).to(dtype);
  return c;
}

TEST(FusedLayerNorm, AddsAutogradsGradientsIntoTheMainBuffers) {
  for (auto dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
    Case ref = make_case(dtype);
    auto y_ref = at::layer_norm(ref.x, {24}, ref.w, ref.b, 1e-5);
    y_ref.backward(ref.gy);

    Case c = make_case(dtype);
    MainGrads main;
    auto main_w = torch::randn({24}), main_b = torch::randn({24});
    const auto w0 = main_w.clone(), b0 = main_b.clone();
    main.set(c.w, main_w);
    main.set(c.b, main_b);
    auto y = fused_layer_norm(c.x, c.w, c.b, 1e-5, &main);
    EXPECT_TRUE(torch::equal(y, y_ref.detach())) << c10::toString(dtype);
    y.backward(c.gy);
    EXPECT_TRUE(torch::equal(c.x.grad(), ref.x.grad())) << c10::toString(dtype);
    EXPECT_TRUE(c.w.grad().defined() && c.b.grad().defined()) << "placeholders reach the accumulators (the hooks run)";
    EXPECT_TRUE(torch::equal(main_w, w0 + ref.w.grad().to(torch::kFloat))) << c10::toString(dtype);
    EXPECT_TRUE(torch::equal(main_b, b0 + ref.b.grad().to(torch::kFloat))) << c10::toString(dtype);
    EXPECT_TRUE(main.take_added(c.w));
    EXPECT_TRUE(main.take_added(c.b));
    EXPECT_FALSE(main.take_added(c.w));
    fused_layer_norm(c.x, c.w, c.b, 1e-5, &main).backward(c.gy);  // a second micro-batch adds again
    const auto gw = ref.w.grad().to(torch::kFloat), gb = ref.b.grad().to(torch::kFloat);
    EXPECT_TRUE(torch::equal(main_w, w0 + gw + gw));
    EXPECT_TRUE(torch::equal(main_b, b0 + gb + gb));
  }
}

TEST(FusedLayerNorm, WithoutBothTargetsOrGradModeIsAtLayerNorm) {
  Case c = make_case(torch::kBFloat16), ref = make_case(torch::kBFloat16);
  at::layer_norm(ref.x, {24}, ref.w, ref.b, 1e-5).backward(ref.gy);
  MainGrads main;
  auto main_w = torch::zeros({24});
  main.set(c.w, main_w);  // the gain alone: nothing is fused
  fused_layer_norm(c.x, c.w, c.b, 1e-5, &main).backward(c.gy);
  EXPECT_TRUE(torch::equal(c.w.grad(), ref.w.grad()));
  EXPECT_TRUE(torch::equal(c.b.grad(), ref.b.grad()));
  EXPECT_EQ(main_w.abs().sum().item<float>(), 0.0f);
  EXPECT_FALSE(main.take_added(c.w));
  auto main_b = torch::zeros({24});
  main.set(c.b, main_b);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(fused_layer_norm(c.x, c.w, c.b, 1e-5, &main), at::layer_norm(c.x, {24}, c.w, c.b, 1e-5)));
}

}  // namespace
}  // namespace zlm::trainer
