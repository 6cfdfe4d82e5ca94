#include "tools/near_dedup/near_dedup.h"

#define XXH_INLINE_ALL
#include <tbb/parallel_for.h>
#include <xxhash.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <atomic>
#include <exception>
#include <filesystem>
#include <functional>
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
  double similarity;     // kUnverified in a candidates file: the verify stage computes it
};
static_assert(sizeof(PairRecord) == 24);
constexpr double kUnverified = -1.0;

uint32_t rows_per_band(const Settings& s) { return s.num_seeds / s.num_bands; }
uint32_t band_record_bytes(const Settings& s) { return 16 + 4 * rows_per_band(s); }
uint32_t shard_of(uint64_t pos) { return static_cast<uint32_t>(pos >> kShardBits); }
uint64_t index_of(uint64_t pos) { return pos & (kMaxShardDocs - 1); }

// Everything that makes the stages' files: recorded in each file's header and marker.
std::string settings_line(const Settings& s, const std::vector<std::string>& shards) {
  std::string line = strprintf("bands=%u seeds=%u ngram=%u seed=%lu jaccard=%s>%.17g iter=%d group>=%.17g key=%s text=%s ranges=%u verify=%u shards=%zu",
                               s.num_bands, s.num_seeds, s.char_ngram, (unsigned long)s.seed, s.jaccard.c_str(), s.jaccard_threshold,
                               s.heuristic_iter, s.group_threshold, s.key.c_str(), s.text_key.c_str(), s.ranges, s.verify_tasks, shards.size());
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
    rule = lsh_rule(s.num_seeds, s.num_bands, s.jaccard_threshold, s.heuristic_iter, s.jaccard);
    if (s.ranges == 0) throw Error(ErrorKind::Usage, "--ranges must be at least 1");
    if (s.verify_tasks == 0) throw Error(ErrorKind::Usage, "--verify-tasks must be at least 1");
    if (o.work.empty()) throw Error(ErrorKind::Usage, "give --work DIR (the stages' files)");
    if (shards.size() >= (size_t{1} << (64 - kShardBits))) throw Error(ErrorKind::Usage, "more than 2^24 shards");
    settings_text = settings_line(s, shards);
    std::string all = settings_text;
    for (const auto& f : shards) all += "\n" + f;
    settings = XXH64(all.data(), all.size(), 0);
    params = {.num_seeds = s.num_seeds, .char_ngram = s.char_ngram, .seed = s.seed};
  }

  uint64_t shard_subject(uint32_t s) const {
    std::string key = shards[s] + "#" + std::to_string(s);
    return XXH64(key.data(), key.size(), 1);
  }
  // Per-shard names are numbered at one width for the run's shard count (file_number), so that they sort as the shards do.
  std::string shard_number(uint32_t s) const { return file_number(s, shards.size()); }
  // What a task may hold in memory (--memory-mb), in bytes; 4 KiB at least.
  uint64_t memory_bytes() const { return std::max<uint64_t>(static_cast<uint64_t>(opt.memory_mb * 1048576.0), 4096); }
  std::string sig_path(uint32_t s, const std::string& suffix) const {
    return strprintf("%s/signatures/%s.%s", opt.work.c_str(), shard_number(s).c_str(), suffix.c_str());
  }
  std::string band_path(uint32_t s, uint32_t b) const { return sig_path(s, strprintf("band-%03u", b)); }
  std::string candidates_path(uint32_t b, uint32_t r) const { return strprintf("%s/candidates/%03u-%04u.cand", opt.work.c_str(), b, r); }
  std::string pairs_path(uint32_t v) const { return strprintf("%s/pairs/%04u.pairs", opt.work.c_str(), v); }
  std::string removals_path(uint32_t s) const { return strprintf("%s/removals/%s.removals", opt.work.c_str(), shard_number(s).c_str()); }
  std::string part_name(uint32_t s) const { return "part-" + shard_number(s) + ".jsonl"; }

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

