// The layer norm's parameter gradients into fp32 buffers (see ln_grad.h).
#include "trainer/model/ln_grad.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace zlm::trainer::cuda {
namespace {

constexpr int kVec = 4;                      // adjacent columns per thread (one 8-byte load)
constexpr int kColThreads = 32;              // a warp across the columns
constexpr int kRowThreads = 8;               // threads down the rows of a block
constexpr int kBlockCols = kColThreads * kVec;  // 128
constexpr int64_t kMinBlockRows = 128;
constexpr int64_t kMaxRowBlocks = 65535;     // gridDim.y's limit

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
struct Vec4 {
  union {
    uint2 raw;
    T v[kVec];
  };
};

int64_t block_rows(int64_t rows) {
  const int64_t need = (rows + kMaxRowBlocks - 1) / kMaxRowBlocks;  // rows per block so that the grid fits
  return need <= kMinBlockRows ? kMinBlockRows : (need + kMinBlockRows - 1) / kMinBlockRows * kMinBlockRows;
}

int64_t row_blocks(int64_t rows) {
  const int64_t br = block_rows(rows);
  return (rows + br - 1) / br;
}

// Partial sums of one block's rows for its 128 columns, stored column-major
// (part[col * row_blocks + block]) so that the second kernel reads each
// column's partials contiguously.
template <typename T>
__global__ void __launch_bounds__(kColThreads* kRowThreads)
    layer_norm_partial_kernel(const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
                              const float* __restrict__ rstd, int64_t rows, int64_t cols, int64_t rows_per_block,
                              float* __restrict__ part_gamma, float* __restrict__ part_beta) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kBlockCols + tx * kVec;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
  const int64_t r1 = min(rows, r0 + rows_per_block);
  float g[kVec] = {0.f, 0.f, 0.f, 0.f}, b[kVec] = {0.f, 0.f, 0.f, 0.f};
  if (col < cols) {
#pragma unroll 4
    for (int64_t r = r0 + ty; r < r1; r += kRowThreads) {
      Vec4<T> d, v;
      d.raw = *reinterpret_cast<const uint2*>(dy + r * cols + col);
      v.raw = *reinterpret_cast<const uint2*>(x + r * cols + col);
      const float m = mean[r], s = rstd[r];
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float dv = to_float(d.v[k]);
        g[k] += dv * ((to_float(v.v[k]) - m) * s);
        b[k] += dv;
      }
    }
  }
  __shared__ float sg[kRowThreads][kBlockCols], sb[kRowThreads][kBlockCols];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    sg[ty][tx * kVec + k] = g[k];
    sb[ty][tx * kVec + k] = b[k];
  }
  __syncthreads();
  if (ty != 0 || col >= cols) return;
  const int64_t nblocks = gridDim.y;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    float tg = 0.f, tb = 0.f;
#pragma unroll
    for (int y = 0; y < kRowThreads; ++y) {
      tg += sg[y][tx * kVec + k];
      tb += sb[y][tx * kVec + k];
    }
    part_gamma[(col + k) * nblocks + blockIdx.y] = tg;
    part_beta[(col + k) * nblocks + blockIdx.y] = tb;
  }
}

// One warp per column: its partials summed (lanes stride them, then a fixed
// shuffle tree) and added to the fp32 buffers.
__global__ void layer_norm_finish_kernel(const float* __restrict__ part_gamma, const float* __restrict__ part_beta, int64_t cols,
                                         int64_t nblocks, float* __restrict__ gamma, float* __restrict__ beta) {
  const int lane = threadIdx.x % 32;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (col >= cols) return;  // the whole warp
  float tg = 0.f, tb = 0.f;
  for (int64_t i = lane; i < nblocks; i += 32) {
    tg += part_gamma[col * nblocks + i];
    tb += part_beta[col * nblocks + i];
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    tg += __shfl_down_sync(0xffffffffu, tg, off);
    tb += __shfl_down_sync(0xffffffffu, tb, off);
  }
  if (lane == 0) {
    gamma[col] += tg;
    beta[col] += tb;
  }
}

template <typename T>
const char* launch(const void* dy, const void* x, int64_t rows, int64_t cols, const float* mean, const float* rstd, float* gamma,
                   float* beta, float* workspace, cudaStream_t s) {
  const int64_t nblocks = row_blocks(rows);
  float* part_gamma = workspace;
  float* part_beta = workspace + cols * nblocks;
  const dim3 grid(static_cast<unsigned>((cols + kBlockCols - 1) / kBlockCols), static_cast<unsigned>(nblocks));
  layer_norm_partial_kernel<T><<<grid, dim3(kColThreads, kRowThreads), 0, s>>>(
      static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd, rows, cols, block_rows(rows), part_gamma, part_beta);
  constexpr int kFinishThreads = 256;
  const int64_t per_block = kFinishThreads / 32;
  const auto finish_blocks = static_cast<unsigned>((cols + per_block - 1) / per_block);
  layer_norm_finish_kernel<<<finish_blocks, kFinishThreads, 0, s>>>(part_gamma, part_beta, cols, nblocks, gamma, beta);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace

bool ln_param_grad_supported(const void* dy, const void* x, int64_t cols) {
  return cols > 0 && cols % kVec == 0 && reinterpret_cast<uintptr_t>(dy) % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 8 == 0;
}

int64_t ln_param_grad_workspace(int64_t rows, int64_t cols) { return 2 * cols * row_blocks(rows); }

const char* ln_param_grad_add(const void* dy, const void* x, LnDtype dtype, int64_t rows, int64_t cols, const float* mean, const float* rstd,
                              float* gamma, float* beta, float* workspace, void* stream) {
  if (rows <= 0) return nullptr;
  auto s = static_cast<cudaStream_t>(stream);
  return dtype == LnDtype::BF16 ? launch<__nv_bfloat16>(dy, x, rows, cols, mean, rstd, gamma, beta, workspace, s)
                                : launch<__half>(dy, x, rows, cols, mean, rstd, gamma, beta, workspace, s);
}

}  // namespace zlm::trainer::cuda
