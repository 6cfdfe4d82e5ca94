#include "tools/dataset_info/dataset_info.h"

#include <algorithm>
#include <limits>
#include <ostream>

#include <cstdlib>
#include <memory>

#include "common/core/error.h"
#include "common/tokenizer/gpt2_bpe.h"
#include "formats/gpt_dataset.h"
#include "formats/megatron_mmap.h"

namespace zlm::dataset_info {

using formats::MegatronReader;
using zlm::Gpt2Bpe;

static void dump_document(const MegatronReader& r, int64_t doc, const Gpt2Bpe* bpe, std::ostream& out) {
  if (doc < 0 || static_cast<uint64_t>(doc) >= r.num_documents())
    throw Error(ErrorKind::Usage, "--doc %ld out of range: the dataset has %lu documents", (long)doc,
                (unsigned long)r.num_documents());
  for (int64_t s = r.doc_idx(doc); s < r.doc_idx(doc + 1); ++s) {
    auto tokens = r.sequence_tokens(static_cast<uint64_t>(s));
    if (bpe) {
      out << bpe->decode(std::vector<int32_t>(tokens.begin(), tokens.end())) << "\n";
      continue;
    }
    for (size_t k = 0; k < tokens.size(); ++k) out << (k ? " " : "") << tokens[k];
    out << "\n";
  }
}

// --sample: Megatron's --data-path forms, one prefix or weight prefix pairs.
static int dump_samples(const InfoOptions& o, std::ostream& out, Stats& stats) {
  std::vector<std::pair<double, std::string>> blend;
  if (o.data.size() == 1) {
    blend.emplace_back(1.0, o.data[0]);
  } else {
    if (o.data.size() % 2 != 0)
      throw Error(ErrorKind::Usage, "give one prefix, or weight prefix pairs as Megatron's --data-path (got %zu values)", o.data.size());
    for (size_t i = 0; i < o.data.size(); i += 2) {
      char* end = nullptr;
      double w = std::strtod(o.data[i].c_str(), &end);
      if (o.data[i].empty() || *end != '\0') throw Error(ErrorKind::Usage, "blend weight '%s' is not a number", o.data[i].c_str());
      blend.emplace_back(w, o.data[i + 1]);
    }
  }
  std::vector<std::unique_ptr<MegatronReader>> readers;
  std::vector<const MegatronReader*> views;
  std::vector<double> weights;
  for (const auto& [w, prefix] : blend) {
    readers.push_back(std::make_unique<MegatronReader>(prefix));
    views.push_back(readers.back().get());
    weights.push_back(w);
  }
  static const char* kNames[3] = {"train", "valid", "test"};
  int split_index = static_cast<int>(std::find(kNames, kNames + 3, o.split_name) - kNames);
  if (split_index == 3) throw Error(ErrorKind::Usage, "--split-name must be train, valid or test (got '%s')", o.split_name.c_str());
  formats::GptSamples samples(views, formats::normalize_blend_weights(weights), o.split, split_index, o.num_samples, o.seq_length,
                              o.seed, o.data_cache_path);
  if (samples.empty()) throw Error(ErrorKind::Usage, "--split '%s' leaves the %s split empty", o.split.c_str(), o.split_name.c_str());
  for (int64_t i = o.sample; i < o.sample + o.sample_count; ++i) {
    auto ids = samples.sample(i);
    for (size_t k = 0; k < ids.size(); ++k) out << (k ? " " : "") << ids[k];
    out << "\n";
  }
  stats.set("split_samples", samples.size());
  stats.set("samples_printed", o.sample_count);
  return 0;
}

int run(const InfoOptions& options, std::ostream& out, Stats& stats) {
  if (options.sample >= 0) return dump_samples(options, out, stats);
  if (options.data.size() != 1) throw Error(ErrorKind::Usage, "give one dataset prefix (a blend only with --sample)");
  MegatronReader r(options.data[0]);  // validates header, sizes, pointers, doc_idx
  if (options.doc >= 0) {
    std::unique_ptr<Gpt2Bpe> bpe;
    if (!options.vocab_file.empty() || !options.merge_file.empty())
      bpe = std::make_unique<Gpt2Bpe>(Gpt2Bpe::load(options.vocab_file, options.merge_file));
    dump_document(r, options.doc, bpe.get(), out);
    return 0;
  }
  uint64_t empty_docs = 0;
  for (uint64_t k = 0; k + 1 < r.num_doc_idx(); ++k) {  // no sequences, or only sequences of 0 tokens
    uint64_t tokens = 0;
    for (uint64_t i = static_cast<uint64_t>(r.doc_idx(k)); i < static_cast<uint64_t>(r.doc_idx(k + 1)) && tokens == 0; ++i) tokens += static_cast<uint64_t>(r.size(i));
    empty_docs += tokens == 0;
  }
  int64_t min_len = std::numeric_limits<int64_t>::max(), max_len = 0;
  int64_t min_id = std::numeric_limits<int64_t>::max(), max_id = std::numeric_limits<int64_t>::min();
  uint64_t out_of_vocab = 0;
  bool integer = formats::dtype_is_integer(r.dtype());
  for (uint64_t i = 0; i < r.num_sequences(); ++i) {
    int64_t len = r.size(i);
    min_len = std::min(min_len, len);
    max_len = std::max(max_len, len);
    if (!integer) continue;
    for (int64_t id : r.sequence_tokens(i)) {
      min_id = std::min(min_id, id);
      max_id = std::max(max_id, id);
      if (options.vocab_size && (id < 0 || static_cast<uint64_t>(id) >= options.vocab_size)) ++out_of_vocab;
    }
  }
  if (r.num_sequences() == 0) min_len = 0;
  uint8_t code = static_cast<uint8_t>(r.dtype());
  stats.set("dtype", formats::dtype_name(code));
  stats.set("dtype_code", static_cast<uint64_t>(code));
  stats.set("multimodal", r.multimodal() ? "yes" : "no");
  stats.set("documents", r.num_documents());
  stats.set("empty_documents", empty_docs);
  stats.set("sequences", r.num_sequences());
  stats.set("tokens", r.total_tokens());
  stats.set("bin_bytes", r.bin_bytes());
  stats.set("sequence_length_min", min_len);
  stats.set("sequence_length_mean", r.num_sequences() ? static_cast<double>(r.total_tokens()) / r.num_sequences() : 0.0);
  stats.set("sequence_length_max", max_len);
  if (integer && r.total_tokens() > 0) {
    stats.set("token_id_min", min_id);
    stats.set("token_id_max", max_id);
  }
  if (options.vocab_size) stats.set("token_ids_out_of_vocab", out_of_vocab);
  stats.set("integrity", out_of_vocab ? "FAILED: token ids outside the vocabulary" : "ok");
  for (const auto& [key, value] : stats.entries()) {
    out << key << ": ";
    std::visit([&](const auto& v) { out << v; }, value);
    out << "\n";
  }
  return out_of_vocab ? 1 : 0;
}

}  // namespace zlm::dataset_info
