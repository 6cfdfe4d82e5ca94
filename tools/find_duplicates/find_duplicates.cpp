#include "tools/find_duplicates/find_duplicates.h"

#define XXH_INLINE_ALL
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>
#include <xxhash.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <unordered_map>

#include "common/core/output_file.h"
#include "common/core/bad_records.h"
#include "common/core/error.h"
#include "common/io/input_files.h"
#include "common/core/json_writer.h"
#include "common/io/jsonl.h"
#include "common/core/jsonl_writer.h"
#include "common/core/log.h"
#include "common/dedup/lsh.h"
#include "common/dedup/minhash.h"
#include "common/io/pipeline.h"
#include "common/core/progress.h"
#include "tools/find_duplicates/signature_file.h"

namespace zlm::find_duplicates {

namespace {

constexpr uint32_t kLoaded = 0xFFFFFFFF;

// Where a document comes from: a loaded fingerprint file, or a line of an input.
struct DocSource {
  uint32_t input;  // index into the input specs, or kLoaded
  uint32_t file;   // file index within the spec / the loaded file index
  uint64_t line;   // line number / document index within the loaded file
};

struct InputSpec {
  std::vector<std::string> files;
  std::string key;
};

struct Corpus {
  std::vector<std::string> ids;
  std::vector<uint32_t> sigs;  // num_docs * K
  std::vector<DocSource> sources;
  std::vector<std::unique_ptr<formats::SignatureFileReader>> loaded;
};

struct FpResult {
  std::vector<uint32_t> sigs;
  std::vector<std::string> ids;
  std::vector<DocSource> sources;
  std::vector<std::pair<std::string, std::string>> bad;  // ("file:line", "reason: detail")
};

struct FpState {
  JsonFieldExtractor extractor;
  std::vector<std::string> values;
  MinHashScratch scratch;
  std::string detail;
};

// Streams the lines of one input spec; calls fn(doc_source, text, id) for good
// records in order, and bad(file:line message) for the others.
class InputScanner {
 public:
  InputScanner(const std::vector<InputSpec>& specs, const std::string& text_key, ThreadArena& arena)
      : specs_(specs), text_key_(text_key), arena_(arena) {}

  // Parallel fingerprinting of every input into `corpus`.
  void fingerprint(const MinHasher& hasher, Corpus& corpus, Progress& progress, BadRecords& bad) {
    const uint32_t K = hasher.num_seeds();
    tbb::enumerable_thread_specific<std::unique_ptr<FpState>> states;
    for (uint32_t s = 0; s < specs_.size(); ++s) {
      const InputSpec& spec = specs_[s];
      ZLM_LOG_INF(" document processing %s with key %s", spec.files.size() == 1 ? spec.files[0].c_str() : "(several files)", spec.key.c_str());
      JsonlBatchReader reader(spec.files);
      std::vector<std::string> keys{text_key_, spec.key};
      run_ordered_pipeline<LineBatch, FpResult>(
          arena_, pipeline_in_flight(arena_.threads()), [&](LineBatch& b) { return reader.next_batch(b); },
          [&](LineBatch& b, FpResult& r) {
            auto& slot = states.local();
            if (!slot) slot = std::make_unique<FpState>();
            FpState& st = *slot;
            r.sigs.clear();
            r.ids.clear();
            r.sources.clear();
            r.bad.clear();
            for (const LineRef& ref : b.lines) {
              RecordStatus status = st.extractor.extract(b.line(ref), b.capacity_after(ref), keys, st.values, &st.detail);
              if (status != RecordStatus::Ok) {
                r.bad.emplace_back(reader.file_name(ref.file_index) + ":" + std::to_string(ref.line_number),
                                   std::string(record_status_name(status)) + ": " + st.detail);
                continue;
              }
              size_t at = r.sigs.size();
              r.sigs.resize(at + K);
              hasher.signature(st.values[0], r.sigs.data() + at, &st.scratch);
              r.ids.push_back(st.values[1]);
              r.sources.push_back({s, ref.file_index, ref.line_number});
            }
          },
          [&](FpResult& r) {
            for (const auto& [where, what] : r.bad) bad.add(where, what);
            corpus.sigs.insert(corpus.sigs.end(), r.sigs.begin(), r.sigs.end());
            for (auto& id : r.ids) corpus.ids.push_back(std::move(id));
            corpus.sources.insert(corpus.sources.end(), r.sources.begin(), r.sources.end());
            progress.add(r.ids.size() + r.bad.size(), 0);
            progress.maybe_report();
          });
    }
  }