// Band runs (each sorted by hash, then position), each read over [begin, end),
// merged in (hash, position) order: with a shard's runs the global order, as
// positions order shards, then documents.
class RunMerge {
 public:
  RunMerge(std::vector<std::unique_ptr<StageFileReader>> runs, std::vector<uint64_t> begin, std::vector<uint64_t> end)
      : runs_(std::move(runs)), at_(std::move(begin)), end_(std::move(end)) {
    for (size_t r = 0; r < runs_.size(); ++r) push(r);
  }
  // The next record (hash, position, the record's bytes); false at the end.
  bool next(uint64_t* hash, uint64_t* pos, const uint8_t** record) {
    if (heap_.empty()) return false;
    const auto [h, p, r] = heap_.top();
    heap_.pop();
    *hash = h;
    *pos = p;
    *record = runs_[r]->record(at_[r]++);
    push(r);
    return true;
  }

 private:
  void push(size_t r) {
    if (at_[r] < end_[r]) heap_.emplace(runs_[r]->get<uint64_t>(at_[r]), load_unaligned<uint64_t>(runs_[r]->record(at_[r]) + 8), r);
  }
  using Head = std::tuple<uint64_t, uint64_t, size_t>;  // hash, position, run
  std::vector<std::unique_ptr<StageFileReader>> runs_;
  std::vector<uint64_t> at_, end_;
  std::priority_queue<Head, std::vector<Head>, std::greater<>> heap_;
};

// Whole sorted runs merged into `out`.
void merge_runs(std::vector<std::unique_ptr<StageFileReader>> runs, StageFileWriter& out) {
  std::vector<uint64_t> end;
  for (const auto& r : runs) end.push_back(r->count());
  const std::vector<uint64_t> begin(runs.size(), 0);
  RunMerge merge(std::move(runs), begin, std::move(end));
  uint64_t hash = 0, pos = 0;
  const uint8_t* record = nullptr;
  while (merge.next(&hash, &pos, &record)) out.add(record);
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

// One shard's signature files: the document table and text store as documents
// come, the band records in memory up to --memory-mb, then spilled as sorted
// runs that finish() merges into each band's run.
class ShardSignatureWriter {
 public:
  ShardSignatureWriter(const Run& run, uint32_t s)
      : run_(run), s_(s), st_(run.opt.settings), rows_(rows_per_band(st_)), rb_(band_record_bytes(st_)), subject_(run.shard_subject(s)),
        docs_(run.sig_path(s, "docs"), StageFileKind::Docs, sizeof(DocRecord), run.settings, subject_),
        texts_(run.sig_path(s, "texts"), StageFileKind::Texts, 1, run.settings, subject_), bands_(st_.num_bands),
        budget_(run.memory_bytes()), record_(rb_) {}

  void add(const FpDoc& d) {
    if (counts.docs >= kMaxShardDocs) throw Error(ErrorKind::Usage, "%s: more than 2^40 documents in one shard: split it", run_.shards[s_].c_str());
    const uint64_t pos = (uint64_t{s_} << kShardBits) | counts.docs++;
    const XXH128_hash_t id = XXH3_128bits(d.id.data(), d.id.size());
    const DocRecord rec{id.low64, id.high64, counts.bytes, d.text.size(), d.line};
    docs_.add(&rec);
    texts_.add_bytes(d.text.data(), d.text.size());
    counts.bytes += d.text.size();
    for (uint32_t b = 0; b < st_.num_bands; ++b) {
      const uint32_t* band_rows = d.sig.data() + static_cast<size_t>(b) * rows_;
      const uint64_t h = XXH3_64bits_withSeed(band_rows, rows_ * sizeof(uint32_t), b);  // find_duplicates' band hash
      std::memcpy(record_.data(), &h, 8);
      std::memcpy(record_.data() + 8, &pos, 8);
      std::memcpy(record_.data() + 16, band_rows, 4 * rows_);
      bands_[b].bytes.insert(bands_[b].bytes.end(), record_.begin(), record_.end());
    }
    buffered_ += uint64_t{rb_} * st_.num_bands;
    if (buffered_ >= budget_) spill();
  }

  void finish() {
    if (counts.spills > 0) spill();
    for (uint32_t b = 0; b < st_.num_bands; ++b) {
      StageFileWriter out(run_.band_path(s_, b), StageFileKind::BandRun, rb_, run_.settings, subject_);
      if (counts.spills == 0) {
        bands_[b].sort_into(out, rb_);
        bands_[b].bytes = {};
      } else {
        std::vector<std::unique_ptr<StageFileReader>> runs;
        for (uint64_t k = 0; k < counts.spills; ++k)
          runs.push_back(std::make_unique<StageFileReader>(spill_files_[k * st_.num_bands + b], StageFileKind::BandRun, rb_, run_.settings,
                                                           subject_, true));
        merge_runs(std::move(runs), out);
      }
      out.commit();
    }
    for (const auto& f : spill_files_) fs::remove(f);
    docs_.commit();
    texts_.commit();
  }

  SignatureCounts counts;

 private:
  void spill() {
    for (uint32_t b = 0; b < st_.num_bands; ++b) {
      const std::string path = strprintf("%s.spill-%03lu", run_.band_path(s_, b).c_str(), (unsigned long)counts.spills);
      StageFileWriter w(path, StageFileKind::BandRun, rb_, run_.settings, subject_);
      bands_[b].sort_into(w, rb_);
      w.commit();
      spill_files_.push_back(path);
      bands_[b].bytes = {};
    }
    ++counts.spills;
    buffered_ = 0;
  }

  const Run& run_;
  const uint32_t s_;
  const Settings& st_;
  const uint32_t rows_, rb_;
  const uint64_t subject_;
  StageFileWriter docs_, texts_;
  std::vector<BandBuffer> bands_;
  const uint64_t budget_;
  uint64_t buffered_ = 0;
  std::vector<uint8_t> record_;
  std::vector<std::string> spill_files_;
};

// A batch of lines to their documents' signatures (the pipeline's parallel stage).
void fingerprint_batch(const Run& run, uint32_t s, const MinHasher& hasher, const LineBatch& b, FpBatch& r) {
  thread_local JsonFieldExtractor extractor;
  thread_local std::vector<std::string> values;
  thread_local MinHashScratch scratch;
  const std::vector<std::string> keys{run.opt.settings.text_key, run.opt.settings.key};
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
    d.sig.resize(hasher.num_seeds());
    hasher.signature(values[0], d.sig.data(), &scratch);
    d.text = std::move(values[0]);
    d.id = std::move(values[1]);
  }
}

