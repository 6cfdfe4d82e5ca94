// The layer norm's parameter gradients on CUDA (ln_grad.cu, built where CMake
// finds nvcc), added straight into fp32 buffers; torch-free so that nvcc
// compiles no LibTorch header. The caller is fused_layer_norm.cpp, which passes
// the current CUDA stream and device pointers of contiguous tensors.
//
// For rows x cols inputs x and output gradients dy, with the forward's
// per-row mean and 1 / std (fp32):
//   gamma[j] += sum_i dy[i][j] * (x[i][j] - mean[i]) * rstd[i]
//   beta[j]  += sum_i dy[i][j]
// in fp32 throughout. Two kernels: blocks of 128 columns and 128 rows write
// their partial sums to `workspace` (each thread four adjacent columns, eight
// threads per column summed in shared memory); one warp per column then sums
// that column's partials and adds them. The order of every sum is fixed by the
// shape alone, so the result is the same on every run.
#pragma once

#include <cstdint>

namespace zlm::trainer::cuda {

enum class LnDtype { BF16, F16 };

// Whether the kernels take these inputs: cols a multiple of 4 and both inputs
// 8-byte aligned (vector loads of four 16-bit values).
bool ln_param_grad_supported(const void* dy, const void* x, int64_t cols);

// fp32 elements the workspace needs.
int64_t ln_param_grad_workspace(int64_t rows, int64_t cols);

// Returns nullptr, or the CUDA error's text.
const char* ln_param_grad_add(const void* dy, const void* x, LnDtype dtype, int64_t rows, int64_t cols, const float* mean, const float* rstd,
                              float* gamma, float* beta, float* workspace, void* stream);

}  // namespace zlm::trainer::cuda
