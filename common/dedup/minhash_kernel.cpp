// min_permutations with Highway: compiled once per target by foreach_target.h
// (which includes this file again for each); HWY_DYNAMIC_DISPATCH picks one at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "common/dedup/minhash_kernel.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <limits>

#include "common/dedup/minhash_kernel.h"

HWY_BEFORE_NAMESPACE();
namespace zlm {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D32 = hn::ScalableTag<uint32_t>;
using D64 = hn::Repartition<uint64_t, D32>;
using V32 = hn::Vec<D32>;

struct Block {
  V32 lo_even, lo_odd, hi, acc;
  hn::Vec<D64> add_even, add_odd;
};

HWY_INLINE Block load_block(D32 d, const PermutationTable& t, size_t base) {
  const D64 d64;
  return {hn::LoadU(d, t.lo_even.data() + base), hn::LoadU(d, t.lo_odd.data() + base), hn::LoadU(d, t.hi.data() + base),
          hn::Set(d, 0xFFFFFFFFu), hn::LoadU(d64, t.add_even.data() + base / 2),
          hn::LoadU(d64, t.add_odd.data() + base / 2)};
}

// One shingle x (broadcast) through the block's permutations.
HWY_INLINE void step(D32 d, Block& b, V32 x) {
  const D64 d64;
  const auto even = hn::Add(hn::MulEven(b.lo_even, x), b.add_even);  // a_lo * x + b, even permutations
  const auto odd = hn::Add(hn::MulEven(b.lo_odd, x), b.add_odd);     // the same, odd permutations
  const auto high = hn::Or(hn::BitCast(d, hn::ShiftRight<32>(even)),
                           hn::BitCast(d, hn::And(odd, hn::Set(d64, 0xFFFFFFFF00000000ull))));
  b.acc = hn::Min(b.acc, hn::Add(high, hn::Mul(b.hi, x)));
}

// NV vectors of permutations from `base`, one pass over the hashes (NV independent chains).
template <int NV>
HWY_INLINE void pass(D32 d, const uint64_t* hashes, size_t n, const PermutationTable& t, size_t base, uint32_t* out) {
  const size_t lanes = hn::Lanes(d);
  Block b[NV];
  for (int j = 0; j < NV; ++j) b[j] = load_block(d, t, base + j * lanes);
  for (size_t s = 0; s < n; ++s) {
    const V32 x = hn::Set(d, static_cast<uint32_t>(hashes[s]));
    for (int j = 0; j < NV; ++j) step(d, b[j], x);
  }
  HWY_ALIGN uint32_t tmp[HWY_MAX_BYTES / sizeof(uint32_t)];
  for (int j = 0; j < NV; ++j) {
    hn::Store(b[j].acc, d, tmp);
    for (size_t l = 0; l < lanes && base + j * lanes + l < t.k; ++l) out[base + j * lanes + l] = tmp[l];
  }
}

void MinPermutations(const uint64_t* hashes, size_t n, const PermutationTable& t, uint32_t* out) {
  const D32 d;
  const size_t lanes = hn::Lanes(d);
  if (lanes < 2) return min_permutations_scalar(hashes, n, t, out);  // the layout pairs even and odd lanes
  const size_t vectors = (t.k + lanes - 1) / lanes;  // the table is padded far enough (kPermutationPad)
  size_t v = 0;
  for (; v + 4 <= vectors; v += 4) pass<4>(d, hashes, n, t, v * lanes, out);
  switch (vectors - v) {
    case 3: pass<3>(d, hashes, n, t, v * lanes, out); break;
    case 2: pass<2>(d, hashes, n, t, v * lanes, out); break;
    case 1: pass<1>(d, hashes, n, t, v * lanes, out); break;
    default: break;
  }
}

const char* Target() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace zlm
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zlm {

HWY_EXPORT(MinPermutations);
HWY_EXPORT(Target);

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

void min_permutations(const uint64_t* hashes, size_t n, const PermutationTable& table, uint32_t* out) {
  HWY_DYNAMIC_DISPATCH(MinPermutations)(hashes, n, table, out);
}

// (a*x + b) mod 2^64 >> 32 with a = a_hi*2^32 + a_lo and a 32-bit x is
// hi32(a_lo*x + b) + a_hi*x (mod 2^32).
void min_permutations_scalar(const uint64_t* hashes, size_t n, const PermutationTable& t, uint32_t* out) {
  for (uint32_t i = 0; i < t.k; ++i) out[i] = std::numeric_limits<uint32_t>::max();
  for (size_t s = 0; s < n; ++s) {
    const auto x = static_cast<uint32_t>(hashes[s]);
    for (uint32_t i = 0; i < t.k; ++i) {
      const uint64_t prod = static_cast<uint64_t>(t.mul_lo[i]) * x + t.add[i];
      const uint32_t v = static_cast<uint32_t>(prod >> 32) + t.mul_hi[i] * x;
      out[i] = std::min(out[i], v);
    }
  }
}

const char* min_permutations_target() { return HWY_DYNAMIC_DISPATCH(Target)(); }

}  // namespace zlm
#endif
