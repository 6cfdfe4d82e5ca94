#include "trainer/zero/layout.h"

#include <algorithm>

#include "common/core/error.h"

namespace zlm::trainer {

std::pair<int64_t, int64_t> BucketLayout::owned_part(const SlotLayout& s) const {
  return {std::max(s.offset, own_begin), std::min(s.offset + s.numel, own_begin + own_len)};
}

bool BucketLayout::all_in_norm() const {
  return std::all_of(slots.begin(), slots.end(), [](const SlotLayout& s) { return s.in_norm; });
}

int64_t ZeroLayout::padded_numel() const {
  int64_t n = 0;
  for (const auto& b : buckets) n += b.padded;
  return n;
}

int64_t ZeroLayout::unpadded_numel() const {
  int64_t n = 0;
  for (const auto& b : buckets) n += b.numel;
  return n;
}

size_t ZeroLayout::next_forward(size_t b) const {
  const size_t v = chunk_of[b];
  if (b - 1 != chunk_blocks[v].back()) return b + 1;
  return v + 1 == chunk_blocks.size() && post ? wte_bucket : kNone;
}

size_t ZeroLayout::next_backward(size_t b) const { return b - 1 != chunk_blocks[chunk_of[b]].front() ? b - 1 : kNone; }

int64_t ZeroLayout::most_gathered() const {
  auto padded = [&](size_t b) { return b < buckets.size() ? buckets[b].padded : 0; };
  int64_t most = 0;
  size_t blocks = 0;
  for (const auto& chunk : chunk_blocks) blocks += chunk.size();
  for (size_t b = 1; b <= blocks; ++b) most = std::max({most, padded(b) + padded(next_forward(b)), padded(b) + padded(next_backward(b))});
  if (pre) most = std::max(most, outer_padded() + padded(first_block_bucket()));
  if (post) most = std::max(most, outer_padded());
  return most;
}

namespace {

// "blocks.<l>.*" to block l, those named in own_buckets to a bucket each (after the blocks),
// everything else to the outer bucket.
size_t bucket_of(const std::string& name, const LayoutSpec& spec) {
  auto own = std::find(spec.own_buckets.begin(), spec.own_buckets.end(), name);
  if (own != spec.own_buckets.end()) return static_cast<size_t>(spec.blocks + 1 + (own - spec.own_buckets.begin()));
  if (name.rfind("blocks.", 0) == 0) {
    const size_t l = std::stoul(name.substr(7, name.find('.', 7) - 7));
    if (static_cast<int64_t>(l) >= spec.blocks) throw Error(ErrorKind::Internal, "ZeRO layout: %s is beyond the %ld blocks", name.c_str(), (long)spec.blocks);
    return 1 + l;
  }
  return 0;
}

// The buckets' gradients are reduced as soon as backward has produced them all, in reverse model
// order within each chunk (see ZeroLayout::launch_order).
void order_launches(ZeroLayout& lay, const LayoutSpec& spec) {
  const size_t chunks = spec.chunk_blocks.size(), L = static_cast<size_t>(spec.blocks);
  lay.chunk_of.assign(lay.buckets.size(), spec.pre ? 0 : chunks - 1);
  for (size_t v = 0; v < chunks; ++v)
    for (size_t l : spec.chunk_blocks[v]) lay.chunk_of[1 + l] = v;
  lay.launch_order.assign(chunks, {});
  for (size_t b = L + 1; b-- > 1;) lay.launch_order[lay.chunk_of[b]].push_back(b);
  lay.launch_order[lay.chunk_of[0]].push_back(0);
  for (size_t b = L + 1; b < lay.buckets.size(); ++b) lay.launch_order[lay.chunk_of[b]].push_back(b);
  for (auto& order : lay.launch_order) std::erase_if(order, [&](size_t b) { return !spec.hooked || lay.buckets[b].slots.empty(); });
}

}  // namespace

ZeroLayout make_zero_layout(const std::vector<ParamInfo>& params, const LayoutSpec& spec) {
  if (spec.chunk_blocks.empty()) throw Error(ErrorKind::Internal, "ZeRO layout: no chunk");
  ZeroLayout lay;
  lay.chunk_blocks = spec.chunk_blocks;
  lay.pre = spec.pre;
  lay.post = spec.post;
  lay.buckets.resize(static_cast<size_t>(spec.blocks + 1) + spec.own_buckets.size());
  for (int64_t l = 0; l <= spec.blocks; ++l) lay.buckets[static_cast<size_t>(l)].block = static_cast<int>(l) - 1;
  std::vector<std::vector<SlotLayout>> decay(lay.buckets.size()), no_decay(lay.buckets.size());
  for (const auto& p : params) {
    int64_t numel = 1;
    for (int64_t d : p.shape) numel *= d;
    const size_t b = bucket_of(p.name, spec);
    (p.shape.size() >= 2 ? decay : no_decay)[b].push_back(SlotLayout{p.name, 0, numel, p.shape, p.in_norm, p.tp_partial});
    if (p.name == "wte.weight") lay.wte_bucket = b;
  }
  const int64_t unit = static_cast<int64_t>(spec.world) * spec.align;
  for (size_t b = 0; b < lay.buckets.size(); ++b) {
    BucketLayout& k = lay.buckets[b];
    for (auto* group : {&decay[b], &no_decay[b]}) {
      for (auto& s : *group) {
        s.offset = k.numel;
        k.numel += s.numel;
        k.slots.push_back(s);
      }
      if (group == &decay[b]) k.decay_end = k.numel;
    }
    k.padded = (k.numel + unit - 1) / unit * unit;
    const int64_t shard = k.padded / spec.world;
    k.own_begin = spec.shard ? spec.rank * shard : 0;
    k.own_len = spec.shard ? shard : k.padded;
  }
  order_launches(lay, spec);
  return lay;
}

}  // namespace zlm::trainer
