#include "tools/download_urls/download.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common/core/ascii.h"
#include "common/core/error.h"
#include "common/core/json_writer.h"
#include "common/core/log.h"
#include "common/core/output_file.h"
#include "common/core/progress.h"
#include "common/core/utf8.h"
#include "common/io/line_reader.h"
#include "formats/warc.h"
#include "tools/download_urls/charset.h"
#include "tools/download_urls/html_text.h"

namespace zlm::web {
namespace {

std::atomic<int> g_signal{0};

void on_signal(int sig) { g_signal.store(sig); }

// SIGINT/SIGTERM/SIGHUP ask for a clean stop (written records kept, state saved);
// a second one kills (SA_RESETHAND).
void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

// An output that grows under "<path>.partial" across runs and is renamed when complete.
class PartialFile {
 public:
  PartialFile() = default;
  ~PartialFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;

  // Opens "<final_path>.partial": empty, or (resume) cut back to `keep` bytes.
  void open(const std::string& final_path, bool resume, uint64_t keep) {
    final_ = final_path;
    partial_ = final_path + ".partial";
    // A run that stopped while renaming its files into place: take the renamed ones back.
    if (resume && ::access(partial_.c_str(), F_OK) != 0 && ::access(final_.c_str(), F_OK) == 0 &&
        std::rename(final_.c_str(), partial_.c_str()) != 0)
      throw_errno("cannot rename " + final_ + " back to", partial_);
    fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (resume ? 0 : O_TRUNC), 0644);
    if (fd_ < 0) throw_errno("cannot open output", partial_);
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw_errno("cannot stat output", partial_);
    if (resume && static_cast<uint64_t>(st.st_size) < keep)
      throw Error(ErrorKind::Format,
                  "%s: %llu bytes, shorter than the %llu the resume state records (the file was changed); "
                  "pass --restart to start over",
                  partial_.c_str(), static_cast<unsigned long long>(st.st_size), static_cast<unsigned long long>(keep));
    if (resume && ::ftruncate(fd_, static_cast<off_t>(keep)) != 0) throw_errno("cannot truncate output", partial_);
    if (::lseek(fd_, 0, SEEK_END) < 0) throw_errno("cannot seek output", partial_);
    size_ = resume ? keep : 0;
  }
  bool is_open() const { return fd_ >= 0; }
  void write(std::string_view s) {
    buffer_.append(s);
    size_ += s.size();
    if (buffer_.size() >= (1u << 20)) flush();
  }
  void flush() {
    if (fd_ < 0 || buffer_.empty()) return;
    write_all(fd_, buffer_.data(), buffer_.size(), "cannot write output", partial_);
    buffer_.clear();
  }
  void sync() {
    if (fd_ < 0) return;
    flush();
    if (::fdatasync(fd_) != 0) throw_errno("cannot sync output", partial_);
  }
  uint64_t size() const { return size_; }
  // Closes and removes the partial file (a run that cannot be resumed and failed).
  void discard() {
    if (fd_ < 0) return;
    ::close(fd_);
    fd_ = -1;
    ::unlink(partial_.c_str());
  }
  void publish() {
    if (fd_ < 0) return;
    sync();
    ::close(fd_);
    fd_ = -1;
    if (std::rename(partial_.c_str(), final_.c_str()) != 0) throw_errno("cannot rename " + partial_ + " to", final_);
  }

