// The gradient-accumulation fusion (fused_linear.h) for the layer norms: when
// the ZeRO engine has registered fp32 buffers for a layer norm's gain and bias,
// the backward adds their gradients straight into those buffers. On CUDA, with
// bf16 or fp16 inputs, ATen computes only the input's gradient and our kernel
// (ln_grad.h) sums the parameters' gradients in fp32 into the buffers: one read
// of the inputs and their gradients, no 16-bit gradient written, no separate
// add per micro-batch. Elsewhere the backward computes exactly what autograd's
// layer-norm backward computes, in the parameters' dtype, and adds it, so CPU
// runs are bit for bit those without the fusion.
#pragma once

#include <torch/torch.h>

#include "trainer/model/fused_linear.h"

namespace zlm::trainer {

// at::layer_norm(x, {x.size(-1)}, w, b, eps), whose backward adds w's and b's
// gradients into their MainGrads targets when `main` holds both (and grad mode
// is on); plain at::layer_norm otherwise.
torch::Tensor fused_layer_norm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, double eps, const MainGrads* main);

}  // namespace zlm::trainer
