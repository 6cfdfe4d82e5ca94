// The fused loss's CUDA kernels (trainer/model/fused_ce.cu) against the chunked
// ATen path on the same device (label gpu: needs a CUDA device, and fails
// without one; `ctest -LE gpu` leaves it out). Shapes: GPT-2's padded
// vocabulary (16-byte rows: the vector loads), an odd width (the scalar loop),
// one of a tensor-parallel rank's split, and rows of -inf-free extremes; fp32
// within 1e-6 (gradients: 4e-6 of the row's scale), 16-bit gradients equal to the reference's rounding or one step
// of the dtype apart, in place equal to out of place.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "trainer/model/cuda_kernels.h"
#include "trainer/model/tensor_parallel.h"

namespace zlm::trainer {
namespace {

struct Result {
  torch::Tensor loss, grad;
};

Result run(const torch::Tensor& logits, const torch::Tensor& targets, CeImpl impl, bool in_place) {
  auto x = logits.detach().clone().requires_grad_(true);
  CeOptions o;
  o.impl = impl;
  o.logits_dead = in_place;
  auto loss = vocab_parallel_cross_entropy(x * 1, targets, TensorParallel{}, o);
  loss.mean().backward();
  return {loss.detach(), x.grad()};
}

TEST(FusedCeGpu, KernelEqualsChunkedOnTheDevice) {
  ASSERT_TRUE(torch::cuda::is_available()) << "needs a CUDA device (this test is labelled gpu)";
  ASSERT_TRUE(cuda_kernels_built()) << "this build has no fused-loss kernel (no nvcc at configure time)";
  const torch::Device dev(torch::kCUDA, 0);
  torch::manual_seed(21);
  struct Shape {
    int64_t rows, cols;
  };
  for (Shape s : {Shape{64, 50304}, Shape{33, 50257}, Shape{128, 25152}, Shape{7, 9}})
    for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
      const auto logits = (torch::randn({s.rows, s.cols}, dev) * 6).to(dtype);
      auto targets = torch::randint(s.cols, {s.rows}, torch::TensorOptions().dtype(torch::kLong).device(dev));
      // Every fifth row's target outside this rank's vocabulary range (as another
      // tensor-parallel rank's target is): the kernel's out-of-range branches.
      targets.slice(0, 0, s.rows, 5).fill_(s.cols + 3);
      if (s.rows > 3) targets.slice(0, 3, 4).fill_(-1);
      const Result want = run(logits, targets, CeImpl::Chunked, false);
      const Result got = run(logits, targets, CeImpl::Auto, false);
      const Result over = run(logits, targets, CeImpl::Auto, true);
      const std::string what = std::to_string(s.rows) + "x" + std::to_string(s.cols) + " " + c10::toString(dtype);
      EXPECT_TRUE(torch::allclose(got.loss, want.loss, 1e-6, 1e-5)) << what << " " << (got.loss - want.loss).abs().max().item<double>();
      // fp32: the gradient is (softmax - onehot) / rows, and the two paths' log-sum-exp (of logits
      // near 30 here) agree to a few ulps of it (~2e-6), so an element may differ by that much
      // relative to the row's scale 1 / rows (seen on an H200: 1.1e-6 and 1.5e-6 of it).
      const double step = dtype == torch::kFloat ? 1e-6 : dtype == torch::kHalf ? 1e-3 : 8e-3;
      const double atol = dtype == torch::kFloat ? 4e-6 / static_cast<double>(s.rows) : 1e-9;
      EXPECT_TRUE(torch::allclose(got.grad.to(torch::kFloat), want.grad.to(torch::kFloat), step, atol))
          << what << " " << (got.grad.to(torch::kFloat) - want.grad.to(torch::kFloat)).abs().max().item<double>();
      EXPECT_TRUE(torch::equal(over.grad, got.grad)) << what << " in place";
    }
}

}  // namespace
}  // namespace zlm::trainer