 private:
  std::string final_, partial_, buffer_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// ---- the resume state ----

struct ResumeState {
  std::string settings;
  uint64_t done = 0, output_bytes = 0, meta_bytes = 0, warc_bytes = 0;
};

constexpr const char* kResumeMagic = "zerolm download_urls resume 1";

std::string format_state(const ResumeState& s) {
  return strprintf("%s\nsettings %s\ndone %llu\noutput_bytes %llu\nmeta_bytes %llu\nwarc_bytes %llu\n", kResumeMagic,
                   s.settings.c_str(), static_cast<unsigned long long>(s.done),
                   static_cast<unsigned long long>(s.output_bytes), static_cast<unsigned long long>(s.meta_bytes),
                   static_cast<unsigned long long>(s.warc_bytes));
}

bool read_state(const std::string& path, ResumeState& s) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return false;
  char magic[64] = {0}, settings[128] = {0};
  unsigned long long done = 0, out = 0, meta = 0, warc = 0;
  const bool ok = std::fgets(magic, sizeof magic, f) && std::string(magic) == std::string(kResumeMagic) + "\n" &&
                  std::fscanf(f, "settings %127s\ndone %llu\noutput_bytes %llu\nmeta_bytes %llu\nwarc_bytes %llu\n",
                              settings, &done, &out, &meta, &warc) == 5;
  std::fclose(f);
  if (!ok) throw Error(ErrorKind::Format, "%s: not a download_urls resume file; remove it or pass --restart", path.c_str());
  s = {settings, done, out, meta, warc};
  return true;
}

// What must not change between a run and its resumption: the input and what is written.
std::string settings_fingerprint(const DownloadOptions& o) {
  struct stat st {};
  if (o.input != "-" && ::stat(o.input.c_str(), &st) != 0) throw_errno("cannot read URL list", o.input);
  const std::string key = strprintf("input=%s size=%lld part=%llu/%llu out=%s meta=%d warc=%d max=%llu redirects=%d min=%llu v=1",
                                    o.input.c_str(), static_cast<long long>(st.st_size),
                                    static_cast<unsigned long long>(o.part_index),
                                    static_cast<unsigned long long>(o.part_count), o.output.c_str(),
                                    !o.meta_out.empty(), !o.warc_out.empty(),
                                    static_cast<unsigned long long>(o.fetch.max_bytes), o.fetch.max_redirects,
                                    static_cast<unsigned long long>(o.min_text_chars));
  return strprintf("%016llx", static_cast<unsigned long long>(XXH3_64bits(key.data(), key.size())));
}

// ---- one URL's lines ----

struct Record {
  std::string out_line, meta_line, warc;
  Reason reason = Reason::Ok;
};

// Bytes that no text page holds: NUL, or many C0 controls, in the first 4 KiB.
bool looks_binary(std::string_view body) {
  if (body.substr(0, 2) == "\xFF\xFE" || body.substr(0, 2) == "\xFE\xFF") return false;  // UTF-16 with a BOM
  const std::string_view head = body.substr(0, 4096);
  size_t controls = 0;
  for (unsigned char c : head) {
    if (c == 0) return true;
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != 0x1B) ++controls;
  }
  return controls * 10 > head.size();
}

bool is_plain_text(std::string_view content_type) {
  return ascii_istarts_with(content_type, "text/plain");
}

// The response as a WARC block: its status and header lines (less the transfer
// and content encodings, which curl undid) and the body as extracted from.
std::string http_block(const FetchResult& r) {
  std::string block;
  size_t pos = 0;
  while (pos < r.headers.size()) {
    size_t end = r.headers.find('\n', pos);
    end = end == std::string::npos ? r.headers.size() : end + 1;
    std::string_view line(r.headers.data() + pos, end - pos);
    pos = end;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    if (line.empty()) continue;
    if (ascii_istarts_with(line, "content-encoding:") || ascii_istarts_with(line, "transfer-encoding:") ||
        ascii_istarts_with(line, "content-length:"))
      continue;
    block.append(line).append("\r\n");
  }
  if (block.empty()) block = strprintf("HTTP/1.1 %ld\r\n", r.status);
  block.append("Content-Length: ").append(std::to_string(r.body.size())).append("\r\n\r\n").append(r.body);
  return block;
}

// Server- and input-given text as valid UTF-8 for the JSON lines.
std::string clean_utf8(const std::string& s) {
  std::string out;
  utf8_replace_invalid(s, out);
  return out;
}

// The requested URL, when a WARC record's target is where a redirect led (our own field:
// WARC/1.1 has none for it).
constexpr const char* kRequestedUriField = "Zerolm-Requested-URI";