SignatureCounts signatures_task(const Run& run, uint32_t s) {
  fs::create_directories(run.opt.work + "/signatures");
  ShardSignatureWriter out(run, s);
  const MinHasher hasher(run.params);
  JsonlBatchReader reader({run.shards[s]});
  BadRecords bad(run.opt.max_bad_records);
  ThreadArena arena(run.opt.threads);
  run_ordered_pipeline<LineBatch, FpBatch>(
      arena, pipeline_in_flight(arena.threads()), [&](LineBatch& b) { return reader.next_batch(b); },
      [&](LineBatch& b, FpBatch& r) { fingerprint_batch(run, s, hasher, b, r); },
      [&](FpBatch& r) {
        for (const auto& [where, what] : r.bad) bad.add(where, what);
        out.counts.bad += r.bad.size();
        for (const FpDoc& d : r.docs) out.add(d);
      });
  bad.fail_if_all_bad(out.counts.docs + out.counts.bad, run.shards[s]);
  out.finish();
  return out.counts;
}

// ---------------------------------------------------------------- candidates

struct ShardTexts {
  std::unique_ptr<StageFileReader> docs, texts;
  int fd = -1;  // the text store, read with pread: the texts a task reads do not stay in its memory
  ShardTexts() = default;
  ShardTexts(const ShardTexts&) = delete;
  ShardTexts& operator=(const ShardTexts&) = delete;
  ~ShardTexts() {
    if (fd >= 0) ::close(fd);
  }
};

