#include "tools/near_dedup/near_dedup.h"

#define XXH_INLINE_ALL
#include <tbb/parallel_for.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <thread>
#include <unordered_map>

#include "common/core/bad_records.h"
#include "common/core/error.h"
#include "common/core/files.h"
#include "common/core/jsonl_writer.h"
#include "common/core/log.h"
#include "common/core/output_file.h"
#include "common/dedup/lsh.h"
#include "common/dedup/minhash.h"
#include "common/dedup/union_find.h"
#include "common/io/input_files.h"
#include "common/io/jsonl.h"
#include "common/io/pipeline.h"
#include "tools/near_dedup/stage_file.h"

namespace zlm::near_dedup {

namespace fs = std::filesystem;

namespace {

constexpr int kShardBits = 40;  // a document's position: shard << 40 | its index among the shard's good records
constexpr uint64_t kMaxShardDocs = uint64_t{1} << kShardBits;

struct DocRecord {
  uint64_t id_lo, id_hi;        // XXH3-128 of the id (--key)
  uint64_t text_offset, text_bytes;  // in the shard's text store
  uint64_t line;                // 1-based line of the shard
};
static_assert(sizeof(DocRecord) == 40);

struct PairRecord {
  uint64_t main, other;  // positions
  double similarity;
};
static_assert(sizeof(PairRecord) == 24);

uint32_t rows_per_band(const Settings& s) { return s.num_seeds / s.num_bands; }
uint32_t band_record_bytes(const Settings& s) { return 16 + 4 * rows_per_band(s); }
uint32_t shard_of(uint64_t pos) { return static_cast<uint32_t>(pos >> kShardBits); }
uint64_t index_of(uint64_t pos) { return pos & (kMaxShardDocs - 1); }

JaccardMode parse_mode(const std::string& s) {
  if (s == "union") return JaccardMode::Union;
  if (s == "min") return JaccardMode::Min;
  if (s == "max") return JaccardMode::Max;
  throw Error(ErrorKind::Usage, "--jaccard must be union, min or max (got '%s')", s.c_str());
}

// Everything that makes the stages' files: recorded in each file's header and marker.
std::string settings_line(const Settings& s, const std::vector<std::string>& shards) {
  std::string line = strprintf("bands=%u seeds=%u ngram=%u seed=%lu jaccard=%s>%.17g iter=%d group>=%.17g key=%s text=%s ranges=%u shards=%zu",
                               s.num_bands, s.num_seeds, s.char_ngram, (unsigned long)s.seed, s.jaccard.c_str(), s.jaccard_threshold,
                               s.heuristic_iter, s.group_threshold, s.key.c_str(), s.text_key.c_str(), s.ranges, shards.size());
  return line;
}

struct Run {
  const Options& opt;
  const CommonFlags& common;
  std::vector<std::string> shards;
  std::string settings_text;
  uint64_t settings = 0;
  MinHashParams params;
  BucketRule rule;

  Run(const Options& o, const CommonFlags& c) : opt(o), common(c), shards(shard_files(o)) {
    const Settings& s = o.settings;
    if (s.num_bands == 0 || s.num_seeds % s.num_bands != 0)
      throw Error(ErrorKind::Usage, "--num-seeds (%u) must be a multiple of --num-bands (%u)", s.num_seeds, s.num_bands);
    if (s.heuristic_iter == 0 || s.heuristic_iter < -1) throw Error(ErrorKind::Usage, "--heuristic-iter must be >= 1 or -1");
    if (s.ranges == 0) throw Error(ErrorKind::Usage, "--ranges must be at least 1");
    if (o.work.empty()) throw Error(ErrorKind::Usage, "give --work DIR (the stages' files)");
    if (shards.size() >= (size_t{1} << (64 - kShardBits))) throw Error(ErrorKind::Usage, "more than 2^24 shards");
    settings_text = settings_line(s, shards);
    std::string all = settings_text;
    for (const auto& f : shards) all += "\n" + f;
    settings = XXH64(all.data(), all.size(), 0);
    params = {.num_seeds = s.num_seeds, .char_ngram = s.char_ngram, .seed = s.seed};
    rule = {.threshold = s.jaccard_threshold, .heuristic_iter = s.heuristic_iter, .mode = parse_mode(s.jaccard)};
  }

