// The loss of trainer/model/tensor_parallel.h against LibTorch's cross_entropy: fp32 and
// 16-bit logits, one chunk and many (a chunk boundary inside the rows, one row
// per chunk). Tensor-parallel vocabularies are tested end to end (TP 2 and 4
// against one process, tests/e2e/parallel).
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
Result ours(const torch::Tensor& logits, const torch::Tensor& targets, int64_t chunk) {
  auto x = logits.detach().clone().requires_grad_(true);
  auto loss = vocab_parallel_cross_entropy(x, targets, TensorParallel{}, chunk);
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

INSTANTIATE_TEST_SUITE_P(Chunks, CrossEntropy, testing::Values(0, 1, 5, 37));

}  // namespace
}  // namespace zlm::trainer
