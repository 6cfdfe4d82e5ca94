// The GPU tests' measure of a result against an exact (fp64) one: the largest
// absolute difference over the largest entry of the exact result.
#pragma once

#include <torch/torch.h>

namespace zlm::trainer {

inline double relative_to_largest(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
}

}  // namespace zlm::trainer
