#include "tools/preprocess_data/preprocess_data.h"

#include <sys/stat.h>

#include <tbb/enumerable_thread_specific.h>

#include <filesystem>
#include <map>
#include <memory>
#include <span>

#include "common/core/output_file.h"
#include "common/core/bad_records.h"
#include "common/core/error.h"
#include "common/io/input_files.h"
#include "common/io/jsonl.h"
#include "common/core/jsonl_writer.h"
#include "common/io/line_reader.h"
#include "common/core/log.h"
#include "common/io/pipeline.h"
#include "common/core/progress.h"
#include "common/text/sentence_splitter.h"
#include "common/tokenizer/tokenizer.h"
#include "formats/megatron_mmap.h"

namespace zlm::preprocess {

using formats::MegatronReader;
using formats::MegatronWriter;

std::string output_name(const std::string& prefix, const std::string& key, bool split_sentences) {
  return prefix + "_" + key + "_" + (split_sentences ? "sentence" : "document");
}

namespace {

struct BadRecord {
  uint32_t file_index;
  uint64_t line_number;
  std::string reason;  // record_status_name or "tokenizer"
  std::string detail;
};

// Tokens of one key for every document of a batch.
struct KeyOut {
  std::vector<int32_t> tokens;
  std::vector<int64_t> seq_lengths;  // one per sequence
  std::vector<uint32_t> doc_seqs;    // sequences per document (0 = empty document)
  void clear() {
    tokens.clear();
    seq_lengths.clear();
    doc_seqs.clear();
  }
};

struct BatchResult {
  uint64_t first_record = 0;
  uint64_t bytes = 0;
  uint64_t sentences = 0;
  std::vector<uint8_t> bad;  // per document: 1 = skipped as a bad record
  std::vector<KeyOut> keys;
  std::vector<BadRecord> bad_records;
};

struct WorkerState {
  JsonFieldExtractor extractor;
  std::unique_ptr<TokenizerSession> tokenizer;
  std::unique_ptr<SentenceSplitter> splitter;
  std::vector<std::string_view> values;  // into extractor's buffer, until its next call
  std::string detail;
  struct Mark { size_t tokens, seqs, docs; };
  std::vector<Mark> marks;
};

class Encoder {
 public:
  Encoder(const PreprocessOptions& opt, const Tokenizer& tokenizer)
      : opt_(opt), tokenizer_(tokenizer) {}

  void encode(const LineBatch& batch, BatchResult& out) {
    std::unique_ptr<WorkerState>& slot = states_.local();
    if (!slot) {
      slot = std::make_unique<WorkerState>();
      slot->tokenizer = tokenizer_.session();
      if (opt_.split_sentences) slot->splitter = std::make_unique<SentenceSplitter>(opt_.lang);
    }
    WorkerState& st = *slot;
    out.first_record = batch.first_record;
    out.bytes = batch.bytes;
    out.sentences = 0;
    out.bad.assign(batch.lines.size(), 0);
    out.bad_records.clear();
    out.keys.resize(opt_.json_keys.size());
    for (auto& k : out.keys) k.clear();
    for (size_t d = 0; d < batch.lines.size(); ++d) {
      const LineRef& ref = batch.lines[d];
      RecordStatus status = st.extractor.extract_views(batch.line(ref), batch.capacity_after(ref), opt_.json_keys, st.values, &st.detail);
      if (status != RecordStatus::Ok) {
        mark_bad(out, d, ref, record_status_name(status), st.detail);
        continue;
      }
      // Remember where each key's output stands, to roll back a document that fails.
      st.marks.resize(opt_.json_keys.size());
      for (size_t k = 0; k < opt_.json_keys.size(); ++k)
        st.marks[k] = {out.keys[k].tokens.size(), out.keys[k].seq_lengths.size(), out.keys[k].doc_seqs.size()};
      bool ok = true;
      for (size_t k = 0; k < opt_.json_keys.size() && ok; ++k) ok = encode_text(st, st.values[k], out.keys[k], out.sentences);
      if (!ok) {
        for (size_t k = 0; k < opt_.json_keys.size(); ++k) {
          out.keys[k].tokens.resize(st.marks[k].tokens);
          out.keys[k].seq_lengths.resize(st.marks[k].seqs);
          out.keys[k].doc_seqs.resize(st.marks[k].docs);
        }
        mark_bad(out, d, ref, "tokenizer", st.detail);
      }
    }
  }