Record make_record(FetchResult&& r, const DownloadOptions& o, const std::string& run_id) {
  Record rec;
  std::string text, charset;
  if (r.reason == Reason::Ok && looks_binary(r.body)) {
    r.reason = Reason::NotHtml;
    r.detail = "binary content";
  }
  if (r.reason == Reason::Ok) {
    const bool plain = is_plain_text(r.content_type);
    DecodedPage page = decode_page(r.body, r.content_type, !plain);
    charset = page.charset;
    bool too_deep = false;
    if (plain) {
      text = std::move(page.utf8);
    } else {
      ExtractedPage extracted = extract_page(page.utf8);
      text = std::move(extracted.text);
      too_deep = extracted.too_deep;
    }
    if (utf8_length(text) < o.min_text_chars) {
      r.reason = Reason::Empty;
      r.detail = too_deep ? strprintf("markup leaves over %zu elements open", kMaxOpenTags) : "no main text";
    }
    if (!o.warc_out.empty()) {
      formats::WarcFields f;
      f.type = "response";
      f.target_uri = r.final_url.empty() ? r.url : r.final_url;
      f.date = formats::warc_date_now();
      const std::string id_key = run_id + " " + std::to_string(r.index) + " " + r.url;
      XXH128_hash_t h = XXH3_128bits(id_key.data(), id_key.size());
      f.record_id = formats::warc_record_id(h.high64, h.low64);
      f.content_type = "application/http;msgtype=response";
      if (!r.remote_ip.empty()) f.extra.emplace_back("WARC-IP-Address", r.remote_ip);
      if (f.target_uri != r.url) f.extra.emplace_back(kRequestedUriField, r.url);
      rec.warc = formats::warc_record_gz(f, http_block(r));
    }
  }
  rec.reason = r.reason;
  if (r.reason == Reason::Ok) {
    JsonObject line;
    line.add("text", text).add("url", clean_utf8(r.url));
    rec.out_line = line.str() + "\n";
  }
  if (!o.meta_out.empty()) {
    JsonObject m;
    m.add("url", clean_utf8(r.url)).add("reason", reason_name(r.reason)).add("status", static_cast<int64_t>(r.status));
    m.add("final_url", clean_utf8(r.final_url)).add("content_type", clean_utf8(r.content_type));
    m.add("bytes", static_cast<uint64_t>(r.body.size())).add("seconds", r.seconds);
    m.add("attempts", static_cast<int64_t>(r.attempts)).add("charset", charset);
    m.add("text_chars", static_cast<uint64_t>(utf8_length(text))).add("detail", clean_utf8(r.detail));
    rec.meta_line = m.str() + "\n";
  }
  return rec;
}

// make_record, and a record of reason "other" if it throws (a bug or memory exhausted on one
// page must not leave a hole that stops the ordered output forever).
Record make_record_safely(FetchResult&& r, const DownloadOptions& o, const std::string& run_id) {
  FetchResult copy_for_error;
  copy_for_error.index = r.index;
  copy_for_error.url = r.url;
  try {
    return make_record(std::move(r), o, run_id);
  } catch (const std::exception& e) {
    copy_for_error.reason = Reason::Other;
    copy_for_error.detail = std::string("extraction failed: ") + e.what();
    return make_record(std::move(copy_for_error), o, run_id);
  }
}

// Writes records in index order, whatever order they are made in, and saves the resume state.
class OrderedWriter {
 public:
  // settings empty: not resumable (--from-warc), no state file, and the partial files are
  // removed if the run fails.
  ~OrderedWriter() {
    if (!settings_.empty()) return;
    output_.discard();
    meta_.discard();
    warc_.discard();
  }
  OrderedWriter(const OrderedWriter&) = delete;
  OrderedWriter& operator=(const OrderedWriter&) = delete;
  OrderedWriter(const DownloadOptions& o, const ResumeState& resumed, bool resume, std::string settings)
      : o_(o), state_path_(o.output + ".resume"), settings_(std::move(settings)), next_(resumed.done) {
    output_.open(o.output, resume, resumed.output_bytes);
    if (!o.meta_out.empty()) meta_.open(o.meta_out, resume, resumed.meta_bytes);
    if (!o.warc_out.empty()) {
      warc_.open(o.warc_out, resume, resumed.warc_bytes);
      if (!resume) {
        formats::WarcFields f;
        f.type = "warcinfo";
        f.date = formats::warc_date_now();
        XXH128_hash_t h = XXH3_128bits(f.date.data(), f.date.size());
        f.record_id = formats::warc_record_id(h.high64, h.low64);
        f.content_type = "application/warc-fields";
        warc_.write(formats::warc_record_gz(f, "software: zerolm download_urls\r\nformat: WARC File Format 1.1\r\n"));
      }
    }
    last_checkpoint_ = std::chrono::steady_clock::now();
  }

