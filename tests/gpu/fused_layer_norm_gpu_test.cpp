// The layer norm's parameter gradients summed by our CUDA kernel into fp32
// buffers (label gpu; trainer/model/ln_grad.h). Against the exact sums (fp64
// over the same 16-bit inputs and gradients, with the statistics recomputed in
// fp64): within 1e-4 of the largest entry and at least 10 times closer than
// autograd's 16-bit gradients; the same bits on a second run (a fixed order of
// sums); the input's gradient and the output equal at::layer_norm's bit for
// bit. Shapes: a GPT-2 124M micro-batch's (16 x 1024 tokens, 768), an odd one
// (1000 x 72), and one the kernel does not take (a width of 50, not a multiple
// of 4: autograd's gradients added, as on the CPU).
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "trainer/model/cuda_kernels.h"
#include "trainer/model/fused_layer_norm.h"
#include "tests/gpu/relative_error.h"

namespace zlm::trainer {
namespace {

TEST(FusedLayerNormGpu, KernelSumsTheParameterGradientsInFp32) {
  ASSERT_TRUE(torch::cuda::is_available()) << "needs a CUDA device (this test is labelled gpu)";
  ASSERT_TRUE(cuda_kernels_built()) << "built without nvcc: no kernel to test";
  const torch::Device dev(torch::kCUDA, 0);
  struct Shape {
    int64_t rows, cols;
  };
  for (Shape s : {Shape{16 * 1024, 768}, Shape{1000, 72}, Shape{37, 50}})
    for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
      torch::manual_seed(11);
      auto opt = torch::TensorOptions().dtype(dtype).device(dev);
      auto x = (torch::randn({s.rows, s.cols}, opt) * 3 + 1).requires_grad_(true);
      auto w = (1 + torch::randn({s.cols}, opt) * 0.1).detach().requires_grad_(true);
      auto b = (torch::randn({s.cols}, opt) * 0.1).detach().requires_grad_(true);
      auto gy = torch::randn({s.rows, s.cols}, opt) * 1e-2;
      const auto xd = x.detach().to(torch::kDouble), gd = gy.to(torch::kDouble);
      const auto mean = xd.mean(-1, true), rstd = (xd.var(-1, false, true) + 1e-5).rsqrt();
      const auto exact_w = (gd * (xd - mean) * rstd).sum(0), exact_b = gd.sum(0);

      auto xr = x.detach().clone().requires_grad_(true), wr = w.detach().clone().requires_grad_(true),
           br = b.detach().clone().requires_grad_(true);
      auto y_ref = at::layer_norm(xr, {s.cols}, wr, br, 1e-5);
      y_ref.backward(gy);

      MainGrads main;
      auto f32 = opt.dtype(torch::kFloat);
      auto main_w = torch::zeros({s.cols}, f32), main_b = torch::zeros({s.cols}, f32);
      main.set(w, main_w);
      main.set(b, main_b);
      auto y = fused_layer_norm(x, w, b, 1e-5, &main);
      EXPECT_TRUE(torch::equal(y, y_ref.detach())) << "the output";
      y.backward(gy);
      EXPECT_TRUE(main.take_added(w) && main.take_added(b));
      EXPECT_TRUE(torch::equal(x.grad(), xr.grad())) << "the input's gradient";
      const double fw = relative_to_largest(main_w, exact_w), fb = relative_to_largest(main_b, exact_b);
      const double hw = relative_to_largest(wr.grad(), exact_w), hb = relative_to_largest(br.grad(), exact_b);
      std::printf("%ld x %ld %s: gain %.3g (16-bit gradient %.3g), bias %.3g (16-bit %.3g) of the largest entry\n", (long)s.rows,
                  (long)s.cols, c10::toString(dtype), fw, hw, fb, hb);
      if (s.cols % 4 != 0) {  // not the kernel's: autograd's 16-bit gradients, added
        EXPECT_TRUE(torch::equal(main_w, wr.grad().to(torch::kFloat)));
        EXPECT_TRUE(torch::equal(main_b, br.grad().to(torch::kFloat)));
        continue;
      }
      EXPECT_LT(fw, 1e-4);
      EXPECT_LT(fb, 1e-4);
      EXPECT_LT(fw * 10, hw) << "not closer than a 16-bit gradient: not the kernel's fp32 sums";
      EXPECT_LT(fb * 10, hb);
      auto again_w = torch::zeros({s.cols}, f32), again_b = torch::zeros({s.cols}, f32);
      MainGrads again;
      x.mutable_grad().reset();
      again.set(w, again_w);
      again.set(b, again_b);
      fused_layer_norm(x, w, b, 1e-5, &again).backward(gy);
      EXPECT_TRUE(torch::equal(again_w, main_w) && torch::equal(again_b, main_b)) << "a second run differs";
    }
}

}  // namespace
}  // namespace zlm::trainer