 private:
  void mark_bad(BatchResult& out, size_t d, const LineRef& ref, const char* reason, const std::string& detail) {
    out.bad[d] = 1;
    out.bad_records.push_back({ref.file_index, ref.line_number, reason, detail});
  }
  // Appends one document of one key: its sentences as sequences.
  bool encode_text(WorkerState& st, std::string_view text, KeyOut& ko, uint64_t& sentences) {
    size_t first_seq = ko.seq_lengths.size();
    auto add_sentence = [&](std::string_view s) {
      size_t before = ko.tokens.size();
      if (!st.tokenizer->encode(s, ko.tokens, &st.detail)) return false;
      size_t n = ko.tokens.size() - before;
      if (n > 0) ko.seq_lengths.push_back(static_cast<int64_t>(n));  // empty sentences are dropped
      return true;
    };
    if (opt_.split_sentences) {
      for (std::string_view s : st.splitter->split(text, opt_.keep_newlines))
        if (!add_sentence(s)) return false;
    } else if (!text.empty() && !add_sentence(text)) {
      return false;
    }
    size_t nseq = ko.seq_lengths.size() - first_seq;
    if (opt_.append_eod && nseq > 0) {
      ko.tokens.push_back(static_cast<int32_t>(tokenizer_.eod()));
      ++ko.seq_lengths.back();
    }
    sentences += nseq;
    ko.doc_seqs.push_back(static_cast<uint32_t>(nseq));
    return true;
  }

