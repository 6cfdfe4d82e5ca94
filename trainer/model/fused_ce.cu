// The fused cross-entropy's kernels (see fused_ce.h): one block per row, 16-byte
// loads where rows are aligned, fp32 arithmetic, one pass over the logits for
// the statistics and one read plus one write for the gradient.
#include "trainer/model/fused_ce.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

namespace zlm::trainer::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// Elements of T in one 16-byte load.
template <typename T>
struct Pack {
  static constexpr int n = 16 / sizeof(T);
  union {
    uint4 raw;
    T v[n];
  };
};

// A running maximum and the sum of exp(x - max) over the values seen.
struct MaxSum {
  float m = -INFINITY, s = 0.f;
  __device__ __forceinline__ void add(float x) {
    if (x == -INFINITY) return;
    if (x > m) {
      s = s * expf(m - x) + 1.f;
      m = x;
    } else {
      s += expf(x - m);
    }
  }
  __device__ __forceinline__ void merge(float om, float os) {
    const float mm = fmaxf(m, om);
    if (mm == -INFINITY) return;
    s = s * expf(m - mm) + os * expf(om - mm);
    m = mm;
  }
};

__device__ __forceinline__ bool aligned16(const void* p, int64_t ld, int elem) {
  return (reinterpret_cast<uintptr_t>(p) % 16 == 0) && ((ld * elem) % 16 == 0);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) row_stats_kernel(const T* logits, int64_t cols, int64_t ld, const int64_t* target,
                                                             const bool* in_range, float* max_out, float* sum_out, float* target_out) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * ld;
  MaxSum acc;
  int64_t tail = 0;
  if (aligned16(logits, ld, sizeof(T))) {
    const int64_t packs = cols / Pack<T>::n;
    const uint4* px = reinterpret_cast<const uint4*>(x);
    for (int64_t k = threadIdx.x; k < packs; k += kThreads) {
      Pack<T> p;
      p.raw = px[k];
#pragma unroll
      for (int i = 0; i < Pack<T>::n; ++i) acc.add(to_float(p.v[i]));
    }
    tail = packs * Pack<T>::n;
  }
  for (int64_t j = tail + threadIdx.x; j < cols; j += kThreads) acc.add(to_float(x[j]));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, acc.m, off), os = __shfl_xor_sync(0xffffffffu, acc.s, off);
    acc.merge(om, os);
  }
  __shared__ float wm[kWarps], ws[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    wm[warp] = acc.m;
    ws[warp] = acc.s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum total;
    for (int w = 0; w < kWarps; ++w) total.merge(wm[w], ws[w]);
    max_out[row] = total.m;
    sum_out[row] = total.s;
    target_out[row] = in_range[row] ? to_float(x[target[row]]) : 0.f;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) grad_kernel(const T* logits, T* grad, int64_t cols, int64_t ld, int64_t ld_grad,
                                                        const int64_t* target, const bool* in_range, const float* lse, const float* dloss) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * ld;
  T* g = grad + row * ld_grad;
  const float l = lse[row], d = dloss[row];
  const int64_t t = in_range[row] ? target[row] : -1;
  auto value = [&](float v, int64_t j) {
    float p = expf(v - l);
    if (j == t) p -= 1.f;
    return from_float<T>(p * d);
  };
  int64_t tail = 0;
  if (aligned16(logits, ld, sizeof(T)) && aligned16(grad, ld_grad, sizeof(T))) {
    const int64_t packs = cols / Pack<T>::n;
    const uint4* px = reinterpret_cast<const uint4*>(x);
    uint4* pg = reinterpret_cast<uint4*>(g);
    for (int64_t k = threadIdx.x; k < packs; k += kThreads) {
      Pack<T> in, out;
      in.raw = px[k];
#pragma unroll
      for (int i = 0; i < Pack<T>::n; ++i) out.v[i] = value(to_float(in.v[i]), k * Pack<T>::n + i);
      pg[k] = out.raw;
    }
    tail = packs * Pack<T>::n;
  }
  for (int64_t j = tail + threadIdx.x; j < cols; j += kThreads) g[j] = value(to_float(x[j]), j);
}

const char* status() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

template <typename Fn>
const char* by_dtype(CeDtype dtype, Fn&& fn) {
  switch (dtype) {
    case CeDtype::F32: fn(float{}); break;
    case CeDtype::BF16: fn(__nv_bfloat16{}); break;
    case CeDtype::F16: fn(__half{}); break;
  }
  return status();
}

}  // namespace

const char* ce_row_stats(const void* logits, CeDtype dtype, int64_t rows, int64_t cols, int64_t ld, const int64_t* target,
                         const bool* in_range, float* max, float* sum, float* target_logit, void* stream) {
  if (rows == 0) return nullptr;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    row_stats_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(logits), cols, ld, target, in_range, max, sum, target_logit);
  });
}

const char* ce_grad(const void* logits, void* grad, CeDtype dtype, int64_t rows, int64_t cols, int64_t ld, int64_t ld_grad,
                    const int64_t* target, const bool* in_range, const float* lse, const float* dloss, void* stream) {
  if (rows == 0) return nullptr;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    grad_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(logits), static_cast<T*>(grad), cols, ld, ld_grad, target, in_range, lse, dloss);
  });
}

}  // namespace zlm::trainer::cuda
