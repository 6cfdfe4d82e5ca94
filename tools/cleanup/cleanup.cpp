#include "tools/cleanup/cleanup.h"

#include <tbb/enumerable_thread_specific.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <array>
#include <filesystem>
#include <memory>

#include "common/core/output_file.h"
#include "common/core/bad_records.h"
#include "common/core/error.h"
#include "common/core/utf8.h"
#include "common/io/input_files.h"
#include "common/core/json_writer.h"
#include "common/io/jsonl.h"
#include "common/core/jsonl_writer.h"
#include "common/text/lang_id.h"
#include "common/core/log.h"
#include "common/io/pipeline.h"
#include "common/core/progress.h"
#include "common/text/text_fix.h"
#include "common/tokenizer/gpt2_files.h"
#include "common/tokenizer/tokenizer.h"

namespace zlm::cleanup {

namespace {

enum Outcome : uint8_t { kKept, kNonEnglish, kSmall, kBad, kFiltered };
enum Task { kRemove512, kRemove256Js, kRemove512NonEnglish, kFtfy, kGeneralCleaning, kNumTasks };
const char* kTaskNames[kNumTasks] = {"remove_512", "remove_256_javascript", "remove_512_non_english", "ftfy_fix_text",
                                     "general_cleaning"};

struct Doc {
  Outcome outcome = kKept;
  bool text_changed = false;
  int task = -1;             // tasks mode: the task that fired
  uint64_t chars = 0;        // of the (fixed) text
  std::string line;          // what to write (kept: the output line)
  std::string reason;        // rejected: reason and detail
  uint64_t line_number = 0;
  uint32_t file_index = 0;
};

struct Result {
  std::vector<Doc> docs;
  uint64_t bytes = 0;
};

struct WorkerState {
  JsonFieldExtractor extractor;
  std::unique_ptr<TokenizerSession> tokenizer;
  std::unique_ptr<icu::RegexMatcher> cleaning;
  std::vector<std::string> values;
  std::vector<int32_t> ids;
  std::string detail;
};


// The line with the text value replaced (every other byte kept).
std::string replace_text(std::string_view line, size_t capacity, const std::string& key, const std::string& text) {
  size_t off = 0, len = 0;
  if (!find_string_field_span(line, capacity, key, &off, &len))
    throw Error(ErrorKind::Internal, "text field vanished from a parsed line");
  std::string out(line.substr(0, off));
  append_json_string(out, text);
  out.append(line.substr(off + len));
  return out;
}

bool contains_javascript(const std::string& text) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
  u.toLower();  // Python's str.lower(): full Unicode lower-casing
  return u.indexOf(icu::UnicodeString("javascript")) >= 0;
}

class Worker {
 public:
  Worker(const CleanupOptions& opt, const Tokenizer* tok, const bool* tasks) : opt_(opt), tok_(tok), tasks_(tasks) {}

  void process(const LineBatch& b, Result& r) {
    auto& slot = states_.local();
    if (!slot) {
      slot = std::make_unique<WorkerState>();
      if (tok_) slot->tokenizer = tok_->session();
      UErrorCode st = U_ZERO_ERROR;
      slot->cleaning.reset(new icu::RegexMatcher(icu::UnicodeString::fromUTF8("  +|\\b\\n+ |\\b\\n+"), 0, st));
    }
    WorkerState& s = *slot;
    r.bytes = b.bytes;
    r.docs.resize(b.lines.size());
    std::vector<std::string> keys{opt_.text_key};
    for (size_t i = 0; i < b.lines.size(); ++i) {
      const LineRef& ref = b.lines[i];
      Doc& d = r.docs[i];
      d = Doc();
      d.line_number = ref.line_number;
      d.file_index = ref.file_index;
      std::string_view line = b.line(ref);
      RecordStatus st = s.extractor.extract(line, b.capacity_after(ref), keys, s.values, &s.detail);
      if (st != RecordStatus::Ok) {
        d.outcome = kBad;
        d.reason = std::string(record_status_name(st)) + ": " + s.detail;
        d.line.assign(line);
        continue;
      }
      if (tasks_) apply_tasks(s, line, b.capacity_after(ref), d);
      else clean(s, line, b.capacity_after(ref), d);
    }
  }

 private:
  // The language as --lang-id-bytes scopes it: detect_language_sampled's windows
  // decide where they agree, unless --lang-id-exact, or --min-lang-percent asks
  // for the scope's own share.
  LangGuess language(std::string_view text) const {
    const bool sampled = !opt_.lang_id_exact && opt_.min_lang_percent == 0;
    return sampled ? detect_language_sampled(text, opt_.lang_id_bytes) : detect_language(text, opt_.lang_id_bytes);
  }