  const PreprocessOptions& opt_;
  const Tokenizer& tokenizer_;
  tbb::enumerable_thread_specific<std::unique_ptr<WorkerState>> states_;
};

uint64_t count_lines(const std::vector<std::string>& files) {
  uint64_t n = 0;
  for (const auto& f : files) {
    struct stat st {};
    if (f == "-" || ::stat(f.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      throw Error(ErrorKind::Usage, "--keep-sequential-samples reads the input twice: '%s' is not a regular file (a pipe can be read once)",
                  f.c_str());
    LineReader r(f);
    std::string_view line;
    while (r.next(line)) ++n;
  }
  return n;
}


void validate(const PreprocessOptions& opt, const Tokenizer& tok) {
  if (opt.dataset_impl != "mmap")
    throw Error(ErrorKind::Usage, "--dataset-impl %s: only mmap is written (lazy/cached were removed from Megatron in 2023)", opt.dataset_impl.c_str());
  if (opt.workers < 1) throw Error(ErrorKind::Usage, "--workers must be >= 1");
  if (opt.partitions < 1) throw Error(ErrorKind::Usage, "--partitions must be >= 1");
  if (opt.json_keys.empty()) throw Error(ErrorKind::Usage, "--json-keys needs at least one key");
  if (opt.append_eod && tok.eod() < 0) throw Error(ErrorKind::Usage, "--append-eod: the vocabulary has no <|endoftext|> token");
  std::filesystem::path dir = std::filesystem::path(opt.output_prefix).parent_path();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::is_directory(dir, ec))
    throw Error(ErrorKind::Usage, "the directory of --output-prefix '%s' does not exist", opt.output_prefix.c_str());
}

// "--json-keys text text" would write one .bin/.idx twice; an output must not be an input.
void check_paths(const PreprocessOptions& opt, const CommonFlags& common, const std::vector<std::string>& files) {
  std::vector<NamedPath> outputs{{"--stats-out", common.stats_out}}, inputs;
  for (const auto& key : opt.json_keys) {
    const std::string name = output_name(opt.output_prefix, key, opt.split_sentences);
    outputs.push_back({"--json-keys " + key, name + ".bin"});
    outputs.push_back({"--json-keys " + key, name + ".idx"});
  }
  for (const auto& f : files) inputs.push_back({"--input", f});
  inputs.push_back({"--vocab-file", opt.vocab_file});
  inputs.push_back({"--merge-file", opt.merge_file});
  check_distinct_paths(outputs, inputs);
}

// The total to show progress against: the files' bytes, unless one is
// compressed or a pipe. Only a regular file is sniffed for compression here:
// reading the first bytes of a pipe (/dev/stdin, <(xzcat ...)) would take them
// from the reader.
uint64_t progress_total_bytes(const std::vector<std::string>& files, const JsonlBatchReader& reader) {
  for (const auto& f : files) {
    struct stat st {};
    if (f == "-" || ::stat(f.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    Compression c;
    open_byte_source(f, &c);
    if (c != Compression::None) return 0;
  }
  return reader.total_file_bytes();
}

// The write side of the pipeline: each batch's documents into the partition
// writers (Megatron's round-robin or sequential partitions), in input order;
// bad records counted and reported; Megatron's progress line; at the end the
// partitions merged in order (Megatron L2) and the counters into the stats.
class DatasetSink {
 public:
  DatasetSink(const PreprocessOptions& opt, const CommonFlags& common, const JsonlBatchReader& reader, formats::DType dtype,
              uint64_t per_partition, Progress& progress)
      : opt_(opt), common_(common), reader_(reader), dtype_(dtype), P_(static_cast<size_t>(opt.partitions)), K_(opt.json_keys.size()),
        per_partition_(per_partition), progress_(progress), bad_(opt.max_bad_records), docs_written_(K_, 0), docs_empty_(K_, 0),
        tokens_out_(K_, 0), next_megatron_log_(opt.log_interval), t_start_(log_elapsed_sec()), last_megatron_log_(t_start_) {
    writers_.resize(P_);  // writers_[p][k]
    for (size_t p = 0; p < P_; ++p)
      for (size_t k = 0; k < K_; ++k)
        writers_[p].push_back(std::make_unique<MegatronWriter>(output_name(partition_prefix(p), opt.json_keys[k], opt.split_sentences), dtype));
  }

  void write(BatchResult& r) {
    for (const auto& b : r.bad_records) {
      ++bad_by_reason_[b.reason];
      bad_.add(reader_.file_name(b.file_index) + ":" + std::to_string(b.line_number), b.reason + ": " + b.detail);
    }
    std::vector<size_t> seq_pos(K_, 0), tok_pos(K_, 0), doc_pos(K_, 0);
    uint64_t batch_tokens = 0;
    for (size_t d = 0; d < r.bad.size(); ++d) {
      if (r.bad[d]) continue;
      const size_t p = partition_of(r.first_record + d);
      for (size_t k = 0; k < K_; ++k) batch_tokens += write_document(r.keys[k], k, p, seq_pos[k], tok_pos[k], doc_pos[k]);
    }
    docs_in_ += r.bad.size();
    bytes_in_ += r.bytes;
    sentences_ += r.sentences;
    progress_.add(r.bad.size(), r.bytes, batch_tokens);
    progress_.maybe_report();
    megatron_progress_line();
  }

  void finish() {
    bad_.fail_if_all_bad(docs_in_, reader_.files().size() == 1 ? reader_.files()[0] : "--input");
    for (size_t p = 0; p < P_; ++p)
      for (size_t k = 0; k < K_; ++k) writers_[p][k]->finalize();
    if (P_ == 1) return;
    for (size_t k = 0; k < K_; ++k) {
      MegatronWriter merged(output_name(opt_.output_prefix, opt_.json_keys[k], opt_.split_sentences), dtype_);
      for (size_t p = 0; p < P_; ++p) merged.add_index(MegatronReader(output_name(partition_prefix(p), opt_.json_keys[k], opt_.split_sentences)));
      merged.finalize();
    }
  }

  void report(Stats& stats, size_t files) const {
    const double elapsed = log_elapsed_sec() - t_start_;
    stats.set("files_in", static_cast<uint64_t>(files));
    stats.set("docs_in", docs_in_);
    stats.set("bytes_in", bytes_in_);
    stats.set("docs_bad", bad_.count());
    for (const auto& [reason, n] : bad_by_reason_) stats.set("docs_bad_" + reason, n);
    if (reader_.files_with_bom() > 0) stats.set("files_with_bom", reader_.files_with_bom());
    uint64_t all_tokens = 0;
    for (size_t k = 0; k < K_; ++k) {
      const std::string& key = opt_.json_keys[k];
      stats.set("docs_written_" + key, docs_written_[k]);
      stats.set("docs_empty_" + key, docs_empty_[k]);
      stats.set("tokens_" + key, tokens_out_[k]);
      all_tokens += tokens_out_[k];
    }
    if (opt_.split_sentences) stats.set("sentences", sentences_);
    if (!opt_.vocab_file.empty()) stats.set("vocab_file", opt_.vocab_file);
    if (!opt_.merge_file.empty()) stats.set("merge_file", opt_.merge_file);
    stats.set("dtype", formats::dtype_name(static_cast<uint8_t>(dtype_)));
    stats.set("workers", static_cast<uint64_t>(opt_.workers));
    stats.set("elapsed_sec", elapsed);
    stats.set("docs_per_sec", elapsed > 0 ? static_cast<double>(docs_in_) / elapsed : 0.0);
    stats.set("mb_per_sec", elapsed > 0 ? static_cast<double>(bytes_in_) / elapsed / 1e6 : 0.0);
    stats.set("tokens_per_sec", elapsed > 0 ? static_cast<double>(all_tokens) / elapsed : 0.0);
  }

 private:
  std::string partition_prefix(size_t p) const { return P_ == 1 ? opt_.output_prefix : opt_.output_prefix + "_" + std::to_string(p); }
  // Megatron's partition of global line j (bad lines included in the count).
  size_t partition_of(uint64_t j) const { return P_ == 1 ? 0 : (per_partition_ ? std::min<uint64_t>(j / per_partition_, P_ - 1) : j % P_); }

  // Key k of the next document of a batch into partition p; returns its tokens.
  uint64_t write_document(const KeyOut& ko, size_t k, size_t p, size_t& seq_pos, size_t& tok_pos, size_t& doc_pos) {
    const uint32_t nseq = ko.doc_seqs[doc_pos++];
    int64_t ntok = 0;
    for (uint32_t s = 0; s < nseq; ++s) ntok += ko.seq_lengths[seq_pos + s];
    if (nseq == 0) {
      ++docs_empty_[k];
      if (opt_.keep_empty_documents) writers_[p][k]->end_document();
      return 0;
    }
    writers_[p][k]->add_document(std::span<const int32_t>(ko.tokens.data() + tok_pos, static_cast<size_t>(ntok)),
                                 std::span<const int64_t>(ko.seq_lengths.data() + seq_pos, nseq));
    seq_pos += nseq;
    tok_pos += static_cast<size_t>(ntok);
    tokens_out_[k] += static_cast<uint64_t>(ntok);
    ++docs_written_[k];
    return static_cast<uint64_t>(ntok);
  }

  // Megatron's progress line, at --log-interval multiples, at most once per --progress-sec.
  void megatron_progress_line() {
    if (docs_in_ < next_megatron_log_) return;
    const double now = log_elapsed_sec();
    if (now - last_megatron_log_ >= common_.progress_sec && !common_.quiet && !common_.no_progress) {
      const double elapsed = now - t_start_;
      ZLM_LOG_INF("Processed %lu documents (%s docs/s, %s MB/s).", (unsigned long)docs_in_,
                  python_float_repr(static_cast<double>(docs_in_) / elapsed).c_str(),
                  python_float_repr(static_cast<double>(bytes_in_) / elapsed / 1024 / 1024).c_str());
      last_megatron_log_ = now;
    }
    next_megatron_log_ = (docs_in_ / opt_.log_interval + 1) * opt_.log_interval;
  }

  const PreprocessOptions& opt_;
  const CommonFlags& common_;
  const JsonlBatchReader& reader_;
  const formats::DType dtype_;
  const size_t P_, K_;
  const uint64_t per_partition_;
  Progress& progress_;
  BadRecords bad_;
  std::vector<std::vector<std::unique_ptr<MegatronWriter>>> writers_;
  std::map<std::string, uint64_t> bad_by_reason_;
  uint64_t docs_in_ = 0, bytes_in_ = 0, sentences_ = 0;
  std::vector<uint64_t> docs_written_, docs_empty_, tokens_out_;
  uint64_t next_megatron_log_;
  double t_start_, last_megatron_log_;
};

}  // namespace

void run(const PreprocessOptions& opt, const CommonFlags& common, Stats& stats) {
  const double t_start = log_elapsed_sec();
  auto tokenizer = make_tokenizer({.type = opt.tokenizer_type, .vocab_file = opt.vocab_file, .merge_file = opt.merge_file,
                                   .null_vocab_size = opt.vocab_size});
  validate(opt, *tokenizer);
  const std::vector<std::string> files = expand_inputs(opt.inputs);
  check_paths(opt, common, files);
  for (const auto& f : files) ZLM_LOG_INF("Opening %s", f.c_str());
  const uint64_t padded = padded_vocab_size(tokenizer->vocab_size(), opt.make_vocab_size_divisible_by);
  ZLM_LOG_INF("> building %s tokenizer ...", tokenizer->name());
  ZLM_LOG_INF(" > padded vocab (size: %lu) with %lu dummy tokens (new size: %lu)", (unsigned long)tokenizer->vocab_size(),
              (unsigned long)(padded - tokenizer->vocab_size()), (unsigned long)padded);
  ZLM_LOG_INF("Vocab size: %lu", (unsigned long)tokenizer->vocab_size());
  ZLM_LOG_INF("Output prefix: %s", opt.output_prefix.c_str());
  const size_t P = static_cast<size_t>(opt.partitions);
  const uint64_t per_partition = P > 1 && opt.keep_sequential_samples ? std::max<uint64_t>(1, (count_lines(files) + P - 1) / P) : 0;
  JsonlBatchReader reader(files, 256 << 10);
  Progress progress({.label = "docs", .total_bytes = progress_total_bytes(files, reader), .interval_sec = common.progress_sec,
                     .enabled = !common.no_progress && !common.quiet, .extra_label = "tok"});
  DatasetSink sink(opt, common, reader, formats::best_fitting_dtype(tokenizer->vocab_size()), per_partition, progress);
  ZLM_LOG_INF("Time to startup: %s", python_float_repr(log_elapsed_sec() - t_start).c_str());
  Encoder encoder(opt, *tokenizer);
  run_ordered_pipeline<LineBatch, BatchResult>(
      opt.workers, [&](LineBatch& b) { return reader.next_batch(b); }, [&](LineBatch& b, BatchResult& r) { encoder.encode(b, r); },
      [&](BatchResult& r) { sink.write(r); });
  progress.finish();
  sink.finish();
  sink.report(stats, files.size());
}

}  // namespace zlm::preprocess