  uint64_t shard_subject(uint32_t s) const {
    std::string key = shards[s] + "#" + std::to_string(s);
    return XXH64(key.data(), key.size(), 1);
  }
  std::string sig_path(uint32_t s, const std::string& suffix) const { return strprintf("%s/signatures/%05u.%s", opt.work.c_str(), s, suffix.c_str()); }
  std::string band_path(uint32_t s, uint32_t b) const { return sig_path(s, strprintf("band-%03u", b)); }
  std::string pairs_path(uint32_t b, uint32_t r) const { return strprintf("%s/pairs/%03u-%04u.pairs", opt.work.c_str(), b, r); }
  std::string removals_path(uint32_t s) const { return strprintf("%s/removals/%05u.removals", opt.work.c_str(), s); }
  std::string part_name(uint32_t s) const { return strprintf("part-%05u.jsonl", s); }

  StageFileReader docs(uint32_t s, bool verify) const {
    return StageFileReader(sig_path(s, "docs"), StageFileKind::Docs, sizeof(DocRecord), settings, shard_subject(s), verify);
  }
};

// ---------------------------------------------------------------- signatures

// A band's records in memory: (hash, position, rows...) of band_record_bytes.
struct BandBuffer {
  std::vector<uint8_t> bytes;
  void sort_into(StageFileWriter& out, uint32_t record_bytes) const {
    const size_t n = bytes.size() / record_bytes;
    std::vector<std::pair<uint64_t, uint64_t>> order(n);  // (hash, position): unique positions make it a total order
    for (size_t i = 0; i < n; ++i) order[i] = {load_unaligned<uint64_t>(&bytes[i * record_bytes]), i};
    std::sort(order.begin(), order.end(), [&](const auto& x, const auto& y) {
      if (x.first != y.first) return x.first < y.first;
      return load_unaligned<uint64_t>(&bytes[x.second * record_bytes + 8]) < load_unaligned<uint64_t>(&bytes[y.second * record_bytes + 8]);
    });
    for (const auto& [h, i] : order) out.add(&bytes[i * record_bytes]);
  }
};

// Merges sorted band runs (each sorted by hash, then position) into `out`.
void merge_runs(const std::vector<std::unique_ptr<StageFileReader>>& runs, StageFileWriter& out) {
  using Head = std::tuple<uint64_t, uint64_t, size_t>;  // hash, position, run
  std::priority_queue<Head, std::vector<Head>, std::greater<>> heap;
  std::vector<uint64_t> at(runs.size(), 0);
  auto push = [&](size_t r) {
    if (at[r] < runs[r]->count()) heap.emplace(runs[r]->get<uint64_t>(at[r]), load_unaligned<uint64_t>(runs[r]->record(at[r]) + 8), r);
  };
  for (size_t r = 0; r < runs.size(); ++r) push(r);
  while (!heap.empty()) {
    const size_t r = std::get<2>(heap.top());
    heap.pop();
    out.add(runs[r]->record(at[r]++));
    push(r);
  }
}

struct FpDoc {
  uint64_t line;
  std::string id, text;
  std::vector<uint32_t> sig;
};
struct FpBatch {
  std::vector<FpDoc> docs;
  std::vector<std::pair<std::string, std::string>> bad;
};

struct SignatureCounts {
  uint64_t docs = 0, bad = 0, bytes = 0, spills = 0;
};

SignatureCounts signatures_task(const Run& run, uint32_t s) {
  const Settings& st = run.opt.settings;
  const uint32_t rows = rows_per_band(st), rb = band_record_bytes(st);
  const uint64_t subject = run.shard_subject(s);
  fs::create_directories(run.opt.work + "/signatures");
  StageFileWriter docs(run.sig_path(s, "docs"), StageFileKind::Docs, sizeof(DocRecord), run.settings, subject);
  StageFileWriter texts(run.sig_path(s, "texts"), StageFileKind::Texts, 1, run.settings, subject);
  std::vector<BandBuffer> bands(st.num_bands);
  const uint64_t budget = std::max<uint64_t>(static_cast<uint64_t>(run.opt.memory_mb * 1048576.0), 4096);
  uint64_t buffered = 0;
  SignatureCounts counts;
  std::vector<std::string> spill_files;
  auto spill = [&] {
    for (uint32_t b = 0; b < st.num_bands; ++b) {
      const std::string path = strprintf("%s.spill-%03lu", run.band_path(s, b).c_str(), (unsigned long)counts.spills);
      StageFileWriter w(path, StageFileKind::BandRun, rb, run.settings, subject);
      bands[b].sort_into(w, rb);
      w.commit();
      spill_files.push_back(path);
      bands[b].bytes.clear();
      bands[b].bytes.shrink_to_fit();
    }
    ++counts.spills;
    buffered = 0;
  };

  const MinHasher hasher(run.params);
  JsonlBatchReader reader({run.shards[s]});
  BadRecords bad(run.opt.max_bad_records);
  const std::vector<std::string> keys{st.text_key, st.key};
  ThreadArena arena(run.opt.threads);
  std::vector<uint8_t> record(rb);
  run_ordered_pipeline<LineBatch, FpBatch>(
      arena, pipeline_in_flight(arena.threads()), [&](LineBatch& b) { return reader.next_batch(b); },
      [&](LineBatch& b, FpBatch& r) {
        thread_local JsonFieldExtractor extractor;
        thread_local std::vector<std::string> values;
        thread_local std::vector<uint64_t> scratch;
        std::string detail;
        r.docs.clear();
        r.bad.clear();
        for (const LineRef& ref : b.lines) {
          const RecordStatus status = extractor.extract(b.line(ref), b.capacity_after(ref), keys, values, &detail);
          if (status != RecordStatus::Ok) {
            r.bad.emplace_back(run.shards[s] + ":" + std::to_string(ref.line_number), std::string(record_status_name(status)) + ": " + detail);
            continue;
          }
          FpDoc& d = r.docs.emplace_back();
          d.line = ref.line_number;
          d.sig.resize(st.num_seeds);
          hasher.signature(values[0], d.sig.data(), &scratch);
          d.text = std::move(values[0]);
          d.id = std::move(values[1]);
        }
      },
      [&](FpBatch& r) {
        for (const auto& [where, what] : r.bad) bad.add(where, what);
        counts.bad += r.bad.size();
        for (const FpDoc& d : r.docs) {
          if (counts.docs >= kMaxShardDocs) throw Error(ErrorKind::Usage, "%s: more than 2^40 documents in one shard: split it", run.shards[s].c_str());
          const uint64_t pos = (uint64_t{s} << kShardBits) | counts.docs++;
          const XXH128_hash_t id = XXH3_128bits(d.id.data(), d.id.size());
          const DocRecord rec{id.low64, id.high64, counts.bytes, d.text.size(), d.line};
          docs.add(&rec);
          texts.add_bytes(d.text.data(), d.text.size());
          counts.bytes += d.text.size();
          for (uint32_t b = 0; b < st.num_bands; ++b) {
            const uint32_t* band_rows = d.sig.data() + static_cast<size_t>(b) * rows;
            const uint64_t h = XXH3_64bits_withSeed(band_rows, rows * sizeof(uint32_t), b);  // find_duplicates' band hash
            std::memcpy(record.data(), &h, 8);
            std::memcpy(record.data() + 8, &pos, 8);
            std::memcpy(record.data() + 16, band_rows, 4 * rows);
            bands[b].bytes.insert(bands[b].bytes.end(), record.begin(), record.end());
          }
          buffered += uint64_t{rb} * st.num_bands;
          if (buffered >= budget) spill();
        }
      });
  bad.fail_if_all_bad(counts.docs + counts.bad, run.shards[s]);
  if (counts.spills > 0) spill();
  for (uint32_t b = 0; b < st.num_bands; ++b) {
    StageFileWriter out(run.band_path(s, b), StageFileKind::BandRun, rb, run.settings, subject);
    if (counts.spills == 0) {
      bands[b].sort_into(out, rb);
      bands[b].bytes = {};
    } else {
      std::vector<std::unique_ptr<StageFileReader>> runs;
      for (uint64_t k = 0; k < counts.spills; ++k)
        runs.push_back(std::make_unique<StageFileReader>(spill_files[k * st.num_bands + b], StageFileKind::BandRun, rb, run.settings,
                                                         subject, true));
      merge_runs(runs, out);
    }
    out.commit();
  }
  for (const auto& f : spill_files) fs::remove(f);
  docs.commit();
  texts.commit();
  return counts;
}

// ---------------------------------------------------------------- candidates

struct ShardTexts {
  std::unique_ptr<StageFileReader> docs, texts;
};

// Lazily opened document tables and text stores (length-checked; the cluster
// stage verifies the tables' checksums).
class TextSource {
 public:
  explicit TextSource(const Run& run) : run_(run), shards_(run.shards.size()) {}
  std::string_view text(uint64_t pos) {
    ShardTexts& st = open(shard_of(pos));
    const uint64_t j = index_of(pos);
    if (j >= st.docs->count())
      throw Error(ErrorKind::Format, "%s: document %lu is past its %lu records (a band run of another run?)", st.docs->path().c_str(),
                  (unsigned long)j, (unsigned long)st.docs->count());
    const DocRecord d = st.docs->get<DocRecord>(j);
    if (d.text_offset > st.texts->count() || d.text_bytes > st.texts->count() - d.text_offset)
      throw Error(ErrorKind::Format, "%s: document %lu's text lies outside %s", st.docs->path().c_str(), (unsigned long)j,
                  st.texts->path().c_str());
    return {reinterpret_cast<const char*>(st.texts->record(d.text_offset)), d.text_bytes};
  }