  // Second pass: calls fn(doc, text) for every input document (in corpus order)
  // whose index is accepted by want(doc). `first_doc` is the index of the first
  // input document in the corpus.
  template <typename Want, typename Fn>
  void rescan(const Corpus& corpus, uint64_t first_doc, Want&& want, Fn&& fn) {
    uint64_t doc = first_doc;
    JsonFieldExtractor extractor;
    std::vector<std::string> values;
    std::string detail;
    for (uint32_t s = 0; s < specs_.size(); ++s) {
      JsonlBatchReader reader(specs_[s].files);
      LineBatch b;
      std::vector<std::string> keys{text_key_};
      while (reader.next_batch(b)) {
        for (const LineRef& ref : b.lines) {
          if (doc >= corpus.ids.size()) return;
          const DocSource& src = corpus.sources[doc];
          if (src.input != s || src.file != ref.file_index || src.line != ref.line_number) continue;  // a bad record
          if (want(doc)) {
            if (extractor.extract(b.line(ref), b.capacity_after(ref), keys, values, &detail) != RecordStatus::Ok)
              throw Error(ErrorKind::Io, "%s:%lu changed while find_duplicates was running", reader.file_name(ref.file_index).c_str(),
                          (unsigned long)ref.line_number);
            fn(doc, values[0]);
          }
          ++doc;
        }
      }
    }
  }

 private:
  const std::vector<InputSpec>& specs_;
  std::string text_key_;
  ThreadArena& arena_;
};

struct Bucket {
  std::vector<uint32_t> docs;  // ascending = input order
};

// All buckets of one band with at least two documents, ordered by their first document.
std::vector<Bucket> band_buckets(const Corpus& corpus, uint32_t K, uint32_t band, uint32_t rows) {
  const uint64_t n = corpus.ids.size();
  std::vector<std::pair<uint64_t, uint32_t>> records(n);
  tbb::parallel_for(uint64_t{0}, n, [&](uint64_t d) {
    const uint32_t* sig = corpus.sigs.data() + d * K + static_cast<uint64_t>(band) * rows;
    records[d] = {XXH3_64bits_withSeed(sig, rows * sizeof(uint32_t), band), static_cast<uint32_t>(d)};
  });
  tbb::parallel_sort(records.begin(), records.end());
  std::vector<Bucket> buckets;
  for (uint64_t i = 0; i < n;) {
    uint64_t j = i + 1;
    while (j < n && records[j].first == records[i].first) ++j;
    if (j - i >= 2) {
      Bucket b;
      for (uint64_t k = i; k < j; ++k) {
        // Equal band hash: check the rows themselves, so a 64-bit collision cannot merge buckets.
        const uint32_t* a = corpus.sigs.data() + static_cast<uint64_t>(records[i].second) * K + band * rows;
        const uint32_t* c = corpus.sigs.data() + static_cast<uint64_t>(records[k].second) * K + band * rows;
        if (std::equal(a, a + rows, c)) b.docs.push_back(records[k].second);
      }
      if (b.docs.size() >= 2) buckets.push_back(std::move(b));
    }
    i = j;
  }
  std::sort(buckets.begin(), buckets.end(), [](const Bucket& x, const Bucket& y) { return x.docs[0] < y.docs[0]; });
  return buckets;
}

struct Verified {
  uint32_t main;
  std::vector<std::pair<uint32_t, double>> similar;
};

uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(std::min(a, b)) << 32) | std::max(a, b); }

