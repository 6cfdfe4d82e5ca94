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
  std::vector<std::string> values;
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
      RecordStatus status = st.extractor.extract(batch.line(ref), batch.capacity_after(ref), opt_.json_keys, st.values, &st.detail);
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
  bool encode_text(WorkerState& st, const std::string& text, KeyOut& ko, uint64_t& sentences) {
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

}  // namespace

void run(const PreprocessOptions& opt, const CommonFlags& common, Stats& stats) {
  double t_start = log_elapsed_sec();
  auto tokenizer = make_tokenizer({.type = opt.tokenizer_type, .vocab_file = opt.vocab_file, .merge_file = opt.merge_file,
                                   .null_vocab_size = opt.vocab_size});
  validate(opt, *tokenizer);
  std::vector<std::string> files = expand_inputs(opt.inputs);
  {  // "--json-keys text text" would write one .bin/.idx twice
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
  for (const auto& f : files) ZLM_LOG_INF("Opening %s", f.c_str());
  uint64_t padded = padded_vocab_size(tokenizer->vocab_size(), opt.make_vocab_size_divisible_by);
  ZLM_LOG_INF("> building %s tokenizer ...", tokenizer->name());
  ZLM_LOG_INF(" > padded vocab (size: %lu) with %lu dummy tokens (new size: %lu)", (unsigned long)tokenizer->vocab_size(),
              (unsigned long)(padded - tokenizer->vocab_size()), (unsigned long)padded);
  ZLM_LOG_INF("Vocab size: %lu", (unsigned long)tokenizer->vocab_size());
  ZLM_LOG_INF("Output prefix: %s", opt.output_prefix.c_str());
  const formats::DType dtype = formats::best_fitting_dtype(tokenizer->vocab_size());
  const size_t P = static_cast<size_t>(opt.partitions), K = opt.json_keys.size();
  uint64_t per_partition = 0;
  if (P > 1 && opt.keep_sequential_samples) {
    uint64_t total = count_lines(files);
    per_partition = std::max<uint64_t>(1, (total + P - 1) / P);
  }
  // writers[p][k]
  std::vector<std::vector<std::unique_ptr<MegatronWriter>>> writers(P);
  for (size_t p = 0; p < P; ++p)
    for (size_t k = 0; k < K; ++k) {
      std::string prefix = P == 1 ? opt.output_prefix : opt.output_prefix + "_" + std::to_string(p);
      writers[p].push_back(std::make_unique<MegatronWriter>(output_name(prefix, opt.json_keys[k], opt.split_sentences), dtype));
    }
  ZLM_LOG_INF("Time to startup: %s", python_float_repr(log_elapsed_sec() - t_start).c_str());

  JsonlBatchReader reader(files);
  bool compressed_or_stdin = false;
  for (const auto& f : files) {
    // Only a regular file is sniffed for compression here: reading the first
    // bytes of a pipe (/dev/stdin, <(xzcat ...)) would take them from the reader.
    struct stat st {};
    if (f == "-" || ::stat(f.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      compressed_or_stdin = true;
    } else {
      Compression c;
      open_byte_source(f, &c);
      compressed_or_stdin |= c != Compression::None;
    }
  }
  Progress progress({.label = "docs", .total_bytes = compressed_or_stdin ? 0 : reader.total_file_bytes(),
                     .interval_sec = common.progress_sec, .enabled = !common.no_progress && !common.quiet,
                     .extra_label = "tok"});
  Encoder encoder(opt, *tokenizer);
  BadRecords bad(opt.max_bad_records);
  uint64_t docs_in = 0, bytes_in = 0, sentences = 0, next_megatron_log = opt.log_interval;
  std::vector<uint64_t> docs_written(K, 0), docs_empty(K, 0), tokens_out(K, 0);
  std::map<std::string, uint64_t> bad_by_reason;
  double t_proc = log_elapsed_sec(), last_megatron_log = t_proc;

  auto write = [&](BatchResult& r) {
    std::vector<size_t> seq_pos(K, 0), tok_pos(K, 0), doc_pos(K, 0);
    for (const auto& b : r.bad_records) {
      ++bad_by_reason[b.reason];
      bad.add(reader.file_name(b.file_index) + ":" + std::to_string(b.line_number), b.reason + ": " + b.detail);
    }
    uint64_t batch_tokens = 0;
    for (size_t d = 0; d < r.bad.size(); ++d) {
      uint64_t j = r.first_record + d;  // global line number, bad lines included (Megatron's counter)
      size_t p = P == 1 ? 0 : (per_partition ? std::min<uint64_t>(j / per_partition, P - 1) : j % P);
      if (r.bad[d]) continue;
      for (size_t k = 0; k < K; ++k) {
        KeyOut& ko = r.keys[k];
        uint32_t nseq = ko.doc_seqs[doc_pos[k]++];
        int64_t ntok = 0;
        for (uint32_t s = 0; s < nseq; ++s) ntok += ko.seq_lengths[seq_pos[k] + s];
        if (nseq == 0) {
          ++docs_empty[k];
          if (opt.keep_empty_documents) writers[p][k]->end_document();
          continue;
        }
        writers[p][k]->add_document(std::span<const int32_t>(ko.tokens.data() + tok_pos[k], static_cast<size_t>(ntok)),
                                    std::span<const int64_t>(ko.seq_lengths.data() + seq_pos[k], nseq));
        seq_pos[k] += nseq;
        tok_pos[k] += static_cast<size_t>(ntok);
        tokens_out[k] += static_cast<uint64_t>(ntok);
        batch_tokens += static_cast<uint64_t>(ntok);
        ++docs_written[k];
      }
    }
    docs_in += r.bad.size();
    bytes_in += r.bytes;
    sentences += r.sentences;
    progress.add(r.bad.size(), r.bytes, batch_tokens);
    progress.maybe_report();
    // Megatron's progress line, at --log-interval multiples, at most once per --progress-sec.
    if (docs_in >= next_megatron_log) {
      double now = log_elapsed_sec();
      if (now - last_megatron_log >= common.progress_sec && !common.quiet && !common.no_progress) {
        double elapsed = now - t_proc;
        ZLM_LOG_INF("Processed %lu documents (%s docs/s, %s MB/s).", (unsigned long)docs_in,
                    python_float_repr(static_cast<double>(docs_in) / elapsed).c_str(),
                    python_float_repr(static_cast<double>(bytes_in) / elapsed / 1024 / 1024).c_str());
        last_megatron_log = now;
      }
      next_megatron_log = (docs_in / opt.log_interval + 1) * opt.log_interval;
    }
  };

  run_ordered_pipeline<LineBatch, BatchResult>(
      opt.workers, static_cast<size_t>(opt.workers) * 2 + 2, [&](LineBatch& b) { return reader.next_batch(b); },
      [&](LineBatch& b, BatchResult& r) { encoder.encode(b, r); }, write);
  progress.finish();

  // Finalize: partition outputs, then the merge in partition order (Megatron L2).
  for (size_t p = 0; p < P; ++p)
    for (size_t k = 0; k < K; ++k) writers[p][k]->finalize();
  if (P > 1) {
    for (size_t k = 0; k < K; ++k) {
      MegatronWriter merged(output_name(opt.output_prefix, opt.json_keys[k], opt.split_sentences), dtype);
      for (size_t p = 0; p < P; ++p)
        merged.add_index(MegatronReader(output_name(opt.output_prefix + "_" + std::to_string(p), opt.json_keys[k], opt.split_sentences)));
      merged.finalize();
    }
  }
  double elapsed = log_elapsed_sec() - t_proc;
  stats.set("files_in", static_cast<uint64_t>(files.size()));
  stats.set("docs_in", docs_in);
  stats.set("bytes_in", bytes_in);
  stats.set("docs_bad", bad.count());
  for (const auto& [reason, n] : bad_by_reason) stats.set("docs_bad_" + reason, n);
  for (size_t k = 0; k < K; ++k) {
    const std::string& key = opt.json_keys[k];
    stats.set("docs_written_" + key, docs_written[k]);
    stats.set("docs_empty_" + key, docs_empty[k]);
    stats.set("tokens_" + key, tokens_out[k]);
  }
  if (opt.split_sentences) stats.set("sentences", sentences);
  if (!opt.vocab_file.empty()) stats.set("vocab_file", opt.vocab_file);
  if (!opt.merge_file.empty()) stats.set("merge_file", opt.merge_file);
  stats.set("dtype", formats::dtype_name(static_cast<uint8_t>(dtype)));
  stats.set("workers", static_cast<uint64_t>(opt.workers));
  stats.set("elapsed_sec", elapsed);
  stats.set("docs_per_sec", elapsed > 0 ? static_cast<double>(docs_in) / elapsed : 0.0);
  stats.set("mb_per_sec", elapsed > 0 ? static_cast<double>(bytes_in) / elapsed / 1e6 : 0.0);
  uint64_t all_tokens = 0;
  for (auto t : tokens_out) all_tokens += t;
  stats.set("tokens_per_sec", elapsed > 0 ? static_cast<double>(all_tokens) / elapsed : 0.0);
}

}  // namespace zlm::preprocess