  // Thread-safe: a finished record.
  void put(uint64_t index, Record&& r) {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.emplace(index, std::move(r));
  }

  // Main thread: writes the records that are next in order; saves the state when due.
  void drain() {
    std::map<uint64_t, Record> batch;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = ready_.begin();
      uint64_t want = next_;
      while (it != ready_.end() && it->first == want) {
        ++want;
        ++it;
      }
      batch.insert(std::make_move_iterator(ready_.begin()), std::make_move_iterator(it));
      ready_.erase(ready_.begin(), it);
    }
    for (auto& [index, r] : batch) {
      output_.write(r.out_line);
      if (meta_.is_open()) meta_.write(r.meta_line);
      if (warc_.is_open()) warc_.write(r.warc);
      ++counts_[static_cast<int>(r.reason)];
      next_ = index + 1;
    }
    if (std::chrono::steady_clock::now() - last_checkpoint_ > std::chrono::duration<double>(o_.checkpoint_sec))
      checkpoint();
  }

  void checkpoint() {
    output_.sync();
    meta_.sync();
    warc_.sync();
    if (!settings_.empty())
      write_file_atomic(state_path_, format_state({settings_, next_, output_.size(), meta_.size(), warc_.size()}));
    last_checkpoint_ = std::chrono::steady_clock::now();
  }

  // Every URL written: the files take their final names (the output last) and the state goes.
  void publish() {
    meta_.publish();
    warc_.publish();
    output_.publish();
    if (!settings_.empty()) ::unlink(state_path_.c_str());
  }

  uint64_t written() const { return next_; }
  const uint64_t* counts() const { return counts_; }

 private:
  const DownloadOptions& o_;
  std::string state_path_, settings_;
  PartialFile output_, meta_, warc_;
  std::mutex mutex_;
  std::map<uint64_t, Record> ready_;
  uint64_t next_;
  uint64_t counts_[kReasonCount] = {};
  std::chrono::steady_clock::time_point last_checkpoint_;
};

// `threads` extraction threads besides the calling one, which only submits: it fetches
// and writes. The global limit is raised so that they exist even when the process may
// use one CPU (taskset), where oneTBB would otherwise give the arena no worker at all.
class ExtractionPool {
 public:
  explicit ExtractionPool(int threads)
      : limit_(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads) + 1),
        arena_(threads + 1, 1) {}
  // Leaving on an error (a full disk): the tasks still queued are cancelled, the running ones
  // finish (they use the writer, destroyed after the pool).
  ~ExtractionPool() {
    try {
      arena_.execute([&] {
        tasks_.cancel();
        tasks_.wait();
      });
    } catch (...) {  // a task's own error: the run is failing already
    }
  }
  ExtractionPool(const ExtractionPool&) = delete;
  ExtractionPool& operator=(const ExtractionPool&) = delete;
  template <class F>
  void submit(F&& f) {
    arena_.execute([&] { tasks_.run(std::forward<F>(f)); });
  }
  void wait() {
    arena_.execute([&] { tasks_.wait(); });
  }

 private:
  tbb::global_control limit_;
  tbb::task_arena arena_;
  tbb::task_group tasks_;
};

void report(Stats& stats, const uint64_t* counts, uint64_t urls, double elapsed) {
  stats.set("urls", urls);
  stats.set("pages_with_text", counts[static_cast<int>(Reason::Ok)]);
  for (int i = 1; i < kReasonCount; ++i) stats.set(std::string("no_text_") + reason_name(static_cast<Reason>(i)), counts[i]);
  stats.set("elapsed_sec", elapsed);
  stats.set("urls_per_sec", elapsed > 0 ? static_cast<double>(urls) / elapsed : 0.0);
}

uint64_t count_lines(const std::string& path) {
  if (path == "-") return 0;
  LineReader reader(path);
  std::string_view line;
  uint64_t n = 0;
  while (reader.next(line)) n += !line.empty();
  return n;
}

std::string_view trim_url(std::string_view line) {
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
  return line;
}