// Lazily opened document tables and text stores (length-checked; the cluster
// stage verifies the tables' checksums). Thread-safe.
class TextSource {
 public:
  explicit TextSource(const Run& run) : run_(run), shards_(run.shards.size()) {}
  std::string text(uint64_t pos) {
    ShardTexts& st = open(shard_of(pos));
    const uint64_t j = index_of(pos);
    if (j >= st.docs->count())
      throw Error(ErrorKind::Format, "%s: document %lu is past its %lu records (a band run of another run?)", st.docs->path().c_str(),
                  (unsigned long)j, (unsigned long)st.docs->count());
    const DocRecord d = st.docs->get<DocRecord>(j);
    if (d.text_offset > st.texts->count() || d.text_bytes > st.texts->count() - d.text_offset)
      throw Error(ErrorKind::Format, "%s: document %lu's text lies outside %s", st.docs->path().c_str(), (unsigned long)j,
                  st.texts->path().c_str());
    std::string text(d.text_bytes, '\0');
    for (uint64_t done = 0; done < d.text_bytes;) {
      const ssize_t n = ::pread(st.fd, text.data() + done, d.text_bytes - done, static_cast<off_t>(kStageFileHeaderBytes + d.text_offset + done));
      if (n <= 0) throw Error(ErrorKind::Io, "cannot read %s: %s", st.texts->path().c_str(), n == 0 ? "unexpected end" : std::strerror(errno));
      done += static_cast<uint64_t>(n);
    }
    return text;
  }