// One bucket verified by common/dedup/lsh.h's rule. Pairs verified in an
// earlier band (`known`) are not computed, nor reported, again; the new ones
// go to `computed`.
std::vector<Verified> verify_one_bucket(const Bucket& bucket, const std::unordered_map<uint32_t, std::string>& texts,
                                        const std::unordered_map<uint64_t, double>& known, const FindDuplicatesOptions& opt,
                                        JaccardMode mode, std::vector<std::pair<uint64_t, double>>& computed) {
  std::vector<Verified> out;
  std::unordered_map<uint32_t, std::vector<uint64_t>> shingles;
  auto set_of = [&](uint32_t d) -> const std::vector<uint64_t>& {
    auto it = shingles.find(d);
    if (it == shingles.end()) it = shingles.emplace(d, shingle_set(texts.at(d), opt.char_ngram)).first;
    return it->second;
  };
  auto seen = [&](uint32_t a, uint32_t b) -> std::optional<double> {
    auto it = known.find(pair_key(a, b));
    return it == known.end() ? std::nullopt : std::optional<double>(it->second);
  };
  auto report = [&](uint32_t main, uint32_t other, double sim, bool fresh) {
    if (out.empty() || out.back().main != main) out.push_back({main, {}});
    if (fresh) out.back().similar.emplace_back(other, sim);
  };
  verify_bucket(bucket.docs, {.threshold = opt.jaccard_threshold, .heuristic_iter = opt.heuristic_iter, .mode = mode}, set_of, seen,
                report, [&](uint32_t a, uint32_t b, double sim) { computed.emplace_back(pair_key(a, b), sim); });
  std::erase_if(out, [](const Verified& v) { return v.similar.empty(); });
  return out;
}

// What the similarity search counts.
struct PairCounts {
  uint64_t buckets = 0, compared = 0, similar = 0, lines = 0;
};

// The input files of each --inputs pair, checked against the outputs.
std::vector<InputSpec> input_specs(const FindDuplicatesOptions& opt, const CommonFlags& common) {
  std::vector<InputSpec> specs;
  for (size_t i = 0; i < opt.inputs.size(); i += 2) specs.push_back({expand_inputs(opt.inputs[i]), opt.inputs[i + 1]});
  std::vector<NamedPath> inputs;
  for (const auto& spec : specs)
    for (const auto& f : spec.files) inputs.push_back({"--inputs", f});
  for (const auto& f : opt.load_fingerprints) inputs.push_back({"--load-fingerprints", f});
  check_distinct_paths({{"--output", opt.output}, {"--save-fingerprints", opt.save_fingerprints}, {"--stats-out", common.stats_out}}, inputs);
  return specs;
}

// Loaded fingerprints first (Megatron loads before fingerprinting new inputs).
void load_fingerprints(const FindDuplicatesOptions& opt, const MinHashParams& params, Corpus& corpus) {
  for (uint32_t f = 0; f < opt.load_fingerprints.size(); ++f) {
    auto reader = std::make_unique<formats::SignatureFileReader>(opt.load_fingerprints[f]);
    reader->check_params(params);
    for (uint64_t i = 0; i < reader->num_docs(); ++i) {
      corpus.ids.emplace_back(reader->id(i));
      auto sig = reader->signature(i);
      corpus.sigs.insert(corpus.sigs.end(), sig.begin(), sig.end());
      corpus.sources.push_back({kLoaded, f, i});
    }
    ZLM_LOG_INF("loaded %lu fingerprints from %s", (unsigned long)reader->num_docs(), opt.load_fingerprints[f].c_str());
    corpus.loaded.push_back(std::move(reader));
  }
}

// An id names one document. A document of the inputs whose id a loaded
// fingerprint file already has would be compared with itself and counted
// twice: an error. Ids repeated within the inputs occur in real data (Megatron's
// own test set has them) and are processed as Megatron does, with a warning.
// Returns how many documents repeat an earlier id.
uint64_t check_repeated_ids(const Corpus& corpus, const std::vector<InputSpec>& specs, const FindDuplicatesOptions& opt) {
  auto where = [&](uint64_t i) {
    const DocSource& src = corpus.sources[i];
    if (src.input == kLoaded) return strprintf("%s (fingerprint %lu)", opt.load_fingerprints[src.file].c_str(), (unsigned long)src.line);
    return strprintf("%s:%lu", specs[src.input].files[src.file].c_str(), (unsigned long)src.line);
  };
  std::unordered_map<std::string_view, uint64_t> first;
  first.reserve(corpus.ids.size());
  uint64_t repeated = 0;
  for (uint64_t i = 0; i < corpus.ids.size(); ++i) {
    auto [it, fresh] = first.emplace(corpus.ids[i], i);
    if (fresh) continue;
    if (corpus.sources[it->second].input == kLoaded && corpus.sources[i].input != kLoaded)
      throw Error(ErrorKind::Usage, "the id '%s' names two documents: %s and %s ---> HINT: --load-fingerprints already holds this "
                  "document: leave its file out of --inputs", corpus.ids[i].c_str(), where(it->second).c_str(), where(i).c_str());
    if (repeated++ == 0)
      ZLM_LOG_WRN("the id '%s' names two documents: %s and %s (ids should be unique; pairs among such documents are reported "
                  "as Megatron reports them)", corpus.ids[i].c_str(), where(it->second).c_str(), where(i).c_str());
  }
  if (repeated > 1) ZLM_LOG_WRN("%lu documents repeat an id of an earlier one", (unsigned long)repeated);
  return repeated;
}

