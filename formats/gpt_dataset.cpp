#include "formats/gpt_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <cstdlib>
#include <string>

#include "common/core/error.h"
#include "common/core/log.h"
#include "common/core/mapped_file.h"
#include "formats/npy.h"

namespace zlm::formats {

std::array<double, 3> parse_split_weights(std::string_view split) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorKind::Usage, "--split '%.*s': %s", static_cast<int>(split.size()), split.data(), why.c_str());
  };
  char sep = split.find(',') != std::string_view::npos ? ',' : split.find('/') != std::string_view::npos ? '/' : '\0';
  std::vector<double> parts;
  size_t start = 0;
  for (;;) {
    size_t end = sep ? split.find(sep, start) : std::string_view::npos;
    std::string piece(split.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    char* stop = nullptr;
    double v = std::strtod(piece.c_str(), &stop);
    while (stop && (*stop == ' ' || *stop == '\t')) ++stop;
    // strtod also reads "nan", "inf" and out-of-range values (as inf): none is a share.
    if (piece.find_first_not_of(" \t") == std::string::npos || !stop || *stop != '\0' || !std::isfinite(v) || v < 0)
      throw bad("'" + piece + "' is not a finite non-negative number");
    parts.push_back(v);
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  parts.resize(3, 0.0);  // as Megatron: a fourth weight on is ignored
  const double sum = parts[0] + parts[1] + parts[2];
  if (!(sum > 0)) throw bad("the weights sum to zero");
  if (!std::isfinite(sum)) throw bad("the weights' sum is not a finite number");
  return {parts[0], parts[1], parts[2]};
}

std::array<DocRange, 3> split_ranges_legacy(std::string_view split, int64_t size) {
  const std::array<double, 3> parts = parse_split_weights(split);
  const double sum = parts[0] + parts[1] + parts[2];
  int64_t idx[4] = {0, 0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    // Python round(): half to even, on the double product.
    idx[i + 1] = idx[i] + static_cast<int64_t>(std::nearbyint(parts[i] / sum * static_cast<double>(size)));
  }
  int64_t diff = idx[3] - size;
  for (int i = 1; i < 4; ++i) idx[i] -= diff;
  return {DocRange{idx[0], idx[1]}, DocRange{idx[1], idx[2]}, DocRange{idx[2], idx[3]}};
}

uint64_t NumpyRandomState::bounded(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s = 1; s < 64; s <<= 1) mask |= mask >> s;
  uint64_t v;
  if (max <= 0xFFFFFFFFULL) {
    do v = next32() & mask; while (v > max);
  } else {
    do {
      uint64_t hi = next32();
      v = ((hi << 32) | next32()) & mask;
    } while (v > max);
  }
  return v;
}

int64_t gpt_num_epochs(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples) {
  if (tokens_per_epoch <= 0) throw Error(ErrorKind::Usage, "the split holds no tokens");
  int64_t epochs = 1;
  while (epochs * tokens_per_epoch < num_samples * seq_length + 1) ++epochs;
  return epochs;
}

