// min_permutations with Highway: compiled once per target by foreach_target.h
// (which includes this file again for each); runnable_targets-inl.h picks one per
// process (not HWY_DYNAMIC_DISPATCH, whose libhwy.so costs every process ~6 ms).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "common/dedup/minhash_kernel.cpp"
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_AVX3_DL)  // not picked by runnable_targets-inl.h
#endif
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <limits>

#include "common/core/simd_support.h"
#include "common/dedup/minhash_kernel.h"

HWY_BEFORE_NAMESPACE();
namespace zlm {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D32 = hn::ScalableTag<uint32_t>;
using Quarter = hn::Half<hn::Half<D32>>;  // a tail of a few permutations (100 = 6 x 16 + 4 with AVX-512)
using HalfD = hn::Half<D32>;

template <class D>
struct Block {
  hn::Vec<D> lo_even, lo_odd, hi, acc;
  hn::Vec<hn::Repartition<uint64_t, D>> add_even, add_odd;
};

template <class D>
HWY_INLINE Block<D> load_block(D d, const PermutationTable& t, size_t base) {
  const hn::Repartition<uint64_t, D> d64;
  return {hn::LoadU(d, t.lo_even.data() + base), hn::LoadU(d, t.lo_odd.data() + base), hn::LoadU(d, t.hi.data() + base),
          hn::Set(d, 0xFFFFFFFFu), hn::LoadU(d64, t.add_even.data() + base / 2),
          hn::LoadU(d64, t.add_odd.data() + base / 2)};
}

// One shingle x (broadcast) through the block's permutations.
template <class D>
HWY_INLINE void step(D d, Block<D>& b, hn::Vec<D> x) {
  const auto even = hn::Add(hn::MulEven(b.lo_even, x), b.add_even);  // a_lo * x + b, even permutations
  const auto odd = hn::Add(hn::MulEven(b.lo_odd, x), b.add_odd);     // the same, odd permutations
  // The high halves: even permutations' shifted down into the even lanes, odd ones' already in the odd lanes.
  const auto high = hn::OddEven(hn::BitCast(d, odd), hn::BitCast(d, hn::ShiftRight<32>(even)));
  b.acc = hn::Min(b.acc, hn::Add(high, hn::Mul(b.hi, x)));
}

// The block's minima of the permutations below t.k.
template <class D>
HWY_INLINE void store_block(D d, const Block<D>& b, const PermutationTable& t, size_t base, uint32_t* out) {
  HWY_ALIGN uint32_t tmp[HWY_MAX_BYTES / sizeof(uint32_t)];
  hn::Store(b.acc, d, tmp);
  for (size_t l = 0; l < hn::Lanes(d) && base + l < t.k; ++l) out[base + l] = tmp[l];
}

// NV full vectors of permutations from `base`, and with kTail one narrower
// vector (DT) after them: one pass over the values, NV (+1) independent chains.
template <int NV, bool kTail, class DT = D32>
HWY_INLINE void pass(const uint32_t* xs, size_t n, const PermutationTable& t, size_t base, uint32_t* out) {
  const D32 d;
  const DT dt;
  const size_t lanes = hn::Lanes(d);
  Block<D32> b[NV > 0 ? NV : 1];
  for (int j = 0; j < NV; ++j) b[j] = load_block(d, t, base + j * lanes);
  Block<DT> tail;
  if constexpr (kTail) tail = load_block(dt, t, base + NV * lanes);  // past the table's padding otherwise
  for (size_t s = 0; s < n; ++s) {
    for (int j = 0; j < NV; ++j) step(d, b[j], hn::Set(d, xs[s]));
    if constexpr (kTail) step(dt, tail, hn::Set(dt, xs[s]));
  }
  for (int j = 0; j < NV; ++j) store_block(d, b[j], t, base + j * lanes, out);
  if constexpr (kTail) store_block(dt, tail, t, base + NV * lanes, out);
}

// The last full vectors (0-3) and the rest of the permutations (`rest` lanes, 0
// or fewer than a vector) in one pass, the rest in the narrowest vector that
// holds it and pairs even and odd lanes.
template <int NV>
HWY_INLINE void last_pass(const uint32_t* xs, size_t n, const PermutationTable& t, size_t base, size_t rest, uint32_t* out) {
  if (rest == 0) {
    if constexpr (NV > 0) pass<NV, false>(xs, n, t, base, out);
    return;
  }
  if constexpr (hn::MaxLanes(Quarter()) >= 2) {  // compiled only where a quarter vector has an even/odd pair
    if (rest <= hn::Lanes(Quarter())) return pass<NV, true, Quarter>(xs, n, t, base, out);
  }
  if constexpr (hn::MaxLanes(HalfD()) >= 2) {
    if (rest <= hn::Lanes(HalfD())) return pass<NV, true, HalfD>(xs, n, t, base, out);
  }
  pass<NV, true, D32>(xs, n, t, base, out);
}

void MinPermutations(const uint32_t* xs, size_t n, const PermutationTable& t, uint32_t* out) {
  const D32 d;
  const size_t lanes = hn::Lanes(d);
  if (lanes < 2) return min_permutations_scalar(xs, n, t, out);  // the layout pairs even and odd lanes
  const size_t full = t.k / lanes, rest = t.k - full * lanes;  // the table is padded far enough (kPermutationPad)
  size_t v = 0;
  for (; v + 4 <= full; v += 4) pass<4, false>(xs, n, t, v * lanes, out);
  switch (full - v) {
    case 3: last_pass<3>(xs, n, t, v * lanes, rest, out); break;
    case 2: last_pass<2>(xs, n, t, v * lanes, rest, out); break;
    case 1: last_pass<1>(xs, n, t, v * lanes, rest, out); break;
    default: last_pass<0>(xs, n, t, v * lanes, rest, out); break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace zlm
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zlm {

namespace {
#define ZLM_TARGET_FN MinPermutations
#include "common/core/runnable_targets-inl.h"
#undef ZLM_TARGET_FN
}  // namespace

PermutationTable make_permutation_table(const std::vector<uint64_t>& mul, const std::vector<uint64_t>& add) {
  PermutationTable t;
  t.k = static_cast<uint32_t>(mul.size());
  const size_t padded = (t.k + kPermutationPad - 1) / kPermutationPad * kPermutationPad;
  t.lo_even.assign(padded, 0);
  t.lo_odd.assign(padded, 0);
  t.hi.assign(padded, 0);
  t.add_even.assign(padded / 2, 0);
  t.add_odd.assign(padded / 2, 0);
  for (uint32_t i = 0; i < t.k; ++i) {
    const auto lo = static_cast<uint32_t>(mul[i]);
    t.hi[i] = static_cast<uint32_t>(mul[i] >> 32);
    if (i % 2 == 0) {
      t.lo_even[i] = lo;
      t.add_even[i / 2] = add[i];
    } else {
      t.lo_odd[i - 1] = lo;  // one lane down: the even lane the multiply reads
      t.add_odd[i / 2] = add[i];
    }
    t.mul_lo.push_back(lo);
    t.mul_hi.push_back(t.hi[i]);
    t.add.push_back(add[i]);
  }
  return t;
}

void min_permutations(const uint32_t* xs, size_t n, const PermutationTable& table, uint32_t* out) {
  target_table_of_MinPermutations().fn()(xs, n, table, out);
}

// (a*x + b) mod 2^64 >> 32 with a = a_hi*2^32 + a_lo and a 32-bit x is
// hi32(a_lo*x + b) + a_hi*x (mod 2^32).
void min_permutations_scalar(const uint32_t* xs, size_t n, const PermutationTable& t, uint32_t* out) {
  for (uint32_t i = 0; i < t.k; ++i) out[i] = std::numeric_limits<uint32_t>::max();
  for (size_t s = 0; s < n; ++s) {
    const uint32_t x = xs[s];
    for (uint32_t i = 0; i < t.k; ++i) {
      const uint64_t prod = static_cast<uint64_t>(t.mul_lo[i]) * x + t.add[i];
      const uint32_t v = static_cast<uint32_t>(prod >> 32) + t.mul_hi[i] * x;
      out[i] = std::min(out[i], v);
    }
  }
}

const char* min_permutations_target() { return target_table_of_MinPermutations().name(); }
size_t min_permutations_targets() { return target_table_of_MinPermutations().size(); }
void use_min_permutations_target(size_t i) { target_table_of_MinPermutations().use(i); }

}  // namespace zlm
#endif