 private:
  ShardTexts& open(uint32_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    ShardTexts& st = shards_.at(s);
    if (!st.docs) {
      st.docs = std::make_unique<StageFileReader>(run_.docs(s, false));
      st.texts = std::make_unique<StageFileReader>(run_.sig_path(s, "texts"), StageFileKind::Texts, 1, run_.settings, run_.shard_subject(s), false);
    }
    return st;
  }
  const Run& run_;
  std::vector<ShardTexts> shards_;
  std::mutex mu_;
};

// The hash range [lo, hi) of range r (hi = none: to the end): the band's hashes
// sampled from every shard's run, cut at the quantiles r/R, so a skewed band
// does not leave one task with most of the records.
std::pair<uint64_t, std::optional<uint64_t>> hash_range(const std::vector<std::unique_ptr<StageFileReader>>& runs, uint32_t r, uint32_t ranges) {
  std::vector<uint64_t> sample;
  for (const auto& run : runs) {
    const uint64_t n = run->count(), stride = std::max<uint64_t>(1, n / 1024);
    for (uint64_t i = 0; i < n; i += stride) sample.push_back(run->get<uint64_t>(i));
  }
  std::sort(sample.begin(), sample.end());
  auto cut = [&](uint32_t k) -> std::optional<uint64_t> {
    if (k == 0) return uint64_t{0};
    if (k >= ranges || sample.empty()) return std::nullopt;
    return sample[sample.size() * k / ranges];
  };
  const auto lo = cut(r);
  return {lo ? *lo : UINT64_MAX, cut(r + 1)};  // an empty sample: range 0 takes everything
}

uint64_t lower_bound_hash(const StageFileReader& run, uint64_t hash) {
  uint64_t lo = 0, hi = run.count();
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (run.get<uint64_t>(mid) < hash) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

struct Bucket {
  std::vector<uint64_t> positions;  // ascending = input order
};

struct CandidateCounts {
  uint64_t records = 0, buckets = 0, compared = 0, similar = 0;
};

CandidateCounts candidates_task(const Run& run, uint32_t band, uint32_t r, TextSource& texts) {
  const Settings& st = run.opt.settings;
  const uint32_t rows = rows_per_band(st), rb = band_record_bytes(st);
  std::vector<std::unique_ptr<StageFileReader>> runs;
  for (uint32_t s = 0; s < run.shards.size(); ++s)  // range 0's task verifies the runs' checksums: each file once
    runs.push_back(std::make_unique<StageFileReader>(run.band_path(s, band), StageFileKind::BandRun, rb, run.settings, run.shard_subject(s), r == 0));
  const auto [lo, hi] = hash_range(runs, r, st.ranges);
  std::vector<uint64_t> at(runs.size()), end(runs.size());
  for (size_t s = 0; s < runs.size(); ++s) {
    at[s] = lower_bound_hash(*runs[s], lo);
    end[s] = hi ? lower_bound_hash(*runs[s], *hi) : runs[s]->count();
  }
  using Head = std::tuple<uint64_t, uint64_t, size_t>;  // (hash, position, shard): the shards' runs merged in global order
  std::priority_queue<Head, std::vector<Head>, std::greater<>> heap;
  auto push = [&](size_t s) {
    if (at[s] < end[s]) heap.emplace(runs[s]->get<uint64_t>(at[s]), load_unaligned<uint64_t>(runs[s]->record(at[s]) + 8), s);
  };
  for (size_t s = 0; s < runs.size(); ++s) push(s);

  fs::create_directories(run.opt.work + "/pairs");
  StageFileWriter out(run.pairs_path(band, r), StageFileKind::Pairs, sizeof(PairRecord), run.settings, band * uint64_t{st.ranges} + r);
  CandidateCounts counts;
  std::vector<Bucket> batch;
  ThreadArena arena(run.opt.threads);
  auto verify_batch = [&] {
    std::vector<std::vector<PairRecord>> found(batch.size());
    std::vector<uint64_t> compared(batch.size(), 0);
    arena.execute([&] {
      tbb::parallel_for(size_t{0}, batch.size(), [&](size_t i) {
        const auto& pos = batch[i].positions;
        std::vector<std::optional<std::vector<uint64_t>>> sets(pos.size());
        auto shingles_of = [&](uint32_t k) -> const std::vector<uint64_t>& {
          if (!sets[k]) sets[k] = shingle_set(texts.text(pos[k]), st.char_ngram);
          return *sets[k];
        };
        std::vector<uint32_t> members(pos.size());
        for (uint32_t k = 0; k < members.size(); ++k) members[k] = k;
        verify_bucket(members, run.rule, shingles_of, {},
                      [&](uint32_t m, uint32_t o, double sim, bool) { found[i].push_back({pos[m], pos[o], sim}); },
                      [&](uint32_t, uint32_t, double) { ++compared[i]; });
      });
    });
    for (size_t i = 0; i < batch.size(); ++i) {
      for (const PairRecord& p : found[i]) out.add(&p);
      counts.similar += found[i].size();
      counts.compared += compared[i];
    }
    batch.clear();
  };
  // Equal band hashes: a bucket of the documents whose rows equal those of the
  // first one (a 64-bit collision cannot merge two buckets; as find_duplicates).
  std::vector<std::pair<uint64_t, const uint8_t*>> group;
  auto close_group = [&] {
    if (group.size() >= 2) {
      Bucket b;
      for (const auto& [p, rec] : group)
        if (std::memcmp(rec + 16, group[0].second + 16, 4 * rows) == 0) b.positions.push_back(p);
      if (b.positions.size() >= 2) {
        ++counts.buckets;
        batch.push_back(std::move(b));
        if (batch.size() >= 4096) verify_batch();
      }
    }
    group.clear();
  };
  uint64_t current = 0;
  while (!heap.empty()) {
    const auto [h, p, s] = heap.top();
    heap.pop();
    if (!group.empty() && h != current) close_group();
    current = h;
    group.emplace_back(p, runs[s]->record(at[s]));
    ++counts.records;
    ++at[s];
    push(s);
  }
  close_group();
  verify_batch();
  out.commit();
  return counts;
}

// ---------------------------------------------------------------- cluster

struct IdHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& id) const { return id.first ^ (id.second * 0x9E3779B97F4A7C15ULL); }
};

struct ClusterCounts {
  uint64_t pairs = 0, linked = 0, groups = 0, grouped_ids = 0, removed = 0;
};

ClusterCounts cluster_task(const Run& run) {
  const Settings& st = run.opt.settings;
  std::vector<StageFileReader> docs;
  for (uint32_t s = 0; s < run.shards.size(); ++s) docs.push_back(run.docs(s, true));
  auto id_of = [&](uint64_t pos) {
    const uint32_t s = shard_of(pos);
    if (s >= docs.size() || index_of(pos) >= docs[s].count())
      throw Error(ErrorKind::Format, "a verified pair names document %lu of shard %u, which its table lacks", (unsigned long)index_of(pos), s);
    const DocRecord d = docs[s].get<DocRecord>(index_of(pos));
    return std::make_pair(d.id_lo, d.id_hi);
  };
  // group_dups: ids linked when similarity >= its threshold; groups are the components of two or more ids.
  std::unordered_map<std::pair<uint64_t, uint64_t>, uint32_t, IdHash> index;
  UnionFind uf;
  auto node = [&](const std::pair<uint64_t, uint64_t>& id) {
    auto [it, fresh] = index.emplace(id, static_cast<uint32_t>(index.size()));
    if (fresh) uf.resize(index.size());
    return it->second;
  };
  ClusterCounts counts;
  for (uint32_t b = 0; b < st.num_bands; ++b)
    for (uint32_t r = 0; r < st.ranges; ++r) {
      StageFileReader pairs(run.pairs_path(b, r), StageFileKind::Pairs, sizeof(PairRecord), run.settings, b * uint64_t{st.ranges} + r, true);
      for (uint64_t i = 0; i < pairs.count(); ++i) {
        const PairRecord p = pairs.get<PairRecord>(i);
        ++counts.pairs;
        if (!(p.similarity >= st.group_threshold)) continue;
        ++counts.linked;
        const uint32_t a = node(id_of(p.main)), c = node(id_of(p.other));
        uf.unite(a, c);
      }
    }
  std::vector<uint32_t> members(index.size(), 0);
  for (uint32_t i = 0; i < index.size(); ++i) ++members[uf.find(i)];
  for (uint32_t i = 0; i < index.size(); ++i)
    if (members[i] >= 2) ++counts.groups, counts.grouped_ids += members[i];
  // dedup --keep first: a group's first document in input order stays; every other
  // document whose id is in the group goes (repeated ids included).
  std::vector<uint8_t> chosen(index.size(), 0);
  fs::create_directories(run.opt.work + "/removals");
  for (uint32_t s = 0; s < run.shards.size(); ++s) {
    StageFileWriter out(run.removals_path(s), StageFileKind::Removals, 8, run.settings, run.shard_subject(s));
    for (uint64_t j = 0; j < docs[s].count(); ++j) {
      const DocRecord d = docs[s].get<DocRecord>(j);
      auto it = index.find({d.id_lo, d.id_hi});
      if (it == index.end()) continue;
      const uint32_t root = uf.find(it->second);
      if (members[root] < 2) continue;
      if (!chosen[root]) {
        chosen[root] = 1;
        continue;
      }
      out.add(&d.line);
      ++counts.removed;
    }
    out.commit();
  }
  return counts;
}

// ---------------------------------------------------------------- filter

struct FilterCounts {
  uint64_t lines = 0, kept = 0, removed = 0, bad = 0;
};

FilterCounts filter_task(const Run& run, uint32_t s) {
  const Settings& st = run.opt.settings;
  const std::string& shard = run.shards[s];
  StageFileReader removals(run.removals_path(s), StageFileKind::Removals, 8, run.settings, run.shard_subject(s), true);
  const uint64_t documents = run.docs(s, false).count();
  fs::create_directories(run.opt.output_dir);
  JsonlWriter out(run.opt.output_dir + "/" + run.part_name(s));
  std::unique_ptr<JsonlWriter> removed_out;
  if (!run.opt.removed_dir.empty()) {
    fs::create_directories(run.opt.removed_dir);
    removed_out = std::make_unique<JsonlWriter>(run.opt.removed_dir + "/" + run.part_name(s));
  }
  JsonlBatchReader reader({shard});
  JsonFieldExtractor extractor;
  std::vector<std::string> values;
  std::string detail;
  const std::vector<std::string> keys{st.key, st.text_key};
  BadRecords bad(run.opt.max_bad_records);
  FilterCounts c;
  uint64_t next = 0, good = 0;
  LineBatch batch;
  while (reader.next_batch(batch)) {
    for (const LineRef& ref : batch.lines) {
      const std::string_view line = batch.line(ref);
      ++c.lines;
      const RecordStatus status = extractor.extract(line, batch.capacity_after(ref), keys, values, &detail);
      bool keep = status == RecordStatus::Ok;
      if (!keep) {
        bad.add(shard + ":" + std::to_string(ref.line_number), std::string("[SKIPPING] ") + record_status_name(status) + ": " + detail);
        ++c.bad;
      } else {
        ++good;
        if (next < removals.count() && removals.get<uint64_t>(next) == ref.line_number) {
          keep = false;
          ++next;
          ++c.removed;
        }
      }
      if (keep) {
        out.write_raw_line(line);
        ++c.kept;
      } else if (removed_out) {
        removed_out->write_raw_line(line);
      }
    }
  }
  if (good != documents || next != removals.count())
    throw Error(ErrorKind::Usage, "%s changed since its signatures were taken (%lu documents now, %lu then) ---> HINT: re-run every stage "
                "with a fresh --work directory", shard.c_str(), (unsigned long)good, (unsigned long)documents);
  out.commit();
  if (removed_out) removed_out->commit();
  return c;
}

// ---------------------------------------------------------------- tasks

std::string task_name(Stage stage, const Run& run, uint64_t t) {
  switch (stage) {
    case Stage::Signatures: return strprintf("signatures-%05lu", (unsigned long)t);
    case Stage::Candidates:
      return strprintf("candidates-%03lu-%04lu", (unsigned long)(t / run.opt.settings.ranges), (unsigned long)(t % run.opt.settings.ranges));
    case Stage::Cluster: return "cluster";
    case Stage::Filter: return strprintf("filter-%05lu", (unsigned long)t);
  }
  return "?";
}

// A task's marker, written after its outputs: its presence means done.
bool task_done(const Run& run, const std::string& name) {
  const std::string path = run.opt.work + "/done/" + name;
  if (!fs::exists(path)) return false;
  const std::string content = read_file(path);
  if (content != run.settings_text + "\n")
    throw Error(ErrorKind::Usage, "%s was done with other settings (%s) ---> HINT: use the flags of that run, or a fresh --work directory",
                path.c_str(), content.substr(0, content.find('\n')).c_str());
  return true;
}

}  // namespace

