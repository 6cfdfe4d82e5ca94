// Included at namespace scope in the HWY_ONCE part of a file compiled per target
// by Highway's foreach_target.h, with ZLM_TARGET_FN defined as a function's name
// in each target's namespace, it defines
//   TargetTable<Fn>& target_table_of_<ZLM_TARGET_FN>()
// (common/core/simd_support.h), built on first use (a function-local static, so
// no other file's static initialiser can call the kernel before it exists): the
// compiled targets of that function that this CPU runs (simd_support()), the
// best first, and last the target the file is
// compiled for without extra flags (where the baseline is SSE2, Highway's EMU128,
// or its SCALAR with compilers whose EMU128 it marks broken, such as GCC 12.2).
// The file disables the targets not listed here (HWY_DISABLED_TARGETS: SSSE3 and
// the later AVX-512 ones). A fragment, not a header: no include guard.
#define ZLM_RT_CAT2(a, b) a##b
#define ZLM_RT_CAT(a, b) ZLM_RT_CAT2(a, b)
inline std::vector<zlm::TargetChoice<decltype(&HWY_STATIC_DISPATCH(ZLM_TARGET_FN))>> ZLM_RT_CAT(
    runnable_targets_of_, ZLM_TARGET_FN)() {
  std::vector<zlm::TargetChoice<decltype(&HWY_STATIC_DISPATCH(ZLM_TARGET_FN))>> out;
#if HWY_ARCH_X86
#if HWY_TARGETS & HWY_AVX3
  if (zlm::simd_support().avx3) out.push_back({&N_AVX3::ZLM_TARGET_FN, hwy::TargetName(HWY_AVX3)});
#endif
#if HWY_TARGETS & HWY_AVX2
  if (zlm::simd_support().avx2) out.push_back({&N_AVX2::ZLM_TARGET_FN, hwy::TargetName(HWY_AVX2)});
#endif
#if HWY_TARGETS & HWY_SSE4
  if (zlm::simd_support().sse4) out.push_back({&N_SSE4::ZLM_TARGET_FN, hwy::TargetName(HWY_SSE4)});
#endif
#endif
  out.push_back({&HWY_STATIC_DISPATCH(ZLM_TARGET_FN), hwy::TargetName(HWY_STATIC_TARGET)});
  return out;
}
inline auto& ZLM_RT_CAT(target_table_of_, ZLM_TARGET_FN)() {
  static zlm::TargetTable table(ZLM_RT_CAT(runnable_targets_of_, ZLM_TARGET_FN)());
  return table;
}
#undef ZLM_RT_CAT
#undef ZLM_RT_CAT2
