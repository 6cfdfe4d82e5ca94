// The scalar AdamW loop of cpu_adamw.h (the tests' reference), the constants
// both use, and cpu_adamw itself in a build without Highway.
#include <cmath>
#include <cstring>

#include "trainer/zero/cpu_adamw.h"

namespace zlm::trainer {

namespace detail {

AdamWConsts adamw_consts(const CpuAdamW::Settings& s) {
  const double bc1 = 1.0 - std::pow(s.beta1, static_cast<double>(s.step));
  const double bc2 = 1.0 - std::pow(s.beta2, static_cast<double>(s.step));
  return AdamWConsts{.scale = s.grad_scale, .decay = static_cast<float>(1.0 - s.lr * s.weight_decay),
                     .one_minus_b1 = static_cast<float>(1.0 - s.beta1), .b2 = static_cast<float>(s.beta2),
                     .one_minus_b2 = static_cast<float>(1.0 - s.beta2), .step_size = static_cast<float>(s.lr / bc1),
                     .inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bc2)), .eps = static_cast<float>(s.eps)};
}

}  // namespace detail

namespace {

float to_float(const void* data, CpuAdamW::Type type, int64_t i) {
  if (type == CpuAdamW::kF32) return static_cast<const float*>(data)[i];
  const uint16_t h = static_cast<const uint16_t*>(data)[i];
  if (type == CpuAdamW::kBF16) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  _Float16 f;  // the compiler's IEEE half (GCC 12+, x86-64)
  std::memcpy(&f, &h, 2);
  return static_cast<float>(f);
}

void store16(float p, CpuAdamW::Buffer out, int64_t i) {
  if (out.type == CpuAdamW::kF32) {
    static_cast<float*>(out.data)[i] = p;
    return;
  }
  uint16_t bits = 0;
  if (out.type == CpuAdamW::kBF16) {
    uint32_t u;
    std::memcpy(&u, &p, 4);
    bits = std::isnan(p) ? uint16_t{0x7FC0} : static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);  // nearest even
  } else {
    const _Float16 h = static_cast<_Float16>(p);  // nearest even
    std::memcpy(&bits, &h, 2);
  }
  static_cast<uint16_t*>(out.data)[i] = bits;
}

}  // namespace

void cpu_adamw_reference(const CpuAdamW::Settings& s, int64_t n, float* param, float* exp_avg, float* exp_avg_sq, CpuAdamW::Buffer grad,
                         CpuAdamW::Buffer copy16) {
  const detail::AdamWConsts c = detail::adamw_consts(s);
  for (int64_t i = 0; i < n; ++i) {
    const float g = to_float(grad.data, grad.type, i) * c.scale;
    float& p = param[i];
    float& m = exp_avg[i];
    float& v = exp_avg_sq[i];
    p *= c.decay;
    m = std::fma(g - m, c.one_minus_b1, m);
    v = std::fma(g * g, c.one_minus_b2, v * c.b2);
    p = std::fma(-c.step_size, m / (std::sqrt(v) * c.inv_bc2_sqrt + c.eps), p);
    if (copy16.type != CpuAdamW::kNone) store16(p, copy16, i);
  }
}

#ifndef ZLM_HAVE_HWY
void cpu_adamw(const CpuAdamW::Settings& s, int64_t n, float* param, float* exp_avg, float* exp_avg_sq, CpuAdamW::Buffer grad,
               CpuAdamW::Buffer copy16) {
  cpu_adamw_reference(s, n, param, exp_avg, exp_avg_sq, grad, copy16);
}
const char* cpu_adamw_target() { return "scalar (built without Highway)"; }
bool cpu_adamw_vectorized() { return false; }
#endif

}  // namespace zlm::trainer