void save_fingerprints(const std::string& path, const MinHashParams& params, const Corpus& corpus, uint64_t first_input_doc,
                       InputScanner& scanner) {
  const uint32_t K = params.num_seeds;
  formats::SignatureFileContent content;
  content.params = params;
  content.num_docs = corpus.ids.size();
  content.signature = [&](uint64_t i) { return std::span<const uint32_t>(corpus.sigs.data() + i * K, K); };
  content.id = [&](uint64_t i) { return std::string_view(corpus.ids[i]); };
  content.for_each_text = [&](const std::function<void(std::string_view)>& sink) {
    for (uint64_t i = 0; i < first_input_doc; ++i) sink(corpus.loaded[corpus.sources[i].file]->text(corpus.sources[i].line));
    scanner.rescan(corpus, first_input_doc, [](uint64_t) { return true; }, [&](uint64_t, const std::string& t) { sink(t); });
  };
  formats::write_signature_file(path, content);
  ZLM_LOG_INF("saved %lu fingerprints to %s", (unsigned long)corpus.ids.size(), path.c_str());
}

// The texts of the candidate documents only: from the loaded files, or a second pass over the inputs.
std::unordered_map<uint32_t, std::string> candidate_texts(const Corpus& corpus, const std::vector<uint8_t>& candidate, uint64_t first_input_doc,
                                                          InputScanner& scanner) {
  std::unordered_map<uint32_t, std::string> texts;
  for (uint64_t d = 0; d < first_input_doc; ++d)
    if (candidate[d]) texts.emplace(static_cast<uint32_t>(d), std::string(corpus.loaded[corpus.sources[d].file]->text(corpus.sources[d].line)));
  scanner.rescan(corpus, first_input_doc, [&](uint64_t d) { return candidate[d] != 0; },
                 [&](uint64_t d, const std::string& t) { texts.emplace(static_cast<uint32_t>(d), t); });
  return texts;
}

// One output line per main document of a bucket round: {"<main id>": [{"<id>": similarity}, ...]}.
void write_verified(JsonlWriter& out, const Corpus& corpus, const Verified& v) {
  std::string list = "[";
  for (size_t k = 0; k < v.similar.size(); ++k) {
    if (k) list += ", ";
    list += JsonObject().add(corpus.ids[v.similar[k].first], v.similar[k].second).str();
  }
  list += "]";
  out.begin_object();
  out.field_raw(corpus.ids[v.main], list);
  out.end_object();
}

