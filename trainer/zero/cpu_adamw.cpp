// cpu_adamw with Highway (built when libhwy-dev is there; cpu_adamw_reference.cpp
// has the scalar loop and the build without it). Compiled once per instruction
// set Highway targets (foreach_target.h includes this file again for each);
// common/core/runnable_targets-inl.h picks the best one once per process (not
// HWY_DYNAMIC_DISPATCH, whose libhwy.so costs every process ~6 ms to load).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "trainer/zero/cpu_adamw.cpp"
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_AVX3_DL)  // not picked by runnable_targets-inl.h
#endif
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <cstring>

#include "common/core/simd_support.h"
#include "trainer/zero/cpu_adamw.h"

HWY_BEFORE_NAMESPACE();
namespace zlm::trainer {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using Consts = detail::AdamWConsts;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

template <CpuAdamW::Type G>
HWY_INLINE VF load_grad(DF d, const void* g, size_t i) {
  if constexpr (G == CpuAdamW::kF32) {
    return hn::LoadU(d, static_cast<const float*>(g) + i);
  } else if constexpr (G == CpuAdamW::kBF16) {
    const hn::Rebind<hwy::bfloat16_t, DF> dbf;
    return hn::PromoteTo(d, hn::LoadU(dbf, static_cast<const hwy::bfloat16_t*>(g) + i));
  } else {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, static_cast<const hwy::float16_t*>(g) + i));
  }
}

// bf16 rounded to nearest even, NaN kept a (quiet) NaN: what torch's float -> bfloat16 does
// (Highway's own DemoteTo truncates).
HWY_INLINE void store_bf16(DF d, VF v, void* out, size_t i) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> du16;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  auto r = hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7FFFu), lsb)));
  r = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Set(du, 0x7FC0u), r);
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, r)), du16, static_cast<uint16_t*>(out) + i);
}

template <CpuAdamW::Type O>
HWY_INLINE void store_copy(DF d, VF p, void* out, size_t i) {
  if constexpr (O == CpuAdamW::kF32) {
    hn::StoreU(p, d, static_cast<float*>(out) + i);
  } else if constexpr (O == CpuAdamW::kBF16) {
    store_bf16(d, p, out, i);
  } else if constexpr (O == CpuAdamW::kF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    hn::StoreU(hn::DemoteTo(dh, p), dh, static_cast<hwy::float16_t*>(out) + i);
  }
}

// Lanes [i, i + Lanes) of every array.
template <CpuAdamW::Type G, CpuAdamW::Type O>
HWY_INLINE void update(DF d, const Consts& c, float* p, float* m, float* v, const void* g, void* out, size_t i) {
  const VF grad = hn::Mul(load_grad<G>(d, g, i), hn::Set(d, c.scale));
  VF pv = hn::Mul(hn::LoadU(d, p + i), hn::Set(d, c.decay));
  VF mv = hn::LoadU(d, m + i);
  mv = hn::MulAdd(hn::Sub(grad, mv), hn::Set(d, c.one_minus_b1), mv);  // torch's lerp(m, g, 1 - beta1)
  const VF vv = hn::MulAdd(hn::Mul(grad, grad), hn::Set(d, c.one_minus_b2), hn::Mul(hn::LoadU(d, v + i), hn::Set(d, c.b2)));
  const VF denom = hn::Add(hn::Mul(hn::Sqrt(vv), hn::Set(d, c.inv_bc2_sqrt)), hn::Set(d, c.eps));
  pv = hn::NegMulAdd(hn::Set(d, c.step_size), hn::Div(mv, denom), pv);
  hn::StoreU(pv, d, p + i);
  hn::StoreU(mv, d, m + i);
  hn::StoreU(vv, d, v + i);
  store_copy<O>(d, pv, out, i);
}

size_t type_bytes(int t) { return t == CpuAdamW::kF32 ? 4 : t == CpuAdamW::kNone ? 0 : 2; }

template <CpuAdamW::Type G, CpuAdamW::Type O>
void run(const Consts& c, int64_t count, float* p, float* m, float* v, const void* g, void* out) {
  const DF d;
  const size_t N = hn::Lanes(d), n = static_cast<size_t>(count);
  size_t i = 0;
  for (; i + N <= n; i += N) update<G, O>(d, c, p, m, v, g, out, i);
  if (i == n) return;
  // The remainder through the same vector code, on zero-padded copies.
  constexpr size_t kMax = HWY_MAX_BYTES / sizeof(float);
  alignas(64) float bp[kMax] = {}, bm[kMax] = {}, bv[kMax] = {}, bg[kMax] = {}, bo[kMax] = {};
  const size_t rest = n - i, gb = type_bytes(G), ob = type_bytes(O);
  std::memcpy(bp, p + i, rest * 4);
  std::memcpy(bm, m + i, rest * 4);
  std::memcpy(bv, v + i, rest * 4);
  std::memcpy(bg, static_cast<const char*>(g) + i * gb, rest * gb);
  update<G, O>(d, c, bp, bm, bv, bg, bo, 0);
  std::memcpy(p + i, bp, rest * 4);
  std::memcpy(m + i, bm, rest * 4);
  std::memcpy(v + i, bv, rest * 4);
  if (ob) std::memcpy(static_cast<char*>(out) + i * ob, bo, rest * ob);
}

template <CpuAdamW::Type G>
void run_grad(const Consts& c, int64_t n, float* p, float* m, float* v, const void* g, void* out, int out_type) {
  switch (out_type) {
    case CpuAdamW::kBF16: return run<G, CpuAdamW::kBF16>(c, n, p, m, v, g, out);
    case CpuAdamW::kF16: return run<G, CpuAdamW::kF16>(c, n, p, m, v, g, out);
    case CpuAdamW::kF32: return run<G, CpuAdamW::kF32>(c, n, p, m, v, g, out);
    default: return run<G, CpuAdamW::kNone>(c, n, p, m, v, g, out);
  }
}

void AdamW(const Consts& c, int64_t n, float* p, float* m, float* v, const void* g, int grad_type, void* out, int out_type) {
  switch (grad_type) {
    case CpuAdamW::kBF16: return run_grad<CpuAdamW::kBF16>(c, n, p, m, v, g, out, out_type);
    case CpuAdamW::kF16: return run_grad<CpuAdamW::kF16>(c, n, p, m, v, g, out, out_type);
    default: return run_grad<CpuAdamW::kF32>(c, n, p, m, v, g, out, out_type);
  }
}


}  // namespace HWY_NAMESPACE
}  // namespace zlm::trainer
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zlm::trainer {

namespace {
#define ZLM_TARGET_FN AdamW
#include "common/core/runnable_targets-inl.h"
#undef ZLM_TARGET_FN
}  // namespace

void cpu_adamw(const CpuAdamW::Settings& s, int64_t n, float* param, float* exp_avg, float* exp_avg_sq, CpuAdamW::Buffer grad,
               CpuAdamW::Buffer copy16) {
  if (n <= 0) return;
  target_table_of_AdamW().fn()(detail::adamw_consts(s), n, param, exp_avg, exp_avg_sq, grad.data, grad.type, copy16.data, copy16.type);
}

bool cpu_adamw_vectorized() { return true; }
const char* cpu_adamw_target() { return target_table_of_AdamW().name(); }

}  // namespace zlm::trainer
#endif
