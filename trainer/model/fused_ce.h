// The fused cross-entropy's CUDA kernels (fused_ce.cu, built for sm_90 when
// CMake finds nvcc); torch-free so that nvcc compiles no LibTorch header.
// Callers are in tensor_parallel.cpp (FusedVocabParallelCE), which passes the
// current CUDA stream and device pointers of contiguous-row tensors.
//
// The arithmetic, per row of logits x (one thread block per row):
//   stats: one read of the row gives m = max x, s = sum exp(x - m) (each thread
//          keeps a running (m, s) over its columns, rescaling s when m grows;
//          the block then combines the pairs) and, where the target column is
//          in this rank's range, x[target];
//   grad:  one read and one write give (exp(x - lse) - [j == target]) * dloss,
//          rounded to the logits' dtype; `grad` may be `logits` (in place).
// The ATen twin in tensor_parallel.cpp runs the same arithmetic over column
// chunks on any device and is what the CPU tests prove.
#pragma once

#include <cstdint>

namespace zlm::trainer::cuda {

enum class CeDtype { F32, BF16, F16 };

// logits: rows x cols, row stride `ld` elements. target: this rank's column of
// each row's target (read only where in_range). Outputs: fp32 arrays of `rows`.
// Returns nullptr, or the CUDA error's text.
const char* ce_row_stats(const void* logits, CeDtype dtype, int64_t rows, int64_t cols, int64_t ld, const int64_t* target,
                         const bool* in_range, float* max, float* sum, float* target_logit, void* stream);

// grad (row stride ld_grad) = (exp(logits - lse) - one-hot(target)) * dloss per row.
const char* ce_grad(const void* logits, void* grad, CeDtype dtype, int64_t rows, int64_t cols, int64_t ld, int64_t ld_grad,
                    const int64_t* target, const bool* in_range, const float* lse, const float* dloss, void* stream);

}  // namespace zlm::trainer::cuda
