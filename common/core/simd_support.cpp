#include "common/core/simd_support.h"

namespace zlm {

namespace {
SimdSupport detect() {
  SimdSupport s;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  s.sse4 = __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.1") && __builtin_cpu_supports("sse4.2") &&
           __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("aes");
  s.avx2 = s.sse4 && __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
           __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  s.avx3 = s.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
#endif
  return s;
}
}  // namespace

const SimdSupport& simd_support() {
  static const SimdSupport s = detect();
  return s;
}

}  // namespace zlm