// The LSH bands' candidate buckets, each verified by exact Jaccard, band after
// band in order (buckets of a band in parallel), written to --output.
PairCounts find_pairs(const FindDuplicatesOptions& opt, const Corpus& corpus, uint64_t first_input_doc, InputScanner& scanner,
                      ThreadArena& arena, JaccardMode mode) {
  ZLM_LOG_INF("Compute jaccard similarity");
  const uint64_t n = corpus.ids.size();
  const uint32_t K = opt.num_seeds, rows = opt.num_seeds / opt.num_bands;
  PairCounts counts;
  std::vector<std::vector<Bucket>> bands(opt.num_bands);
  std::vector<uint8_t> candidate(n, 0);
  for (uint32_t b = 0; b < opt.num_bands; ++b) {
    arena.execute([&] { bands[b] = band_buckets(corpus, K, b, rows); });
    for (const auto& bucket : bands[b])
      for (uint32_t d : bucket.docs) candidate[d] = 1;
    counts.buckets += bands[b].size();
  }
  const auto texts = candidate_texts(corpus, candidate, first_input_doc, scanner);
  ZLM_LOG_INF("%lu candidate buckets over %u bands, %lu candidate documents", (unsigned long)counts.buckets, opt.num_bands,
              (unsigned long)std::count(candidate.begin(), candidate.end(), 1));
  JsonlWriter out(opt.output);
  std::unordered_map<uint64_t, double> known;  // verified pairs of earlier bands (main, other) -> similarity
  for (const auto& buckets : bands) {
    std::vector<std::vector<Verified>> results(buckets.size());
    std::vector<std::vector<std::pair<uint64_t, double>>> computed(buckets.size());
    arena.execute([&] {
      tbb::parallel_for(size_t{0}, buckets.size(), [&](size_t i) { results[i] = verify_one_bucket(buckets[i], texts, known, opt, mode, computed[i]); });
    });
    for (size_t i = 0; i < buckets.size(); ++i) {
      for (const auto& [key, sim] : computed[i]) known.emplace(key, sim);
      counts.compared += computed[i].size();
      for (const Verified& v : results[i]) {
        write_verified(out, corpus, v);
        counts.similar += v.similar.size();
        ++counts.lines;
      }
    }
  }
  out.commit();
  return counts;
}

}  // namespace

void run(const FindDuplicatesOptions& opt, const CommonFlags& common, Stats& stats) {
  const double t0 = log_elapsed_sec();
  if (opt.inputs.size() % 2 != 0) throw Error(ErrorKind::Usage, "--inputs takes pairs: file key [file key ...]");
  const JaccardMode mode = lsh_rule(opt.num_seeds, opt.num_bands, opt.jaccard_threshold, opt.heuristic_iter, opt.jaccard).mode;
  const MinHashParams params{.num_seeds = opt.num_seeds, .char_ngram = opt.char_ngram, .seed = opt.seed};
  const std::vector<InputSpec> specs = input_specs(opt, common);
  ThreadArena arena(opt.threads);  // all parallel work of this run on exactly --threads threads
  Corpus corpus;
  load_fingerprints(opt, params, corpus);
  const uint64_t first_input_doc = corpus.ids.size();
  ZLM_LOG_INF("Computing fingerprints");
  uint64_t total_bytes = 0;
  for (const auto& s : specs) total_bytes += JsonlBatchReader(s.files).total_file_bytes();
  Progress progress({.label = "docs", .interval_sec = common.progress_sec, .enabled = !common.no_progress && !common.quiet});
  BadRecords bad(opt.max_bad_records);
  InputScanner scanner(specs, opt.text_key, arena);
  scanner.fingerprint(MinHasher(params), corpus, progress, bad);
  progress.finish();
  bad.fail_if_all_bad(corpus.ids.size() - first_input_doc + bad.count(), "--inputs");
  if (corpus.ids.size() > UINT32_MAX) throw Error(ErrorKind::Usage, "more than 2^32 documents: split the corpus");
  stats.set("docs_repeated_id", check_repeated_ids(corpus, specs, opt));
  const double t_fp = log_elapsed_sec() - t0;
  if (!opt.save_fingerprints.empty()) save_fingerprints(opt.save_fingerprints, params, corpus, first_input_doc, scanner);
  const PairCounts counts = opt.output.empty() ? PairCounts{} : find_pairs(opt, corpus, first_input_doc, scanner, arena, mode);
  ZLM_LOG_INF("done :-)");
  stats.set("docs_fingerprinted", corpus.ids.size() - first_input_doc);
  stats.set("docs_loaded", first_input_doc);
  stats.set("docs_bad", bad.count());
  stats.set("candidate_buckets", counts.buckets);
  stats.set("pairs_compared", counts.compared);
  stats.set("pairs_similar", counts.similar);
  stats.set("lines_out", counts.lines);
  stats.set("fingerprint_sec", t_fp);
  stats.set("fingerprint_mb_per_sec", t_fp > 0 ? static_cast<double>(total_bytes) / t_fp / 1e6 : 0.0);
  stats.set("elapsed_sec", log_elapsed_sec() - t0);
}

}  // namespace zlm::find_duplicates