GptIndex build_gpt_index(std::span<const int32_t> sizes, DocRange docs, int64_t num_samples, int64_t seq_length, uint32_t seed) {
  if (docs.size() <= 0) throw Error(ErrorKind::Usage, "empty split: no documents in [%ld, %ld)", (long)docs.begin, (long)docs.end);
  if (seq_length <= 0) throw Error(ErrorKind::Usage, "--seq-length must be positive");
  GptIndex ix;
  ix.seq_length = seq_length;
  for (int64_t d = docs.begin; d < docs.end; ++d) ix.tokens_per_epoch += sizes[static_cast<size_t>(d)];
  const int64_t T = ix.tokens_per_epoch, E = ix.num_epochs = gpt_num_epochs(T, seq_length, num_samples);
  // separate_last_epoch (§5.5)
  if (E > 1) {
    int64_t before_last = ((E - 1) * T - 1) / seq_length;
    int64_t last = num_samples - before_last;
    int64_t per_epoch = (T - 1) / seq_length;
    ix.separate_last_epoch = last < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  }
  NumpyRandomState rng(seed);
  // doc_idx (§5.6)
  auto epochs_of_docs = [&](int64_t epochs) {
    std::vector<int32_t> out;
    out.reserve(static_cast<size_t>(epochs * docs.size()));
    for (int64_t e = 0; e < epochs; ++e)
      for (int64_t d = docs.begin; d < docs.end; ++d) out.push_back(static_cast<int32_t>(d));
    return out;
  };
  if (!ix.separate_last_epoch) {
    ix.doc_idx = epochs_of_docs(E);
    rng.shuffle(std::span<int32_t>(ix.doc_idx));
  } else {
    ix.doc_idx = epochs_of_docs(E - 1);
    rng.shuffle(std::span<int32_t>(ix.doc_idx));
    std::vector<int32_t> last = epochs_of_docs(1);
    rng.shuffle(std::span<int32_t>(last));
    ix.doc_idx.insert(ix.doc_idx.end(), last.begin(), last.end());
  }
  // sample_idx (§5.7)
  const int64_t S = (E * T - 1) / seq_length;
  ix.sample_idx.assign(static_cast<size_t>(2 * (S + 1)), 0);
  int64_t pos = 0, offset = 0;
  for (int64_t s = 1; s <= S; ++s) {
    int64_t need = seq_length + 1;
    while (need != 0) {
      int64_t doc_len = sizes[static_cast<size_t>(ix.doc_idx[static_cast<size_t>(pos)])] - offset;
      need -= doc_len;
      if (need <= 0) {
        offset += need + doc_len - 1;
        need = 0;
      } else {
        ++pos;
        offset = 0;
      }
    }
    ix.sample_idx[static_cast<size_t>(2 * s)] = pos;
    ix.sample_idx[static_cast<size_t>(2 * s + 1)] = offset;
  }
  // shuffle_idx (§5.8)
  int64_t first = ix.separate_last_epoch ? ((E - 1) * T - 1) / seq_length : S;
  ix.shuffle_idx.resize(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) ix.shuffle_idx[static_cast<size_t>(i)] = i;
  rng.shuffle(std::span<int64_t>(ix.shuffle_idx.data(), static_cast<size_t>(first)));
  if (first < S) rng.shuffle(std::span<int64_t>(ix.shuffle_idx.data() + first, static_cast<size_t>(S - first)));
  return ix;
}

GptIndex build_gpt_index(const MegatronReader& data, DocRange docs, int64_t num_samples, int64_t seq_length, uint32_t seed) {
  if (docs.begin < 0 || docs.end > static_cast<int64_t>(data.num_sequences()) || docs.begin > docs.end)
    throw Error(ErrorKind::Usage, "%s: document range [%ld, %ld) outside its %lu sequences", data.prefix().c_str(),
                (long)docs.begin, (long)docs.end, (unsigned long)data.num_sequences());
  std::vector<int32_t> sizes(data.num_sequences());
  for (uint64_t i = 0; i < sizes.size(); ++i) sizes[i] = data.size(i);
  return build_gpt_index(sizes, docs, num_samples, seq_length, seed);
}

std::vector<int64_t> gpt_sample(const MegatronReader& data, const GptIndex& ix, int64_t i) {
  if (i < 0 || i >= ix.num_samples()) throw Error(ErrorKind::Usage, "sample %ld out of range (%ld samples)", (long)i, (long)ix.num_samples());
  int64_t j = ix.shuffle_idx[static_cast<size_t>(i)];
  int64_t p0 = ix.sample_idx[static_cast<size_t>(2 * j)], o0 = ix.sample_idx[static_cast<size_t>(2 * j + 1)];
  int64_t p1 = ix.sample_idx[static_cast<size_t>(2 * j + 2)], o1 = ix.sample_idx[static_cast<size_t>(2 * j + 3)];
  auto doc = [&](int64_t p) { return static_cast<uint64_t>(ix.doc_idx[static_cast<size_t>(p)]); };
  if (p0 == p1) return data.sequence_tokens(doc(p0), o0, o1 - o0 + 1);
  std::vector<int64_t> out = data.sequence_tokens(doc(p0), o0);
  for (int64_t p = p0 + 1; p < p1; ++p) {
    auto t = data.sequence_tokens(doc(p));
    out.insert(out.end(), t.begin(), t.end());
  }
  auto t = data.sequence_tokens(doc(p1), 0, o1 + 1);
  out.insert(out.end(), t.begin(), t.end());
  return out;
}

