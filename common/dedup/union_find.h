// Disjoint sets over 0..n-1 with union by size and path halving
// (Tarjan 1975): near-constant amortised time per operation.
//
//   zlm::UnionFind uf(n);
//   uf.unite(a, b);
//   if (uf.find(a) == uf.find(b)) ...
//
// Not thread-safe. Memory: 8 bytes per element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace zlm {

class UnionFind {
 public:
  explicit UnionFind(size_t n = 0) { resize(n); }
  void resize(size_t n);
  size_t size() const { return parent_.size(); }
  uint32_t find(uint32_t x);
  // Returns true when a and b were in different sets.
  bool unite(uint32_t a, uint32_t b);

 private:
  std::vector<uint32_t> parent_, size_;
};

}  // namespace zlm