Stage parse_stage(const std::string& name) {
  if (name == "signatures") return Stage::Signatures;
  if (name == "candidates") return Stage::Candidates;
  if (name == "cluster") return Stage::Cluster;
  if (name == "filter") return Stage::Filter;
  throw Error(ErrorKind::Usage, "no stage '%s' (signatures, candidates, cluster, filter)", name.c_str());
}

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::Signatures: return "signatures";
    case Stage::Candidates: return "candidates";
    case Stage::Cluster: return "cluster";
    case Stage::Filter: return "filter";
  }
  return "?";
}

std::vector<std::string> shard_files(const Options& options) {
  if (options.shards.empty()) throw Error(ErrorKind::Usage, "give --shards (files, directories or globs of JSONL)");
  std::vector<std::string> files = expand_inputs(options.shards);
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < files.size(); ++i) {
    if (files[i] == "-") throw Error(ErrorKind::Usage, "--shards: standard input cannot be a shard (every stage reads the shards again)");
    std::error_code ec;
    const std::string canonical = fs::weakly_canonical(files[i], ec).string();
    auto [it, fresh] = seen.emplace(ec ? files[i] : canonical, i);
    if (!fresh)
      throw Error(ErrorKind::Usage, "--shards lists %s twice (as shard %zu and shard %zu) ---> HINT: each shard once, or its documents "
                  "would be counted twice", files[i].c_str(), it->second, i);
  }
  return files;
}