  void clean(WorkerState& s, std::string_view line, size_t capacity, Doc& d) {
    const std::string& text = s.values[0];
    std::string fixed = fix_text(text);
    d.text_changed = fixed != text;
    d.chars = utf8_length(fixed);
    LangGuess g = language(fixed);
    if (g.code != opt_.lang || g.percent < opt_.min_lang_percent) {
      d.outcome = kNonEnglish;
      d.reason = "non_english: " + g.code + " " + std::to_string(g.percent) + "%";
      d.line.assign(line);
      return;
    }
    if (d.chars < static_cast<uint64_t>(opt_.max_chars_for_token_check)) {
      s.ids.clear();
      s.tokenizer->encode(fixed, s.ids, &s.detail);
      size_t tokens = s.ids.size() + 1;  // + EOD, as Megatron's tokenize_document
      if (tokens < static_cast<size_t>(opt_.min_tokens)) {
        d.outcome = kSmall;
        d.reason = "small: " + std::to_string(tokens) + " tokens";
        d.line.assign(line);
        return;
      }
    }
    d.line = d.text_changed ? replace_text(line, capacity, opt_.text_key, fixed) : std::string(line);
  }

  void apply_tasks(WorkerState& s, std::string_view line, size_t capacity, Doc& d) {
    std::string text = s.values[0];
    uint64_t chars = utf8_length(text);
    d.chars = chars;
    auto filtered = [&](int task) {
      d.outcome = kFiltered;
      d.task = task;
      d.line.assign(line);
    };
    if (tasks_[kRemove512] && chars < 512) return filtered(kRemove512);
    if (tasks_[kRemove256Js] && chars < 256 && contains_javascript(text)) return filtered(kRemove256Js);
    if (tasks_[kRemove512NonEnglish] && chars < 512 && language(text).code != opt_.lang) return filtered(kRemove512NonEnglish);
    std::string out = text;
    if (tasks_[kFtfy]) {
      d.task = kFtfy;
      out = fix_text(text);
    } else if (tasks_[kGeneralCleaning]) {
      d.task = kGeneralCleaning;
      icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
      s.cleaning->reset(u);
      UErrorCode st = U_ZERO_ERROR;
      icu::UnicodeString replaced = s.cleaning->replaceAll(icu::UnicodeString(" "), st);
      out.clear();
      replaced.toUTF8String(out);
    }
    d.text_changed = out != text;
    d.line = d.text_changed ? replace_text(line, capacity, opt_.text_key, out) : std::string(line);
  }

  const CleanupOptions& opt_;
  const Tokenizer* tok_;
  const bool* tasks_;
  tbb::enumerable_thread_specific<std::unique_ptr<WorkerState>> states_;
};

// Runs the worker over every batch of `reader` in parallel and hands each
// document, in input order, to on_doc; on_batch(result) after each batch.
template <typename OnDoc, typename OnBatch>
void for_each_doc(JsonlBatchReader& reader, Worker& worker, int workers, OnDoc&& on_doc, OnBatch&& on_batch) {
  run_ordered_pipeline<LineBatch, Result>(
      workers, [&](LineBatch& b) { return reader.next_batch(b); },
      [&](LineBatch& b, Result& r) { worker.process(b, r); },
      [&](Result& r) {
        for (const Doc& d : r.docs) on_doc(d);
        on_batch(r);
      });
}

void write_rejected(JsonlWriter* w, const Doc& d) {
  if (!w) return;
  w->begin_object();
  w->field("reason", d.reason);
  w->field("line", static_cast<int64_t>(d.line_number));
  // The original line as JSON when it is JSON, else as a string.
  if (d.outcome == kBad) w->field("doc", d.line);
  else w->field_raw("doc", d.line);
  w->end_object();
}

// cleanup_dataset.py's outcome of each document: kept lines to the output, the
// dropped and the malformed ones (with their reason) to --rejected-out; its
// counters and its status line, by time.
class DefaultSink {
 public:
  DefaultSink(const CleanupOptions& opt, const CommonFlags& common, const JsonlBatchReader& reader, double t0)
      : common_(common), reader_(reader), out_(opt.output), bad_(opt.max_bad_records), t0_(t0), next_log_(t0 + common.progress_sec),
        progress_({.label = "docs", .total_bytes = reader.total_file_bytes(), .interval_sec = common.progress_sec,
                   .enabled = !common.no_progress && !common.quiet}) {
    if (!opt.rejected_out.empty()) rejected_ = std::make_unique<JsonlWriter>(opt.rejected_out);
  }
  void take(const Doc& d) {
    ++docs_;
    if (d.outcome == kBad) {
      bad_.add(reader_.file_name(d.file_index) + ":" + std::to_string(d.line_number), d.reason);
      write_rejected(rejected_.get(), d);
      return;
    }
    fixed_ += d.text_changed;
    if (d.outcome == kNonEnglish) {
      ++non_english_;
      non_english_chars_ += d.chars;
      write_rejected(rejected_.get(), d);
    } else if (d.outcome == kSmall) {
      ++small_;
      small_chars_ += d.chars;
      write_rejected(rejected_.get(), d);
    } else {
      out_.write_raw_line(d.line);
      ++written_;
    }
  }
  void batch_done(const Result& r) {
    progress_.add(r.docs.size(), r.bytes);
    progress_.set_kept(written_);
    progress_.maybe_report();
    if (!common_.quiet && !common_.no_progress && log_elapsed_sec() >= next_log_) {
      status("PROGRESS");
      next_log_ = log_elapsed_sec() + common_.progress_sec;
    }
  }
  void finish(const std::string& input) {
    progress_.finish();
    status("FINAL");
    bad_.fail_if_all_bad(docs_, input);
    out_.commit();
    if (rejected_) rejected_->commit();
  }
  void report(Stats& stats) const {
    stats.set("docs_in", docs_);
    stats.set("docs_written", written_);
    stats.set("docs_fixed_text", fixed_);
    stats.set("docs_non_english", non_english_);
    stats.set("chars_non_english", non_english_chars_);
    stats.set("docs_small", small_);
    stats.set("chars_small", small_chars_);
    stats.set("docs_bad", bad_.count());
  }
  uint64_t docs() const { return docs_; }

