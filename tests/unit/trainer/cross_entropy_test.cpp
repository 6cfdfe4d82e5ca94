// The loss of trainer/model/tensor_parallel.h against LibTorch's cross_entropy: fp32 and
// 16-bit logits, one chunk and many (a chunk boundary inside the rows, one row
// per chunk), and the fused loss's ATen twin against the chunked path (within
// 1e-6 in fp32; its in-place gradient equal to the out-of-place one).
// Tensor-parallel vocabularies: the twin against the chunked path on 2 ranks
// (zero_engine_test.cpp), and end to end (TP 2 and 4 against one process,
// tests/e2e/parallel).
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "trainer/model/tensor_parallel.h"

namespace zlm::trainer {
namespace {

namespace F = torch::nn::functional;

struct Result {
  torch::Tensor loss, grad;
};

// Per-row losses and the gradient of their mean with respect to the logits.
Result ours(const torch::Tensor& logits, const torch::Tensor& targets, int64_t chunk, CeImpl impl = CeImpl::Chunked, int64_t cols = 0,
            bool in_place = false) {
  auto x = logits.detach().clone().requires_grad_(true);
  CeOptions o;
  o.chunk_rows = chunk;
  o.chunk_cols = cols;
  o.impl = impl;
  o.logits_dead = in_place;
  auto loss = vocab_parallel_cross_entropy(x * 1, targets, TensorParallel{}, o);  // x * 1: logits made by the graph, as the model's
  loss.mean().backward();
  return {loss.detach(), x.grad()};
}

Result reference(const torch::Tensor& logits, const torch::Tensor& targets) {
  auto x = logits.detach().to(torch::kFloat).requires_grad_(true);
  auto loss = F::cross_entropy(x, targets, F::CrossEntropyFuncOptions().reduction(torch::kNone));
  loss.mean().backward();
  return {loss.detach(), x.grad()};
}

class CrossEntropy : public testing::TestWithParam<int64_t> {};

TEST_P(CrossEntropy, Fp32LogitsEqualTorch) {
  torch::manual_seed(3);
  const auto logits = torch::randn({37, 50}) * 4;
  const auto targets = torch::randint(50, {37}, torch::kLong);
  const Result a = ours(logits, targets, GetParam()), b = reference(logits, targets);
  EXPECT_EQ(a.loss.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(a.loss, b.loss, 1e-6, 1e-6)) << (a.loss - b.loss).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(a.grad, b.grad, 1e-6, 1e-8)) << (a.grad - b.grad).abs().max().item<double>();
}

// 16-bit logits: the arithmetic is fp32 (the loss is that of the upcast
// logits), the gradient is the fp32 one rounded to the logits' dtype.
TEST_P(CrossEntropy, HalfLogitsComputeInFp32) {
  torch::manual_seed(4);
  for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
    const auto logits = (torch::randn({37, 50}) * 4).to(dtype);
    const auto targets = torch::randint(50, {37}, torch::kLong);
    const Result a = ours(logits, targets, GetParam()), b = reference(logits, targets);
    EXPECT_EQ(a.loss.scalar_type(), torch::kFloat);
    EXPECT_EQ(a.grad.scalar_type(), dtype);
    EXPECT_TRUE(torch::allclose(a.loss, b.loss, 1e-6, 1e-6)) << c10::toString(dtype) << " " << (a.loss - b.loss).abs().max().item<double>();
    EXPECT_TRUE(torch::equal(a.grad, b.grad.to(dtype)) || torch::allclose(a.grad.to(torch::kFloat), b.grad, dtype == torch::kHalf ? 1e-3 : 8e-3, 1e-7))
        << c10::toString(dtype) << " " << (a.grad.to(torch::kFloat) - b.grad).abs().max().item<double>();
  }
}

// The fused loss's twin: column chunks of 1 (every element rescales the
// running sum), 7 (a remainder), the whole row and more; fp32 within 1e-6 of
// the chunked path, 16-bit gradients equal to its rounding or one step of the
// dtype apart; writing over the logits gives the same gradient.
TEST_P(CrossEntropy, FusedTwinEqualsChunked) {
  torch::manual_seed(5);
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    const auto logits = (torch::randn({37, 50}) * 4).to(dtype);
    const auto targets = torch::randint(50, {37}, torch::kLong);
    const Result want = ours(logits, targets, GetParam());
    for (int64_t cols : {1, 7, 50, 4096}) {
      const Result got = ours(logits, targets, GetParam(), CeImpl::Fused, cols);
      const std::string what = std::string(c10::toString(dtype)) + " cols " + std::to_string(cols);
      EXPECT_TRUE(torch::allclose(got.loss, want.loss, 1e-6, 1e-6)) << what << " " << (got.loss - want.loss).abs().max().item<double>();
      const double step = dtype == torch::kFloat ? 1e-6 : dtype == torch::kHalf ? 1e-3 : 8e-3;
      EXPECT_TRUE(torch::allclose(got.grad.to(torch::kFloat), want.grad.to(torch::kFloat), step, 1e-8))
          << what << " " << (got.grad.to(torch::kFloat) - want.grad.to(torch::kFloat)).abs().max().item<double>();
      const Result over = ours(logits, targets, GetParam(), CeImpl::Fused, cols, /*in_place=*/true);
      EXPECT_TRUE(torch::equal(over.grad, got.grad)) << what << " in place";
      EXPECT_TRUE(torch::equal(over.loss, got.loss)) << what << " in place";
    }
  }
}

// A leaf the caller owns is never written over, whatever logits_dead says.
TEST(CrossEntropyFused, NeverWritesOverALeaf) {
  torch::manual_seed(6);
  auto x = (torch::randn({5, 11}) * 3).requires_grad_(true);
  const auto before = x.detach().clone();
  CeOptions o;
  o.impl = CeImpl::Fused;
  o.logits_dead = true;
  vocab_parallel_cross_entropy(x, torch::randint(11, {5}, torch::kLong), TensorParallel{}, o).sum().backward();
  EXPECT_TRUE(torch::equal(x.detach(), before));
  EXPECT_FALSE(torch::equal(x.grad(), before));
}

// Auto picks the chunked path on the CPU (the fused one on a CUDA device where
// the kernel is built; tests/gpu/fused_ce_gpu_test.cpp, label gpu).
TEST(CrossEntropyFused, AutoIsChunkedOnTheCpu) {
  torch::manual_seed(7);
  const auto logits = torch::randn({9, 13}) * 4;
  const auto targets = torch::randint(13, {9}, torch::kLong);
  const Result a = ours(logits, targets, 0, CeImpl::Auto), b = ours(logits, targets, 0, CeImpl::Chunked);
  EXPECT_TRUE(torch::equal(a.loss, b.loss));
  EXPECT_TRUE(torch::equal(a.grad, b.grad));
}

INSTANTIATE_TEST_SUITE_P(Chunks, CrossEntropy, testing::Values(0, 1, 5, 37));

}  // namespace
}  // namespace zlm::trainer