uint64_t task_count(Stage stage, const Options& options) {
  switch (stage) {
    case Stage::Signatures:
    case Stage::Filter: return shard_files(options).size();
    case Stage::Candidates: return uint64_t{options.settings.num_bands} * std::max<uint32_t>(options.settings.ranges, 1);
    case Stage::Cluster: return 1;
  }
  return 0;
}

void run_stage(Stage stage, const Options& opt, const CommonFlags& common, Stats& stats) {
  const double t0 = log_elapsed_sec();
  const Run run(opt, common);
  if (stage == Stage::Filter && opt.output_dir.empty()) throw Error(ErrorKind::Usage, "the filter stage needs --output-dir");
  const uint64_t tasks = task_count(stage, opt);
  if (opt.task >= static_cast<int64_t>(tasks))
    throw Error(ErrorKind::Usage, "--task %ld: the %s stage has tasks 0..%lu", (long)opt.task, stage_name(stage), (unsigned long)(tasks - 1));
  std::vector<uint64_t> todo;
  for (uint64_t t = 0; t < tasks; ++t) {
    if (opt.task >= 0 && t != static_cast<uint64_t>(opt.task)) continue;
    if (task_done(run, task_name(stage, run, t))) {
      ZLM_LOG_INF("%s: done already (marker %s/done/%s)", task_name(stage, run, t).c_str(), opt.work.c_str(), task_name(stage, run, t).c_str());
      continue;
    }
    todo.push_back(t);
  }
  fs::create_directories(opt.work + "/done");
  SignatureCounts sig;
  CandidateCounts cand;
  ClusterCounts clu;
  FilterCounts fil;
  std::mutex mu;
  std::optional<TextSource> texts;
  if (stage == Stage::Candidates) texts.emplace(run);
  auto one = [&](uint64_t t) {
    const double t1 = log_elapsed_sec();
    std::string summary;
    switch (stage) {
      case Stage::Signatures: {
        const SignatureCounts c = signatures_task(run, static_cast<uint32_t>(t));
        summary = strprintf("%lu documents, %lu malformed lines, %lu spills", (unsigned long)c.docs, (unsigned long)c.bad, (unsigned long)c.spills);
        std::lock_guard<std::mutex> lock(mu);
        sig.docs += c.docs, sig.bad += c.bad, sig.bytes += c.bytes, sig.spills += c.spills;
        break;
      }
      case Stage::Candidates: {
        const CandidateCounts c = candidates_task(run, static_cast<uint32_t>(t / opt.settings.ranges), static_cast<uint32_t>(t % opt.settings.ranges), *texts);
        summary = strprintf("%lu records, %lu buckets, %lu pairs compared, %lu similar", (unsigned long)c.records, (unsigned long)c.buckets,
                            (unsigned long)c.compared, (unsigned long)c.similar);
        std::lock_guard<std::mutex> lock(mu);
        cand.records += c.records, cand.buckets += c.buckets, cand.compared += c.compared, cand.similar += c.similar;
        break;
      }
      case Stage::Cluster: {
        clu = cluster_task(run);
        summary = strprintf("%lu pairs, %lu groups of %lu ids, %lu documents to remove", (unsigned long)clu.pairs, (unsigned long)clu.groups,
                            (unsigned long)clu.grouped_ids, (unsigned long)clu.removed);
        break;
      }
      case Stage::Filter: {
        const FilterCounts c = filter_task(run, static_cast<uint32_t>(t));
        summary = strprintf("%lu lines: %lu kept, %lu removed, %lu malformed", (unsigned long)c.lines, (unsigned long)c.kept,
                            (unsigned long)c.removed, (unsigned long)c.bad);
        std::lock_guard<std::mutex> lock(mu);
        fil.lines += c.lines, fil.kept += c.kept, fil.removed += c.removed, fil.bad += c.bad;
        break;
      }
    }
    write_file_atomic(opt.work + "/done/" + task_name(stage, run, t), run.settings_text + "\n");
    ZLM_LOG_INF("%s: %s (%.1f s)", task_name(stage, run, t).c_str(), summary.c_str(), log_elapsed_sec() - t1);
  };
  // Up to --local-tasks tasks at once, each on its own thread (and --threads within).
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::vector<std::thread> workers;
  const size_t width = std::min<size_t>(std::max(opt.local_tasks, 1), todo.size());
  for (size_t w = 0; w < width; ++w)
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < todo.size();) {
        try {
          one(todo[i]);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!failure) failure = std::current_exception();
          next = todo.size();
        }
      }
    });
  for (auto& w : workers) w.join();
  if (failure) std::rethrow_exception(failure);

  // Keys named after the stage, so that `all` reports every stage.
  auto put = [&](const char* key, auto value) { stats.set(std::string(stage_name(stage)) + "_" + key, value); };
  put("tasks", tasks);
  put("tasks_run", static_cast<uint64_t>(todo.size()));
  switch (stage) {
    case Stage::Signatures:
      put("docs", sig.docs), put("docs_bad", sig.bad), put("text_bytes", sig.bytes), put("spills", sig.spills);
      break;
    case Stage::Candidates:
      put("band_records", cand.records), put("buckets", cand.buckets), put("pairs_compared", cand.compared), put("pairs_similar", cand.similar);
      break;
    case Stage::Cluster:
      put("pairs", clu.pairs), put("pairs_linked", clu.linked), put("groups", clu.groups), put("grouped_ids", clu.grouped_ids);
      put("docs_to_remove", clu.removed);
      break;
    case Stage::Filter:
      put("lines_in", fil.lines), put("lines_kept", fil.kept), put("lines_removed", fil.removed), put("lines_bad", fil.bad);
      break;
  }
  put("elapsed_sec", log_elapsed_sec() - t0);
}

}  // namespace zlm::near_dedup