int run_from_warc(const DownloadOptions& o, const CommonFlags& common, Stats& stats);

}  // namespace

namespace {

// The resume state of an earlier run of these settings, if there is one (else `state` is reset).
bool load_state(const DownloadOptions& o, const std::string& settings, ResumeState& state) {
  const std::string path = o.output + ".resume";
  state = {};
  if (o.restart || o.input == "-" || !read_state(path, state)) {
    state = {};
    return false;
  }
  if (state.settings != settings)
    throw Error(ErrorKind::Usage,
                "%s was left by a run with another URL list or other outputs; rerun that command to finish it, "
                "or pass --restart to start over",
                path.c_str());
  ZLM_LOG_INF("resuming: %llu URLs already written", static_cast<unsigned long long>(state.done));
  return true;
}

// This run's URLs: the non-empty lines of its part of the list, from the first not yet written.
class UrlSource {
 public:
  UrlSource(const DownloadOptions& o, uint64_t done) : reader_(o.input), limited_(o.part_count > 1) {
    const uint64_t all = count_lines(o.input);
    const uint64_t begin = all * o.part_index / o.part_count, end = all * (o.part_index + 1) / o.part_count;
    total_ = o.input == "-" ? 0 : end - begin;
    for (uint64_t skipped = 0; skipped < begin + done && reader_.next(line_);)
      if (!trim_url(line_).empty()) ++skipped;
    read_ = done;
  }
  // The next URL while fewer than `limit` are read; nullopt when none now (`more`: whether any will come).
  std::optional<Fetcher::Work> next(uint64_t limit, bool& more) {
    more = !done_;
    while (!done_ && read_ < limit) {
      if ((limited_ && read_ >= total_) || !reader_.next(line_)) {
        done_ = true;
        more = false;
        return std::nullopt;
      }
      const std::string_view url = trim_url(line_);
      if (url.empty()) continue;
      return Fetcher::Work{read_++, std::string(url)};
    }
    return std::nullopt;
  }
  uint64_t read() const { return read_; }
  uint64_t total() const { return total_; }  // 0: not known (standard input)

 private:
  LineReader reader_;
  std::string_view line_;
  bool limited_, done_ = false;
  uint64_t total_ = 0, read_ = 0;
};

void report_fetch(Stats& stats, const FetchStats& f, uint64_t resumed_past) {
  stats.set("urls_resumed_past", resumed_past);
  stats.set("fetch_attempts", f.started);
  stats.set("retries", f.retried);
  stats.set("bytes_downloaded", f.bytes);
  stats.set("max_connections_one_host", static_cast<int64_t>(f.max_host_active));
}

}  // namespace

int run_download(const DownloadOptions& o, const CommonFlags& common, Stats& stats) {
  check_distinct_paths({{"--output", o.output}, {"--meta-out", o.meta_out}, {"--warc-out", o.warc_out}},
                       {{"url_file", o.input}, {"--from-warc", o.from_warc}});
  if (!o.from_warc.empty()) return run_from_warc(o, common, stats);
  if (o.part_count > 1 && o.input == "-") throw Error(ErrorKind::Usage, "--part needs a URL file, not standard input");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string settings = settings_fingerprint(o);
  ResumeState state;
  const bool resume = load_state(o, settings, state);
  install_stop_handlers();
  OrderedWriter writer(o, state, resume, settings);
  if (!resume) writer.checkpoint();
  UrlSource urls(o, state.done);
  Progress progress({.label = "urls", .total_items = urls.total() > state.done ? urls.total() - state.done : 0,
                     .interval_sec = common.progress_sec, .enabled = !common.no_progress && !common.quiet,
                     .extra_label = "pages"});
  const size_t window = o.window ? o.window : std::max<size_t>(1024, 16 * static_cast<size_t>(o.fetch.connections));
  ExtractionPool pool(o.threads);
  const std::string run_id = formats::warc_date_now() + " " + std::to_string(::getpid());
  Fetcher fetcher(o.fetch);
  auto next = [&](bool& more) { return urls.next(writer.written() + window, more); };
  auto done = [&](FetchResult&& r) {
    pool.submit([&, r = std::make_shared<FetchResult>(std::move(r))] {
      const uint64_t i = r->index, body_bytes = r->body.size();
      Record rec = make_record_safely(std::move(*r), o, run_id);
      progress.add(1, body_bytes, rec.reason == Reason::Ok);
      writer.put(i, std::move(rec));
    });
  };
  // Polled on every turn of the fetch loop, also after the last URL was read: written records
  // are saved while the last transfers and their retries finish.
  auto tick = [&] {
    writer.drain();
    progress.maybe_report();
    return g_signal.load() != 0;
  };
  fetcher.run(next, done, tick);
  pool.wait();
  writer.drain();
  progress.finish();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report(stats, writer.counts(), writer.written() - state.done, elapsed);
  report_fetch(stats, fetcher.stats(), state.done);
  if (g_signal.load() != 0 || writer.written() < urls.read()) {
    writer.checkpoint();
    ZLM_LOG_WRN("interrupted after %llu of %llu URLs; the same command resumes from there",
                static_cast<unsigned long long>(writer.written()), static_cast<unsigned long long>(urls.total()));
    return 130;
  }
  writer.publish();
  return 0;
}