std::string gpt_index_cache_prefix(const std::string& prefix, const std::string& split, int64_t ns, int64_t sl, uint32_t seed) {
  return prefix + "_" + split + "_indexmap_" + std::to_string(ns) + "ns_" + std::to_string(sl) + "sl_" + std::to_string(seed) + "s";
}

namespace {

template <typename T>
std::vector<int64_t> widen(const NpyArray& a) {
  std::vector<int64_t> out(static_cast<size_t>(a.count()));
  const auto* p = reinterpret_cast<const uint8_t*>(a.data.data());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(load_unaligned<T>(p + i * sizeof(T)));
  return out;
}

std::vector<int64_t> npy_ints(const NpyArray& a) {
  if (a.descr == "<i4") return widen<int32_t>(a);
  if (a.descr == "<u4") return widen<uint32_t>(a);
  if (a.descr == "<i8") return widen<int64_t>(a);
  throw Error(ErrorKind::Format, "unexpected dtype %s", a.descr.c_str());
}

template <typename T>
std::string narrow_bytes(const std::vector<int64_t>& v) {
  std::string out(v.size() * sizeof(T), '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    T x = static_cast<T>(v[i]);
    std::memcpy(out.data() + i * sizeof(T), &x, sizeof(T));
  }
  return out;
}

}  // namespace

GptIndex build_gpt_index_cached(const MegatronReader& data, DocRange docs, const std::string& split_name, int64_t num_samples,
                                int64_t seq_length, uint32_t seed, bool* loaded, std::string* cache_error,
                                const std::string& cache_dir) {
  *loaded = false;
  std::string prefix = data.prefix();
  if (!cache_dir.empty()) {
    std::filesystem::create_directories(cache_dir);
    prefix = (std::filesystem::path(cache_dir) / std::filesystem::path(prefix).filename()).string();
  }
  const std::string base = gpt_index_cache_prefix(prefix, split_name, num_samples, seq_length, seed);
  const std::string f_doc = base + "_doc_idx.npy", f_sample = base + "_sample_idx.npy", f_shuffle = base + "_shuffle_idx.npy";
  std::error_code ec;
  if (std::filesystem::exists(f_doc, ec) && std::filesystem::exists(f_sample, ec) && std::filesystem::exists(f_shuffle, ec)) {
    try {
      GptIndex ix;
      ix.seq_length = seq_length;
      for (int64_t d = docs.begin; d < docs.end; ++d) ix.tokens_per_epoch += data.size(static_cast<uint64_t>(d));
      ix.num_epochs = gpt_num_epochs(ix.tokens_per_epoch, seq_length, num_samples);
      NpyArray doc = read_npy(f_doc), sample = read_npy(f_sample), shuffle = read_npy(f_shuffle);
      std::vector<int64_t> d = npy_ints(doc);
      ix.doc_idx.assign(d.begin(), d.end());
      ix.sample_idx = npy_ints(sample);
      ix.shuffle_idx = npy_ints(shuffle);
      bool ok = sample.shape.size() == 2 && sample.shape[1] == 2 && sample.shape[0] == ix.num_samples() + 1 &&
                static_cast<int64_t>(ix.doc_idx.size()) == ix.num_epochs * docs.size();
      for (int32_t v : ix.doc_idx) ok = ok && v >= docs.begin && v < docs.end;
      if (ok) {
        *loaded = true;
        return ix;
      }
    } catch (const Error&) {
    }
  }
  GptIndex ix = build_gpt_index(data, docs, num_samples, seq_length, seed);
  try {
    const int64_t S = ix.num_samples();
    std::vector<int64_t> d(ix.doc_idx.begin(), ix.doc_idx.end());
    std::string db = narrow_bytes<int32_t>(d);
    write_npy(f_doc, "<i4", {static_cast<int64_t>(d.size())}, db.data(), db.size());
    int64_t max_sample = 0;
    for (int64_t v : ix.sample_idx) max_sample = std::max(max_sample, v);
    std::string sb = max_sample <= INT32_MAX ? narrow_bytes<int32_t>(ix.sample_idx) : narrow_bytes<int64_t>(ix.sample_idx);
    write_npy(f_sample, max_sample <= INT32_MAX ? "<i4" : "<i8", {S + 1, 2}, sb.data(), sb.size());
    bool small = S < static_cast<int64_t>(UINT32_MAX) - 1;
    std::string hb = small ? narrow_bytes<uint32_t>(ix.shuffle_idx) : narrow_bytes<int64_t>(ix.shuffle_idx);
    write_npy(f_shuffle, small ? "<u4" : "<i8", {S}, hb.data(), hb.size());
  } catch (const Error& e) {
    if (cache_error) *cache_error = e.what();
  }
  return ix;
}

