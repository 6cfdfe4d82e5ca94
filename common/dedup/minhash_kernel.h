// The inner loop of MinHash (common/dedup/minhash.h): for k permutations, the
// minimum over a document's shingle values x (the low 32 bits of its shingle
// hashes) of ((a_i * x + b_i) mod 2^64) >> 32. Vectorised with Highway, compiled for
// every instruction set it targets and chosen at run time (AVX-512 where the
// CPU has it, AVX2, SSE4, ... and a scalar build), so one binary runs well
// everywhere. Results are bit-identical to the scalar loop
// (min_permutations_scalar, kept for the tests and as the definition).
//
// Layout (PermutationTable): 32-bit lanes, permutation j in lane j. The 64-bit
// product a_lo * x needs a 32x32->64 multiply, which SIMD units do on even
// lanes only, so the low multipliers are stored twice: `lo_even` keeps lane j's
// a_lo in the even lanes (odd lanes 0), `lo_odd` moves each odd lane's a_lo one
// lane down; `add_even`/`add_odd` are the 64-bit b_i of the even and odd
// permutations. Per shingle and per vector of N permutations: two even-lane
// multiplies, two 64-bit adds, a shift, a mask, an or, a 32-bit multiply
// (a_hi * x), an add and a min. Arrays are padded to a multiple of
// kPermutationPad permutations. A target of one lane (Highway's scalar one)
// runs the scalar loop. The unit test runs every target this CPU supports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zlm {

constexpr uint32_t kPermutationPad = 64;

struct PermutationTable {
  uint32_t k = 0;  // permutations (the padded arrays hold more)
  std::vector<uint32_t> lo_even, lo_odd, hi;
  std::vector<uint64_t> add_even, add_odd;
  std::vector<uint32_t> mul_lo, mul_hi;  // natural order, for the scalar loop
  std::vector<uint64_t> add;
};

// The table of the multipliers a_i and increments b_i.
PermutationTable make_permutation_table(const std::vector<uint64_t>& mul, const std::vector<uint64_t>& add);

// out[i] = min over the n values xs of permutation i, i < table.k (0xFFFFFFFF when n == 0).
void min_permutations(const uint32_t* xs, size_t n, const PermutationTable& table, uint32_t* out);

// The definition, one permutation and one value at a time.
void min_permutations_scalar(const uint32_t* xs, size_t n, const PermutationTable& table, uint32_t* out);

// The instruction set min_permutations runs with here ("AVX3", "AVX2", ...); how
// many this CPU runs (the best first), and a choice among them (tests: not
// thread-safe, not while MinHash runs).
const char* min_permutations_target();
size_t min_permutations_targets();
void use_min_permutations_target(size_t i);

}  // namespace zlm
