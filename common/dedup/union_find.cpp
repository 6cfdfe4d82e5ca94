#include "common/dedup/union_find.h"

namespace zlm {

void UnionFind::resize(size_t n) {
  size_t old = parent_.size();
  parent_.resize(n);
  size_.resize(n, 1);
  for (size_t i = old; i < n; ++i) parent_[i] = static_cast<uint32_t>(i);
}

uint32_t UnionFind::find(uint32_t x) {
  while (parent_[x] != x) {
    parent_[x] = parent_[parent_[x]];
    x = parent_[x];
  }
  return x;
}

bool UnionFind::unite(uint32_t a, uint32_t b) {
  a = find(a);
  b = find(b);
  if (a == b) return false;
  if (size_[a] < size_[b]) std::swap(a, b);
  parent_[b] = a;
  size_[a] += size_[b];
  return true;
}

}  // namespace zlm