std::vector<double> normalize_blend_weights(std::span<const double> weights) {
  double sum = 0;
  for (double w : weights) {
    if (!(w >= 0)) throw Error(ErrorKind::Usage, "blend weights must be non-negative");
    sum += w;
  }
  if (sum <= 0) throw Error(ErrorKind::Usage, "blend weights sum to zero");
  std::vector<double> out;
  for (double w : weights) out.push_back(w / sum);
  return out;
}

std::vector<int64_t> blend_targets_legacy(int64_t n, std::span<const double> w) {
  std::vector<int64_t> out;
  for (double x : w) out.push_back(static_cast<int64_t>(std::ceil(static_cast<double>(n) * x * 1.005)));
  return out;
}

BlendIndex build_blend_index(std::span<const double> w, int64_t size) {
  if (w.size() > 255) throw Error(ErrorKind::Usage, "at most 255 blended datasets");
  BlendIndex b;
  std::vector<int64_t> used(w.size(), 0);
  for (int64_t s = 0; s < size; ++s) {
    double x = static_cast<double>(std::max<int64_t>(s, 1));
    size_t best = 0;
    double best_err = w[0] * x - static_cast<double>(used[0]);
    for (size_t k = 1; k < w.size(); ++k) {
      double err = w[k] * x - static_cast<double>(used[k]);
      if (err > best_err) best_err = err, best = k;
    }
    b.dataset.push_back(static_cast<uint8_t>(best));
    b.dataset_sample.push_back(used[best]++);
  }
  return b;
}

GptSamples::GptSamples(std::vector<const MegatronReader*> readers, std::span<const double> normalized, const std::string& split,
                       int split_index, int64_t num_samples, int64_t seq_length, uint32_t seed, const std::string& cache_dir)
    : readers_(std::move(readers)) {
  if (num_samples <= 0) return;
  std::vector<int64_t> targets = readers_.size() == 1 ? std::vector<int64_t>{num_samples} : blend_targets_legacy(num_samples, normalized);
  static const char* kNames[3] = {"train", "valid", "test"};
  for (size_t d = 0; d < readers_.size(); ++d) {
    auto ranges = split_ranges_legacy(split, static_cast<int64_t>(readers_[d]->num_sequences()));
    if (ranges[split_index].size() <= 0) {
      indexes_.emplace_back();
      continue;
    }
    bool loaded = false;
    std::string why;
    indexes_.push_back(std::make_unique<GptIndex>(build_gpt_index_cached(*readers_[d], ranges[split_index], kNames[split_index], targets[d],
                                                                         seq_length, seed, &loaded, &why, cache_dir)));
    if (loaded) ZLM_LOG_INF(" > loaded %s index cache of %s", kNames[split_index], readers_[d]->prefix().c_str());
    if (!why.empty()) ZLM_LOG_WRN("could not write the %s index cache (%s); continuing without it", kNames[split_index], why.c_str());
  }
  if (readers_.size() > 1) {
    int64_t total = 0;
    for (const auto& ix : indexes_) total += ix ? ix->num_samples() : 0;
    blend_ = build_blend_index(normalized, total);
  }
}

bool GptSamples::empty() const {
  return std::none_of(indexes_.begin(), indexes_.end(), [](const auto& ix) { return ix && ix->num_samples() > 0; });
}

int64_t GptSamples::size() const {
  if (readers_.size() > 1) return static_cast<int64_t>(blend_.dataset.size());
  return indexes_.empty() || !indexes_[0] ? 0 : indexes_[0]->num_samples();
}

std::vector<int64_t> GptSamples::sample(int64_t i) const {
  size_t d = 0;
  int64_t j = i % std::max<int64_t>(1, size());
  if (readers_.size() > 1) {
    d = blend_.dataset[static_cast<size_t>(j)];
    j = blend_.dataset_sample[static_cast<size_t>(j)] % indexes_[d]->num_samples();
  }
  return gpt_sample(*readers_[d], *indexes_[d], j);
}

}  // namespace zlm::formats
