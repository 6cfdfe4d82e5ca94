// Whether this build has the trainer's own CUDA kernels (the fused loss,
// fused_ce.cu, and the layer norm's gradient sums, ln_grad.cu): CMake builds
// them where it finds nvcc at configure time. Without them the callers take
// ATen's paths, on the GPU too.
#pragma once

namespace zlm::trainer {

bool cuda_kernels_built();

}  // namespace zlm::trainer