 private:
  ShardTexts& open(uint32_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    ShardTexts& st = shards_.at(s);
    if (!st.docs) {
      st.docs = std::make_unique<StageFileReader>(run_.docs(s, false));
      st.texts = std::make_unique<StageFileReader>(run_.sig_path(s, "texts"), StageFileKind::Texts, 1, run_.settings, run_.shard_subject(s), false);
      st.fd = ::open(st.texts->path().c_str(), O_RDONLY | O_CLOEXEC);
      if (st.fd < 0) throw Error(ErrorKind::Io, "cannot open %s: %s", st.texts->path().c_str(), std::strerror(errno));
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
  uint64_t records = 0, buckets = 0, candidates = 0, compared = 0, similar = 0;
};

// Every shard's run of one band over hash range r, merged in global order.
RunMerge band_merge(const Run& run, uint32_t band, uint32_t r) {
  const uint32_t rb = band_record_bytes(run.opt.settings);
  std::vector<std::unique_ptr<StageFileReader>> runs;
  for (uint32_t s = 0; s < run.shards.size(); ++s)  // range 0's task verifies the runs' checksums: each file once
    runs.push_back(std::make_unique<StageFileReader>(run.band_path(s, band), StageFileKind::BandRun, rb, run.settings, run.shard_subject(s), r == 0));
  const auto [lo, hi] = hash_range(runs, r, run.opt.settings.ranges);
  std::vector<uint64_t> begin, end;
  for (const auto& f : runs) {
    begin.push_back(lower_bound_hash(*f, lo));
    end.push_back(hi ? lower_bound_hash(*f, *hi) : f->count());
  }
  return RunMerge(std::move(runs), std::move(begin), std::move(end));
}

// Buckets verified in batches on --threads threads, their similar pairs written in bucket order.
class BucketVerifier {
 public:
  BucketVerifier(const Run& run, TextSource& texts, StageFileWriter& out, CandidateCounts& counts)
      : run_(run), texts_(texts), out_(out), counts_(counts), arena_(run.opt.threads) {}
  void add(Bucket b) {
    ++counts_.buckets;
    if (run_.opt.settings.heuristic_iter == 1) {  // one round: the first document with each other one, verified by the verify stage
      for (size_t k = 1; k < b.positions.size(); ++k) {
        const PairRecord p{b.positions[0], b.positions[k], kUnverified};
        out_.add(&p);
      }
      counts_.candidates += b.positions.size() - 1;
      return;
    }
    batch_.push_back(std::move(b));
    if (batch_.size() >= 4096) flush();
  }
  void flush() {
    std::vector<std::vector<PairRecord>> found(batch_.size());
    std::vector<uint64_t> compared(batch_.size(), 0);
    arena_.execute([&] { tbb::parallel_for(size_t{0}, batch_.size(), [&](size_t i) { verify(batch_[i].positions, found[i], compared[i]); }); });
    for (size_t i = 0; i < batch_.size(); ++i) {
      for (const PairRecord& p : found[i]) out_.add(&p);
      counts_.similar += found[i].size();
      counts_.compared += compared[i];
    }
    batch_.clear();
  }

 private:
  void verify(const std::vector<uint64_t>& pos, std::vector<PairRecord>& found, uint64_t& compared) {
    std::vector<std::optional<std::vector<uint64_t>>> sets(pos.size());
    auto shingles_of = [&](uint32_t k) -> const std::vector<uint64_t>& {
      if (!sets[k]) sets[k] = shingle_set(texts_.text(pos[k]), run_.opt.settings.char_ngram);
      return *sets[k];
    };
    std::vector<uint32_t> members(pos.size());
    for (uint32_t k = 0; k < members.size(); ++k) members[k] = k;
    verify_bucket(members, run_.rule, shingles_of, {}, [&](uint32_t m, uint32_t o, double sim, bool) { found.push_back({pos[m], pos[o], sim}); },
                  [&](uint32_t, uint32_t, double) { ++compared; });
  }
  const Run& run_;
  TextSource& texts_;
  StageFileWriter& out_;
  CandidateCounts& counts_;
  ThreadArena arena_;
  std::vector<Bucket> batch_;
};

CandidateCounts candidates_task(const Run& run, uint32_t band, uint32_t r, TextSource& texts) {
  const uint32_t rows = rows_per_band(run.opt.settings);
  RunMerge merge = band_merge(run, band, r);
  fs::create_directories(run.opt.work + "/candidates");
  StageFileWriter out(run.candidates_path(band, r), StageFileKind::Candidates, sizeof(PairRecord), run.settings,
                      band * uint64_t{run.opt.settings.ranges} + r);
  CandidateCounts counts;
  BucketVerifier verifier(run, texts, out, counts);
  // Equal band hashes: a bucket of the documents whose rows equal those of the
  // first one (a 64-bit collision cannot merge two buckets; as find_duplicates).
  std::vector<std::pair<uint64_t, const uint8_t*>> group;
  auto close_group = [&] {
    Bucket b;
    for (const auto& [p, rec] : group)
      if (std::memcmp(rec + 16, group[0].second + 16, 4 * rows) == 0) b.positions.push_back(p);
    if (b.positions.size() >= 2) verifier.add(std::move(b));
    group.clear();
  };
  uint64_t h = 0, p = 0, current = 0;
  const uint8_t* rec = nullptr;
  while (merge.next(&h, &p, &rec)) {
    if (!group.empty() && h != current) close_group();
    current = h;
    group.emplace_back(p, rec);
    ++counts.records;
  }
  if (!group.empty()) close_group();
  verifier.flush();
  out.commit();
  return counts;
}

// ---------------------------------------------------------------- verify

struct VerifyCounts {
  uint64_t candidates = 0, distinct = 0, compared = 0, similar = 0, sweeps = 0;
};

uint64_t pair_hash(const PairRecord& p) {
  const uint64_t key[2] = {p.main, p.other};
  return XXH3_64bits(key, sizeof key);
}
uint32_t verify_part(const PairRecord& p, uint32_t parts) { return static_cast<uint32_t>(pair_hash(p) % parts); }

// Every candidates file's pairs of verify part v, in file order; `check`: the files' checksums
// verified too (part 0's task does, on its first read: each file once).
void for_each_candidate(const Run& run, uint32_t v, bool check, const std::function<void(const PairRecord&)>& fn) {
  const Settings& st = run.opt.settings;
  for (uint32_t b = 0; b < st.num_bands; ++b)
    for (uint32_t r = 0; r < st.ranges; ++r) {
      StageFileReader in(run.candidates_path(b, r), StageFileKind::Candidates, sizeof(PairRecord), run.settings, b * uint64_t{st.ranges} + r,
                         check);
      for (uint64_t i = 0; i < in.count(); ++i) {
        const PairRecord p = in.get<PairRecord>(i);
        if (verify_part(p, st.verify_tasks) == v) fn(p);
      }
    }
}

// Jaccard of each unverified pair (sorted by main document): runs of one main document in
// parallel, its shingle set computed once per run. Returns the pairs compared.
uint64_t verify_pairs(const Run& run, std::vector<PairRecord>& pairs, TextSource& texts) {
  const Settings& st = run.opt.settings;
  std::vector<size_t> runs{0};
  for (size_t i = 1; i < pairs.size(); ++i)
    if (pairs[i].main != pairs[i - 1].main) runs.push_back(i);
  runs.push_back(pairs.size());
  std::atomic<uint64_t> compared{0};
  ThreadArena arena(run.opt.threads);
  arena.execute([&] {
    tbb::parallel_for(size_t{0}, runs.size() - 1, [&](size_t k) {
      std::optional<std::vector<uint64_t>> main_set;
      for (size_t i = runs[k]; i < runs[k + 1]; ++i) {
        PairRecord& p = pairs[i];
        if (p.similarity != kUnverified) continue;
        if (!main_set) main_set = shingle_set(texts.text(p.main), st.char_ngram);
        p.similarity = jaccard(*main_set, shingle_set(texts.text(p.other), st.char_ngram), run.rule.mode);
        ++compared;
      }
    });
  });
  return compared;
}

// Part v of every candidates file's pairs: each distinct pair once (sorted by
// main, then other), its Jaccard computed unless a candidates task verified it
// (--heuristic-iter other than 1); the similar pairs out. A part of more pairs
// than --memory-mb holds is taken in sweeps over the candidates files, each
// holding the pairs of one slice of the pair hashes (about --memory-mb, as the
// hashes spread them).
VerifyCounts verify_task(const Run& run, uint32_t v, TextSource& texts) {
  const Settings& st = run.opt.settings;
  VerifyCounts counts;
  fs::create_directories(run.opt.work + "/pairs");
  StageFileWriter out(run.pairs_path(v), StageFileKind::Pairs, sizeof(PairRecord), run.settings, v);
  auto sweep = [&](std::vector<PairRecord>& pairs) {
    std::sort(pairs.begin(), pairs.end(), [](const PairRecord& a, const PairRecord& b) { return a.main != b.main ? a.main < b.main : a.other < b.other; });
    pairs.erase(std::unique(pairs.begin(), pairs.end(), [](const PairRecord& a, const PairRecord& b) { return a.main == b.main && a.other == b.other; }),
                pairs.end());
    counts.distinct += pairs.size();
    counts.compared += verify_pairs(run, pairs, texts);
    for (const PairRecord& p : pairs)
      if (p.similarity > st.jaccard_threshold) {
        out.add(&p);
        ++counts.similar;
      }
    ++counts.sweeps;
  };
  const uint64_t budget = run.memory_bytes() / sizeof(PairRecord);
  std::vector<PairRecord> pairs;
  bool fits = true;
  for_each_candidate(run, v, v == 0, [&](const PairRecord& p) {
    ++counts.candidates;
    if (fits && pairs.size() < budget) pairs.push_back(p);
    else fits = false;
  });
  if (fits) {
    sweep(pairs);
  } else {
    std::vector<PairRecord>().swap(pairs);
    const uint64_t sweeps = (counts.candidates + budget - 1) / budget;
    for (uint64_t k = 0; k < sweeps; ++k) {
      pairs.clear();
      for_each_candidate(run, v, false, [&](const PairRecord& p) {
        if ((pair_hash(p) / st.verify_tasks) % sweeps == k) pairs.push_back(p);
      });
      sweep(pairs);
    }
  }
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
  for (uint32_t v = 0; v < st.verify_tasks; ++v) {
    StageFileReader pairs(run.pairs_path(v), StageFileKind::Pairs, sizeof(PairRecord), run.settings, v, true);
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
    case Stage::Signatures: return "signatures-" + file_number(t, run.shards.size());
    case Stage::Candidates:
      return strprintf("candidates-%03lu-%04lu", (unsigned long)(t / run.opt.settings.ranges), (unsigned long)(t % run.opt.settings.ranges));
    case Stage::Verify: return strprintf("verify-%04lu", (unsigned long)t);
    case Stage::Cluster: return "cluster";
    case Stage::Filter: return "filter-" + file_number(t, run.shards.size());
  }
  return "?";
}

// A task's marker, written after its outputs: its presence means done.
std::string marker_text(const Run& run) { return strprintf("%s fingerprint=%016lx\n", run.settings_text.c_str(), (unsigned long)run.settings); }

bool task_done(const Run& run, const std::string& name) {
  const std::string path = run.opt.work + "/done/" + name;
  if (!fs::exists(path)) return false;
  const std::string content = read_file(path);
  if (content != marker_text(run))
    throw Error(ErrorKind::Usage, "%s was done with other settings (%s) ---> HINT: use the flags of that run, or a fresh --work directory",
                path.c_str(), content.substr(0, content.find('\n')).c_str());
  return true;
}

// What a task counted (summed over the stage's tasks into the stats) and its log line.
struct TaskReport {
  std::vector<std::pair<std::string, uint64_t>> counts;
  std::string summary;
};

TaskReport run_task(Stage stage, const Run& run, uint64_t t, TextSource* texts) {
  switch (stage) {
    case Stage::Signatures: {
      const SignatureCounts c = signatures_task(run, static_cast<uint32_t>(t));
      return {{{"docs", c.docs}, {"docs_bad", c.bad}, {"text_bytes", c.bytes}, {"spills", c.spills}},
              strprintf("%lu documents, %lu malformed lines, %lu spills", (unsigned long)c.docs, (unsigned long)c.bad, (unsigned long)c.spills)};
    }
    case Stage::Candidates: {
      const uint32_t ranges = run.opt.settings.ranges;
      const CandidateCounts c = candidates_task(run, static_cast<uint32_t>(t / ranges), static_cast<uint32_t>(t % ranges), *texts);
      return {{{"band_records", c.records}, {"buckets", c.buckets}, {"candidate_pairs", c.candidates}, {"pairs_compared", c.compared},
               {"pairs_similar", c.similar}},
              strprintf("%lu records, %lu buckets, %lu candidate pairs (%lu compared here, %lu similar)", (unsigned long)c.records,
                        (unsigned long)c.buckets, (unsigned long)c.candidates, (unsigned long)c.compared, (unsigned long)c.similar)};
    }
    case Stage::Verify: {
      const VerifyCounts c = verify_task(run, static_cast<uint32_t>(t), *texts);
      return {{{"candidate_pairs", c.candidates}, {"distinct_pairs", c.distinct}, {"pairs_compared", c.compared}, {"pairs_similar", c.similar},
               {"sweeps", c.sweeps}},
              strprintf("%lu candidate pairs, %lu distinct, %lu compared, %lu similar (%lu sweeps)", (unsigned long)c.candidates,
                        (unsigned long)c.distinct, (unsigned long)c.compared, (unsigned long)c.similar, (unsigned long)c.sweeps)};
    }
    case Stage::Cluster: {
      const ClusterCounts c = cluster_task(run);
      return {{{"pairs", c.pairs}, {"pairs_linked", c.linked}, {"groups", c.groups}, {"grouped_ids", c.grouped_ids}, {"docs_to_remove", c.removed}},
              strprintf("%lu pairs, %lu groups of %lu ids, %lu documents to remove", (unsigned long)c.pairs, (unsigned long)c.groups,
                        (unsigned long)c.grouped_ids, (unsigned long)c.removed)};
    }
    case Stage::Filter: {
      const FilterCounts c = filter_task(run, static_cast<uint32_t>(t));
      return {{{"lines_in", c.lines}, {"lines_kept", c.kept}, {"lines_removed", c.removed}, {"lines_bad", c.bad}},
              strprintf("%lu lines: %lu kept, %lu removed, %lu malformed", (unsigned long)c.lines, (unsigned long)c.kept,
                        (unsigned long)c.removed, (unsigned long)c.bad)};
    }
  }
  return {};
}

// fn(t) for every t of `todo`, up to `width` at once, each on its own thread
// (and --threads within); the first failure stops the others' next tasks and is rethrown.
void for_each_task(const std::vector<uint64_t>& todo, int width, const std::function<void(uint64_t)>& fn) {
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex mu;
  std::vector<std::thread> workers;
  for (size_t w = 0; w < std::min<size_t>(std::max(width, 1), todo.size()); ++w)
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < todo.size();) {
        try {
          fn(todo[i]);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!failure) failure = std::current_exception();
          next = todo.size();
        }
      }
    });
  for (auto& w : workers) w.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

