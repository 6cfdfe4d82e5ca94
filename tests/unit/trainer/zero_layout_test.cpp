// The ZeRO layout alone: no tensor, no process group (trainer/zero/layout.h).
#include "trainer/zero/layout.h"

#include <gtest/gtest.h>

namespace zlm::trainer {
namespace {

// GPT-2's parameter names and shapes for L blocks of hidden h (vocab V, positions P).
std::vector<ParamInfo> gpt2_params(int64_t L, int64_t h, int64_t V, int64_t P) {
  std::vector<ParamInfo> p = {{"wte.weight", {V, h}}, {"wpe.weight", {P, h}}};
  for (int64_t l = 0; l < L; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"ln1.weight", {h}}, {"ln1.bias", {h}}, {"attn_qkv.weight", {3 * h, h}}, {"attn_qkv.bias", {3 * h}}, {"attn_proj.weight", {h, h}},
             {"attn_proj.bias", {h}}, {"ln2.weight", {h}}, {"ln2.bias", {h}}, {"mlp_fc.weight", {4 * h, h}}, {"mlp_fc.bias", {4 * h}},
             {"mlp_proj.weight", {h, 4 * h}}, {"mlp_proj.bias", {h}}})
      p.push_back({b + name, shape});
  }
  p.push_back({"ln_f.weight", {h}});
  p.push_back({"ln_f.bias", {h}});
  return p;
}

TEST(ZeroLayout, BucketsWeightsFirstPaddedAndSharded) {
  LayoutSpec spec{.blocks = 2, .world = 4, .rank = 1, .align = 64, .shard = true, .chunk_blocks = {{0, 1}}};
  const ZeroLayout lay = make_zero_layout(gpt2_params(2, 16, 100, 8), spec);
  ASSERT_EQ(lay.buckets.size(), 3u);  // outer, block 0, block 1
  const BucketLayout& outer = lay.buckets[0];
  EXPECT_EQ(outer.numel, 100 * 16 + 8 * 16 + 2 * 16);
  EXPECT_EQ(outer.decay_end, 100 * 16 + 8 * 16);  // the two embeddings, then ln_f
  EXPECT_EQ(outer.padded % (4 * 64), 0);
  EXPECT_EQ(outer.own_len, outer.padded / 4);
  EXPECT_EQ(outer.own_begin, outer.own_len);  // rank 1
  const BucketLayout& b0 = lay.buckets[1];
  EXPECT_EQ(b0.block, 0);
  EXPECT_EQ(b0.numel, 12 * 16 * 16 + 13 * 16);
  EXPECT_EQ(b0.decay_end, 12 * 16 * 16);  // qkv, proj, fc, proj weights first
  EXPECT_EQ(b0.slots[0].name, "blocks.0.attn_qkv.weight");
  for (size_t i = 1; i < b0.slots.size(); ++i) EXPECT_EQ(b0.slots[i].offset, b0.slots[i - 1].offset + b0.slots[i - 1].numel);
  EXPECT_EQ(lay.wte_bucket, 0u);
  EXPECT_EQ(lay.launch_order, (std::vector<std::vector<size_t>>{{2, 1, 0}}));  // reverse model order
  EXPECT_EQ(lay.unpadded_numel(), outer.numel + 2 * b0.numel);
  // Without a sharded optimizer every rank owns all of every bucket.
  spec.shard = false;
  const ZeroLayout whole = make_zero_layout(gpt2_params(2, 16, 100, 8), spec);
  EXPECT_EQ(whole.buckets[1].own_begin, 0);
  EXPECT_EQ(whole.buckets[1].own_len, whole.buckets[1].padded);
}

TEST(ZeroLayout, OwnedPartsCoverEachParameterOnce) {
  const auto params = gpt2_params(1, 24, 50, 8);
  for (int world : {1, 2, 3, 8}) {
    std::vector<int64_t> covered(1 + 1, 0);
    for (int rank = 0; rank < world; ++rank) {
      const ZeroLayout lay = make_zero_layout(params, {.blocks = 1, .world = world, .rank = rank, .shard = true, .chunk_blocks = {{0}}});
      for (size_t b = 0; b < lay.buckets.size(); ++b)
        for (const auto& s : lay.buckets[b].slots) {
          const auto [lo, hi] = lay.buckets[b].owned_part(s);
          if (hi > lo) covered[b] += hi - lo;
        }
    }
    const ZeroLayout any = make_zero_layout(params, {.blocks = 1, .world = world, .rank = 0, .shard = true, .chunk_blocks = {{0}}});
    EXPECT_EQ(covered[0], any.buckets[0].numel) << world;
    EXPECT_EQ(covered[1], any.buckets[1].numel) << world;
  }
}

// Pipeline parallelism: the tied embedding in a bucket of its own, two chunks (interleaved
// schedule), and stage 3's gathering order within a chunk.
TEST(ZeroLayout, ChunksOwnBucketsAndStage3Order) {
  auto params = gpt2_params(4, 8, 40, 8);
  LayoutSpec spec{.blocks = 4, .own_buckets = {"wte.weight"}, .world = 2, .rank = 0, .shard = true, .hooked = true,
                  .chunk_blocks = {{0, 1}, {2, 3}}, .pre = true, .post = true};
  const ZeroLayout lay = make_zero_layout(params, spec);
  ASSERT_EQ(lay.buckets.size(), 6u);  // outer, 4 blocks, wte's own
  EXPECT_EQ(lay.wte_bucket, 5u);
  EXPECT_EQ(lay.buckets[5].slots.size(), 1u);
  EXPECT_EQ(lay.chunk_of, (std::vector<size_t>{0, 0, 0, 1, 1, 0}));
  EXPECT_EQ(lay.launch_order, (std::vector<std::vector<size_t>>{{2, 1, 0, 5}, {4, 3}}));
  EXPECT_EQ(lay.next_forward(1), 2u);
  EXPECT_EQ(lay.next_forward(2), ZeroLayout::kNone);  // a chunk's end: the schedule decides
  EXPECT_EQ(lay.next_forward(4), 5u);                  // the last chunk of the last stage: the head's wte
  EXPECT_EQ(lay.next_backward(4), 3u);
  EXPECT_EQ(lay.next_backward(3), ZeroLayout::kNone);
  EXPECT_EQ(lay.first_block_bucket(), 1u);
  EXPECT_EQ(lay.outer_padded(), lay.buckets[0].padded + lay.buckets[5].padded);
  spec.hooked = false;  // stage 3: no hooks, no launch order
  EXPECT_TRUE(make_zero_layout(params, spec).launch_order[0].empty());
}

}  // namespace
}  // namespace zlm::trainer