namespace {

// A WARC response record as if just fetched: its HTTP status, type and decoded body.
FetchResult result_of(const formats::WarcRecord& rec, uint64_t index, uint64_t max_bytes) {
  FetchResult r;
  r.index = index;
  r.final_url = rec.field("WARC-Target-URI");
  r.url = rec.field(kRequestedUriField);
  if (r.url.empty()) r.url = r.final_url;
  formats::HttpResponse http;
  std::string error;
  if (!formats::parse_http_response(rec.block, http, error, max_bytes)) {
    r.reason = Reason::BadEncoding;
    r.detail = strprintf("WARC record at byte %llu: %s", static_cast<unsigned long long>(rec.offset), error.c_str());
    return r;
  }
  r.status = http.status;
  r.content_type = http.content_type;
  r.body = std::move(http.body);
  const bool ok_type = accepted_content_type(r.content_type.c_str());
  r.reason = http.status < 200 || http.status >= 300 ? Reason::HttpStatus : ok_type ? Reason::Ok : Reason::NotHtml;
  return r;
}

int run_from_warc(const DownloadOptions& o, const CommonFlags& common, Stats& stats) {
  if (!o.warc_out.empty()) throw Error(ErrorKind::Usage, "--warc-out cannot be used with --from-warc (the WARC is the input)");
  if (!o.restart && ::access((o.output + ".resume").c_str(), F_OK) == 0)
    throw Error(ErrorKind::Usage,
                "%s.resume holds an interrupted download into %s; finish it first, choose another --output, "
                "or pass --restart to discard it",
                o.output.c_str(), o.output.c_str());
  ::unlink((o.output + ".resume").c_str());  // --restart: the interrupted download is given up
  const auto t0 = std::chrono::steady_clock::now();
  formats::WarcReader reader(o.from_warc);
  ResumeState none;
  OrderedWriter writer(o, none, false, "");
  Progress progress({.label = "records", .interval_sec = common.progress_sec,
                     .enabled = !common.no_progress && !common.quiet, .extra_label = "pages"});
  ExtractionPool pool(o.threads);
  formats::WarcRecord rec;
  uint64_t index = 0, skipped = 0, unreadable = 0;
  while (reader.next(rec)) {
    if (rec.field("WARC-Type") != "response") {
      ++skipped;
      continue;
    }
    FetchResult r = result_of(rec, index, o.fetch.max_bytes);
    unreadable += r.reason == Reason::BadEncoding;
    pool.submit([&, r = std::make_shared<FetchResult>(std::move(r)), i = index] {
      Record out = make_record_safely(std::move(*r), o, "");
      progress.add(1, 0, out.reason == Reason::Ok);
      writer.put(i, std::move(out));
    });
    ++index;
    while (index > writer.written() + 4096) {
      writer.drain();
      if (index > writer.written() + 4096) std::this_thread::yield();
    }
    progress.maybe_report();
  }
  pool.wait();
  writer.drain();
  progress.finish();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report(stats, writer.counts(), index, elapsed);
  stats.set("warc_records_skipped", skipped);
  stats.set("warc_records_unreadable", unreadable);
  writer.publish();
  return 0;
}

}  // namespace

}  // namespace zlm::web