Stage parse_stage(const std::string& name) {
  if (name == "signatures") return Stage::Signatures;
  if (name == "candidates") return Stage::Candidates;
  if (name == "verify") return Stage::Verify;
  if (name == "cluster") return Stage::Cluster;
  if (name == "filter") return Stage::Filter;
  throw Error(ErrorKind::Usage, "no stage '%s' (signatures, candidates, verify, cluster, filter)", name.c_str());
}

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::Signatures: return "signatures";
    case Stage::Candidates: return "candidates";
    case Stage::Verify: return "verify";
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
    case Stage::Verify: return options.settings.verify_tasks;
    case Stage::Cluster: return 1;
  }
  return 0;
}

void run_stage(Stage stage, const Options& opt, const CommonFlags& common, Stats& stats) {
  const double t0 = log_elapsed_sec();
  const Run run(opt, common);
  if (stage == Stage::Filter && opt.output_dir.empty()) throw Error(ErrorKind::Usage, "the filter stage needs --output-dir");
  if (stage == Stage::Filter) check_distinct_paths({{"--output-dir", opt.output_dir}, {"--removed-dir", opt.removed_dir}});
  const uint64_t tasks = task_count(stage, opt);
  if (opt.task >= static_cast<int64_t>(tasks))
    throw Error(ErrorKind::Usage, "--task %ld: the %s stage has tasks 0..%lu", (long)opt.task, stage_name(stage), (unsigned long)(tasks - 1));
  std::vector<uint64_t> todo;
  for (uint64_t t = 0; t < tasks; ++t) {
    if (opt.task >= 0 && t != static_cast<uint64_t>(opt.task)) continue;
    const std::string name = task_name(stage, run, t);
    // A filter task is done for this --output-dir only when its part is there.
    const bool part_missing = stage == Stage::Filter && !fs::exists(opt.output_dir + "/" + run.part_name(static_cast<uint32_t>(t)));
    if (!part_missing && task_done(run, name))
      ZLM_LOG_INF("%s: done already (marker %s/done/%s)", name.c_str(), opt.work.c_str(), name.c_str());
    else
      todo.push_back(t);
  }
  fs::create_directories(opt.work + "/done");
  std::optional<TextSource> texts;
  if (stage == Stage::Candidates || stage == Stage::Verify) texts.emplace(run);
  std::vector<std::pair<std::string, uint64_t>> totals;  // every task reports the same counts in the same order
  std::mutex mu;
  for_each_task(todo, opt.local_tasks, [&](uint64_t t) {
    const double t1 = log_elapsed_sec();
    const TaskReport report = run_task(stage, run, t, texts ? &*texts : nullptr);
    write_file_atomic(opt.work + "/done/" + task_name(stage, run, t), marker_text(run));
    ZLM_LOG_INF("%s: %s (%.1f s)", task_name(stage, run, t).c_str(), report.summary.c_str(), log_elapsed_sec() - t1);
    std::lock_guard<std::mutex> lock(mu);
    if (totals.empty())
      for (const auto& [k, v] : report.counts) totals.emplace_back(k, 0);
    for (size_t i = 0; i < totals.size(); ++i) totals[i].second += report.counts[i].second;
  });
  // Keys named after the stage, so that `all` reports every stage.
  const std::string prefix = std::string(stage_name(stage)) + "_";
  stats.set(prefix + "tasks", tasks);
  stats.set(prefix + "tasks_run", static_cast<uint64_t>(todo.size()));
  for (const auto& [k, v] : totals) stats.set(prefix + k, v);
  stats.set(prefix + "elapsed_sec", log_elapsed_sec() - t0);
}

}  // namespace zlm::near_dedup
