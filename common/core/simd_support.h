// Which of the x86 instruction-set levels that Highway compiles code for this CPU
// and its operating system run, for code that picks its Highway target itself
// (runnable_targets-inl.h, TargetTable) instead of through libhwy.so's dispatch, whose
// load-time initialiser costs every process that links it ~6 ms.
//
//   sse4: SSSE3, SSE4.1, SSE4.2, PCLMUL, AES   (Highway's SSE4 target)
//   avx2: sse4 and AVX, AVX2, BMI, BMI2, FMA, F16C   (its AVX2 target)
//   avx3: avx2 and AVX-512 F, VL, DQ, BW   (its AVX3 target)
//
// The flags are those Highway compiles each target with (hwy/ops/set_macros-inl.h);
// libgcc's checks include the operating system's support for the wider registers.
// All false on other architectures. Thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace zlm {

struct SimdSupport {
  bool sse4 = false, avx2 = false, avx3 = false;
};

const SimdSupport& simd_support();

// One compiled target of a kernel: its function and Highway's name for the target.
template <class Fn>
struct TargetChoice {
  Fn fn;
  const char* name;
};

// The targets of a kernel that this CPU runs, the best first, and the one in use:
// the best, unless a test chose another (use(): not thread-safe, not while the
// kernel runs).
template <class Fn>
class TargetTable {
 public:
  explicit TargetTable(std::vector<TargetChoice<Fn>> all) : all_(std::move(all)), chosen_(all_.front()) {}
  Fn fn() const { return chosen_.fn; }
  const char* name() const { return chosen_.name; }
  size_t size() const { return all_.size(); }
  void use(size_t i) { chosen_ = all_.at(std::min(i, all_.size() - 1)); }

 private:
  std::vector<TargetChoice<Fn>> all_;
  TargetChoice<Fn> chosen_;
};

}  // namespace zlm
