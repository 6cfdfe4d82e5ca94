// AdamW on the CPU in one pass over memory: what a ZeRO-Offload step runs for
// every parameter, so its speed is what users of offload see per iteration.
//
//   CpuAdamW::Settings s{.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .step = 7, .grad_scale = 0.5f};
//   cpu_adamw(s, n, param, exp_avg, exp_avg_sq, {grad, CpuAdamW::kF32}, {bf16_copy, CpuAdamW::kBF16});
//
// Per element: the gradient (fp32, bf16 or fp16) times grad_scale (the loss
// scale undone and the clipping factor, in fp32), torch.optim.AdamW's update of
// the fp32 parameter and moments (decoupled weight decay, bias corrections),
// and, when asked, the updated parameter into a copy: rounded to nearest even
// for a 16-bit one (the one copied up to the device), as is for an fp32 one
// (fp32 parameters kept apart from the master weights). One read of each input, one write of
// each output, vectorised with Highway (the widest instructions this CPU has,
// chosen at run time). Torch-free; callers split large ranges over threads at
// multiples of kAlign elements, so that every element sees the same arithmetic
// whatever the split (a remainder runs through the same vector code).
// cpu_adamw_reference is the obvious scalar loop, for tests.
#pragma once

#include <cstdint>

namespace zlm::trainer {

struct CpuAdamW {
  enum Type { kNone, kF32, kBF16, kF16 };
  struct Settings {
    double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
    int64_t step = 1;        // 1 for the first update (the bias corrections')
    float grad_scale = 1.0f;  // the gradient is multiplied by it first
  };
  struct Buffer {
    void* data = nullptr;
    Type type = kNone;
  };
  static constexpr int64_t kAlign = 64;  // split points are multiples of this
};

// `grad` is read (kF32, kBF16 or kF16); `copy16` (kF32, kBF16 or kF16, or kNone) is written.
void cpu_adamw(const CpuAdamW::Settings& s, int64_t n, float* param, float* exp_avg, float* exp_avg_sq, CpuAdamW::Buffer grad,
               CpuAdamW::Buffer copy16);
void cpu_adamw_reference(const CpuAdamW::Settings& s, int64_t n, float* param, float* exp_avg, float* exp_avg_sq, CpuAdamW::Buffer grad,
                         CpuAdamW::Buffer copy16);

// The name of the instruction set cpu_adamw runs with here ("AVX3", "AVX2", ...).
const char* cpu_adamw_target();
// False in a build without Highway (libhwy-dev), where cpu_adamw is the scalar
// loop: callers then use ATen's fused AdamW.
bool cpu_adamw_vectorized();

namespace detail {
// The update's constants, as torch.optim.AdamW computes them (in double), in fp32.
struct AdamWConsts {
  float scale, decay, one_minus_b1, b2, one_minus_b2, step_size, inv_bc2_sqrt, eps;
};
AdamWConsts adamw_consts(const CpuAdamW::Settings& s);
}  // namespace detail

}  // namespace zlm::trainer
