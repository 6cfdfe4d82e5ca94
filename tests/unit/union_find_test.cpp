#include "common/dedup/union_find.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace zlm {
namespace {

// Slow obvious reference: a label per element, relabelled on every union.
struct Labels {
  std::vector<uint32_t> label;
  explicit Labels(size_t n) : label(n) {
    for (size_t i = 0; i < n; ++i) label[i] = static_cast<uint32_t>(i);
  }
  bool unite(uint32_t a, uint32_t b) {
    const uint32_t la = label[a], lb = label[b];
    if (la == lb) return false;
    for (auto& l : label)
      if (l == lb) l = la;
    return true;
  }
};

TEST(UnionFind, AgreesWithRelabellingReference) {
  std::mt19937 rng(11);
  for (size_t n : {1u, 2u, 17u, 300u}) {
    UnionFind uf(n);
    Labels ref(n);
    std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(n - 1));
    for (int step = 0; step < 600; ++step) {
      const uint32_t a = pick(rng), b = pick(rng);
      ASSERT_EQ(uf.unite(a, b), ref.unite(a, b)) << "n=" << n << " step " << step;
      const uint32_t x = pick(rng), y = pick(rng);
      ASSERT_EQ(uf.find(x) == uf.find(y), ref.label[x] == ref.label[y]);
    }
  }
}

TEST(UnionFind, ResizeKeepsSetsAndAddsSingletons) {
  UnionFind uf(3);
  EXPECT_TRUE(uf.unite(0, 2));
  uf.resize(5);
  EXPECT_EQ(uf.size(), 5u);
  EXPECT_EQ(uf.find(0), uf.find(2));
  EXPECT_NE(uf.find(3), uf.find(4));
  EXPECT_TRUE(uf.unite(4, 2));
  EXPECT_EQ(uf.find(4), uf.find(0));
  EXPECT_FALSE(uf.unite(0, 4));
}

}  // namespace
}  // namespace zlm
