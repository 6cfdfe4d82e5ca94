// The ZeRO engine's layout: which parameter lives in which bucket, where in
// it, and which range of it this data-parallel rank owns; in which order the
// buckets' gradients are reduced, and, at stage 3, which bucket to gather next.
// Pure arithmetic on names and sizes: no tensor, no communication, so it is
// unit-tested on its own.
//
//   ZeroLayout lay = make_zero_layout(params, spec);   // spec: blocks, world, rank, chunks, ...
//   const BucketLayout& b = lay.buckets[1 + l];         // block l: weights first, then biases/LayerNorms
//   b.own_begin, b.own_len                               // this rank's range of it
//
// Buckets: [0] the outer one (token and position embeddings, final LayerNorm),
// [1 + l] transformer block l, then one per parameter named in own_buckets (the
// tied embedding with pipeline parallelism: the same shard on the first and the
// last stage). In a bucket the weights (two or more dimensions, decayed) come
// first and the biases and LayerNorm parameters (not decayed) after; the bucket
// is zero-padded to a multiple of world x align elements, so that rank r owns
// the contiguous range [r * padded / world, (r + 1) * padded / world) with a
// sharded optimizer, or all of it without. Costs O(parameters).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zlm::trainer {

struct ParamInfo {
  std::string name;  // the module's name: "wte.weight", "blocks.3.attn_qkv.weight"
  std::vector<int64_t> shape;
  bool in_norm = true;  // counts in the gradient norm on this rank
  bool tp_partial = false;  // its gradient is a partial sum over the TP ranks (ZeroConfig::tp_partial)
};

struct SlotLayout {
  std::string name;
  int64_t offset = 0, numel = 0;  // in the bucket
  std::vector<int64_t> shape;
  bool in_norm = true;
  bool tp_partial = false;
};

struct BucketLayout {
  std::vector<SlotLayout> slots;
  int64_t numel = 0, padded = 0, decay_end = 0;  // decay_end: weights [0, decay_end), the rest not decayed
  int64_t own_begin = 0, own_len = 0;            // the range this rank steps
  int block = -1;                                // transformer block, -1: the outer bucket or one of its own
  // The part of slot s inside the owned range, as [lo, hi) bucket elements (hi <= lo: none).
  std::pair<int64_t, int64_t> owned_part(const SlotLayout& s) const;
  bool all_in_norm() const;
};

struct LayoutSpec {
  int64_t blocks = 0;                    // the transformer blocks this rank holds
  std::vector<std::string> own_buckets;  // parameters that get a bucket of their own
  int world = 1, rank = 0;               // the data-parallel group
  int64_t align = 64;                    // elements; shards start on 256-byte boundaries
  bool shard = false;                    // a sharded optimizer: each rank owns 1/world of every bucket
  bool hooked = true;                    // gradients reduced from autograd hooks (not stage 3): buckets get a launch order
  std::vector<std::vector<size_t>> chunk_blocks;  // the local blocks of each virtual-pipeline chunk
  bool pre = true, post = true;          // this rank has the embeddings / the head
};

struct ZeroLayout {
  static constexpr size_t kNone = SIZE_MAX;
  std::vector<BucketLayout> buckets;
  // Per bucket: the virtual-pipeline chunk whose backward produces its
  // gradients (the outer bucket and those of their own: the first chunk on the
  // first stage, the last chunk elsewhere). Per chunk: the order its buckets'
  // reductions are launched in (reverse model order: its blocks last to
  // first, then the outer bucket and those of their own where it has them).
  std::vector<size_t> chunk_of;
  std::vector<std::vector<size_t>> launch_order;
  std::vector<std::vector<size_t>> chunk_blocks;
  size_t wte_bucket = 0;  // the bucket holding wte.weight
  bool pre = true, post = true;

  int64_t padded_numel() const;
  int64_t unpadded_numel() const;
  // Stage 3's gathering order: what to prefetch after the forward / before
  // the backward of block bucket b (kNone: nothing, as at a chunk's end, where
  // the pipeline schedule decides what runs next), and what the embeddings
  // prefetch (the first block).
  size_t next_forward(size_t b) const;
  size_t next_backward(size_t b) const;
  size_t first_block_bucket() const { return 1 + chunk_blocks.front().front(); }
  // The elements of the outer bucket and wte's (one bucket counted once).
  int64_t outer_padded() const { return buckets[0].padded + (wte_bucket == 0 ? 0 : buckets[wte_bucket].padded); }
  // Stage 3: the most elements gathered at once: a block and the bucket
  // prefetched for what comes next in its chunk (forward or backward); the
  // embeddings' buckets and the first block's; the head's buckets.
  int64_t most_gathered() const;
};

ZeroLayout make_zero_layout(const std::vector<ParamInfo>& params, const LayoutSpec& spec);

}  // namespace zlm::trainer