 private:
  void status(const char* tag) const {
    ZLM_LOG_INF("[%s] | elapsed time: %.2f | documents: %lu | fixed text: %lu | non-english: %lu | non-english chars: %lu | "
                "small docs: %lu | small docs chars: %lu",
                tag, log_elapsed_sec() - t0_, (unsigned long)docs_, (unsigned long)fixed_, (unsigned long)non_english_,
                (unsigned long)non_english_chars_, (unsigned long)small_, (unsigned long)small_chars_);
  }

  const CommonFlags& common_;
  const JsonlBatchReader& reader_;
  JsonlWriter out_;
  std::unique_ptr<JsonlWriter> rejected_;
  BadRecords bad_;
  uint64_t docs_ = 0, fixed_ = 0, non_english_ = 0, non_english_chars_ = 0, small_ = 0, small_chars_ = 0, written_ = 0;
  double t0_, next_log_;
  Progress progress_;
};

void run_default(const CleanupOptions& opt, const CommonFlags& common, Stats& stats) {
  // The token count needs GPT-2's tokenizer: the given files, else the bundled ones (as Megatron's script loads GPT-2's).
  const Gpt2Files files = resolve_gpt2_files(opt.vocab_file, opt.merge_file);
  if (files.bundled) ZLM_LOG_INF("no --vocab-file/--merge-file given: GPT-2's own, %s and %s", files.vocab_file.c_str(), files.merge_file.c_str());
  check_distinct_paths({{"<output>", opt.output}, {"--rejected-out", opt.rejected_out}, {"--stats-out", common.stats_out}},
                       {{"<input>", opt.input}, {"--vocab-file", files.vocab_file}, {"--merge-file", files.merge_file}});
  auto tok = make_tokenizer({.type = "GPT2BPETokenizer", .vocab_file = files.vocab_file, .merge_file = files.merge_file});
  ZLM_LOG_INF("will be reading %s", opt.input.c_str());
  ZLM_LOG_INF("and will write the results to %s", opt.output.c_str());
  JsonlBatchReader reader(expand_inputs(opt.input));
  const double t0 = log_elapsed_sec();
  DefaultSink sink(opt, common, reader, t0);
  Worker worker(opt, tok.get(), nullptr);
  for_each_doc(reader, worker, opt.workers, [&](const Doc& d) { sink.take(d); }, [&](const Result& r) { sink.batch_done(r); });
  sink.finish(opt.input);
  sink.report(stats);
  if (reader.files_with_bom() > 0) stats.set("files_with_bom", reader.files_with_bom());
  stats.set("vocab_file", files.vocab_file);
  stats.set("merge_file", files.merge_file);
  const double el = log_elapsed_sec() - t0;
  stats.set("elapsed_sec", el);
  stats.set("docs_per_sec", el > 0 ? static_cast<double>(sink.docs()) / el : 0.0);
}

// --tasks: the names to flags, in Megatron's fixed order.
std::array<bool, kNumTasks> parse_tasks(const std::vector<std::string>& names) {
  std::array<bool, kNumTasks> tasks{};
  for (const auto& t : names) {
    bool known = false;
    for (int k = 0; k < kNumTasks; ++k)
      if (t == kTaskNames[k]) tasks[k] = known = true;
    if (!known)
      throw Error(ErrorKind::Usage, "unknown task '%s' (tasks: remove_512 remove_256_javascript remove_512_non_english ftfy_fix_text general_cleaning)",
                  t.c_str());
  }
  return tasks;
}

// Each input file's two outputs, --output-path/<stem>_cleaned<ext> and _filtered<ext>.
std::pair<std::string, std::string> task_outputs(const CleanupOptions& opt, const std::string& file) {
  const std::filesystem::path p(file);
  const std::string base = (std::filesystem::path(opt.output_path) / p.stem()).string();
  return {base + "_cleaned" + p.extension().string(), base + "_filtered" + p.extension().string()};
}

// Every output named before any is written: two inputs of one name (a/x.jsonl,
// b/x.jsonl) would write the same x_cleaned.jsonl.
void check_task_paths(const CleanupOptions& opt, const CommonFlags& common) {
  if (opt.input_files.empty() || opt.output_path.empty()) throw Error(ErrorKind::Usage, "--tasks needs --input-files and --output-path");
  std::error_code ec;
  if (!std::filesystem::is_directory(opt.output_path, ec))
    throw Error(ErrorKind::Usage, "--output-path '%s' is not a directory", opt.output_path.c_str());
  std::vector<NamedPath> outputs{{"--stats-out", common.stats_out}}, inputs;
  for (const auto& file : opt.input_files) {
    const auto [cleaned, filtered] = task_outputs(opt, file);
    outputs.push_back({"the output of --input-files " + file, cleaned});
    outputs.push_back({"the output of --input-files " + file, filtered});
    inputs.push_back({"--input-files " + file, file});
  }
  check_distinct_paths(outputs, inputs);
}

void run_tasks(const CleanupOptions& opt, const CommonFlags& common, Stats& stats) {
  const std::array<bool, kNumTasks> tasks = parse_tasks(opt.tasks);
  check_task_paths(opt, common);
  Worker worker(opt, nullptr, tasks.data());
  uint64_t counts[kNumTasks] = {0, 0, 0, 0, 0}, docs = 0, kept = 0, filtered_n = 0;
  BadRecords bad(opt.max_bad_records);
  const double t0 = log_elapsed_sec();
  for (const auto& file : opt.input_files) {
    const auto [cleaned_path, filtered_path] = task_outputs(opt, file);
    JsonlWriter cleaned(cleaned_path), filtered(filtered_path);
    JsonlBatchReader reader({file});
    for_each_doc(
        reader, worker, opt.workers,
        [&](const Doc& d) {
          ++docs;
          if (d.outcome == kBad) return bad.add(file + ":" + std::to_string(d.line_number), d.reason);
          if (d.task >= 0) ++counts[d.task];
          if (d.outcome == kFiltered) {
            filtered.write_raw_line(d.line);
            ++filtered_n;
          } else {
            cleaned.write_raw_line(d.line);
            ++kept;
          }
        },
        [](const Result&) {});
    cleaned.commit();
    filtered.commit();
    ZLM_LOG_INF("    processed %9lu documents in %.2f seconds ...", (unsigned long)docs, log_elapsed_sec() - t0);
  }
  bad.fail_if_all_bad(docs, "--input-files");
  ZLM_LOG_INF("  >> total docs: %lu remove_512 %lu remove_256_javascript %lu remove_512_non_english %lu ftfy_fix_text %lu general_cleaning %lu",
              (unsigned long)docs, (unsigned long)counts[0], (unsigned long)counts[1], (unsigned long)counts[2],
              (unsigned long)counts[3], (unsigned long)counts[4]);
  stats.set("docs_in", docs);
  stats.set("docs_cleaned", kept);
  stats.set("docs_filtered", filtered_n);
  stats.set("docs_bad", bad.count());
  for (int k = 0; k < kNumTasks; ++k) stats.set(std::string("task_") + kTaskNames[k], counts[k]);
  stats.set("elapsed_sec", log_elapsed_sec() - t0);
}

}  // namespace

void run(const CleanupOptions& opt, const CommonFlags& common, Stats& stats) {
  if (!is_language_code(opt.lang))
    throw Error(ErrorKind::Usage, "--lang '%s' is not a language code that CLD2 detects (e.g. en, de, fr, zh, pt) ---> HINT: "
                "every document would be dropped", opt.lang.c_str());
  if (!opt.tasks.empty()) return run_tasks(opt, common, stats);
  if (opt.input.empty() || opt.output.empty()) throw Error(ErrorKind::Usage, "give <input.jsonl> <output.jsonl> (or --tasks ...)");
  run_default(opt, common, stats);
}

}  // namespace zlm::cleanup
