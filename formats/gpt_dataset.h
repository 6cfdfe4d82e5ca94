// Megatron's GPTDataset sample indexing over a .bin/.idx dataset
// (docs/compatibility.md, "GPTDataset sample indexing"; legacy rules, which core reproduces for the default
// configuration): split ranges, epochs, doc_idx, sample_idx and shuffle_idx,
// and reading sample i. Given the same dataset, split, sample count, sequence
// length and seed, sample i is the same tokens Megatron feeds.
//
//   zlm::formats::MegatronReader data("owt_text_document");
//   auto ranges = zlm::formats::split_ranges_legacy("949,50,1", data.num_sequences());
//   auto index = zlm::formats::build_gpt_index(data, ranges[0], /*num_samples=*/800, /*seq_length=*/1024, /*seed=*/1234);
//   std::vector<int64_t> tokens = zlm::formats::gpt_sample(data, index, 0);   // seq_length + 1 ids
//
// NumpyRandomState reproduces numpy's legacy RandomState(seed): MT19937 seeded
// with init_genrand (std::mt19937 gives the same stream) and its shuffle
// (Fisher-Yates from the end, masked rejection sampling). Pure functions, no
// allocation beyond the returned arrays; building is O(epochs * documents +
// samples). Thread-safe (no shared state).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/megatron_mmap.h"

namespace zlm::formats {

struct DocRange {
  int64_t begin = 0, end = 0;  // sequences [begin, end)
  int64_t size() const { return end - begin; }
};

// The train, validation and test weights of --split ("949,50,1", "a/b/c", or
// one number; missing ones are 0): finite, non-negative, with a positive sum.
// Throws zlm::Error(Usage) naming the piece otherwise.
std::array<double, 3> parse_split_weights(std::string_view split);

// Legacy get_train_valid_test_split_: the document ranges of the three splits.
std::array<DocRange, 3> split_ranges_legacy(std::string_view split, int64_t num_documents);

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}
  uint32_t next32() { return static_cast<uint32_t>(mt_()); }
  // numpy's random_interval(max): uniform in [0, max].
  uint64_t bounded(uint64_t max);
  template <typename T>
  void shuffle(std::span<T> a) {
    for (size_t i = a.size(); i-- > 1;) {
      size_t j = static_cast<size_t>(bounded(i));
      std::swap(a[i], a[j]);
    }
  }

 private:
  std::mt19937 mt_;
};

struct GptIndex {
  int64_t seq_length = 0;
  int64_t tokens_per_epoch = 0;
  int64_t num_epochs = 0;
  bool separate_last_epoch = false;
  std::vector<int32_t> doc_idx;     // document (sequence) ids in reading order
  std::vector<int64_t> sample_idx;  // (S + 1) x 2: (position in doc_idx, token offset)
  std::vector<int64_t> shuffle_idx; // S entries
  int64_t num_samples() const { return static_cast<int64_t>(shuffle_idx.size()); }
};

// The number of epochs needed for num_samples samples of seq_length + 1 tokens.
int64_t gpt_num_epochs(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples);

// Builds the three arrays for one split (documents `docs` of `data`).
// Throws zlm::Error(Usage) for an empty split or a split without tokens.
GptIndex build_gpt_index(const MegatronReader& data, DocRange docs, int64_t num_samples, int64_t seq_length, uint32_t seed);
// Same from the per-document token counts alone (tests, and data without a reader).
GptIndex build_gpt_index(std::span<const int32_t> sizes, DocRange docs, int64_t num_samples, int64_t seq_length, uint32_t seed);

// Megatron's legacy index cache next to the data (docs/compatibility.md, "GPTDataset sample indexing"):
// {prefix}_{split_name}_indexmap_{num_samples}ns_{seq_length}sl_{seed}s_{doc,sample,shuffle}_idx.npy
// (doc_idx int32, sample_idx int32 (S+1, 2), shuffle_idx uint32; int64 where
// the values need it). Loads the three files when they exist and are
// consistent, otherwise builds the index and writes them (atomically). Sets
// *loaded. A failed write (read-only data directory) is not an error: the
// index is returned all the same and *cache_error says why.
// `cache_dir` (Megatron's --data-cache-path) replaces the data's directory when not empty.
GptIndex build_gpt_index_cached(const MegatronReader& data, DocRange docs, const std::string& split_name, int64_t num_samples,
                                int64_t seq_length, uint32_t seed, bool* loaded, std::string* cache_error,
                                const std::string& cache_dir = "");
std::string gpt_index_cache_prefix(const std::string& data_prefix, const std::string& split_name, int64_t num_samples,
                                   int64_t seq_length, uint32_t seed);

// Sample i (0 <= i < num_samples): seq_length + 1 token ids.
std::vector<int64_t> gpt_sample(const MegatronReader& data, const GptIndex& index, int64_t i);

// Blending (--data-path w1 p1 w2 p2 ...), legacy rules: weights normalised by
// their sum; per-dataset targets ceil(N * w * 1.005); the blend picks, for
// sample s, the dataset k maximising w_k * max(s, 1) - used_k (first wins).
std::vector<double> normalize_blend_weights(std::span<const double> weights);
std::vector<int64_t> blend_targets_legacy(int64_t num_samples, std::span<const double> normalized);
struct BlendIndex {
  std::vector<uint8_t> dataset;         // which dataset serves blended sample s
  std::vector<int64_t> dataset_sample;  // its sample index there
};
BlendIndex build_blend_index(std::span<const double> normalized, int64_t size);

// The samples of one split (0 train, 1 valid, 2 test) of one dataset or of a
// blend, as pretrain_gpt feeds them: each dataset's index is built (or loaded
// from its cache, see build_gpt_index_cached) for its blend target, and the
// blend runs over the sum of the datasets' sample counts. sample(i) wraps
// around past size(), like another pass over the shuffled index. `readers`
// must outlive this object; `normalized` from normalize_blend_weights.
class GptSamples {
 public:
  GptSamples(std::vector<const MegatronReader*> readers, std::span<const double> normalized, const std::string& split,
             int split_index, int64_t num_samples, int64_t seq_length, uint32_t seed, const std::string& cache_dir);
  bool empty() const;
  int64_t size() const;
  std::vector<int64_t> sample(int64_t i) const;

 private:
  std::vector<const MegatronReader*> readers_;
  std::vector<std::unique_ptr<GptIndex>> indexes_;  // null for a dataset whose split is empty
  BlendIndex blend_;
};

}  // namespace zlm::formats
