#include "tools/blacklist_urls/blacklist_urls.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "common/core/error.h"
#include "tools/blacklist_urls/hash_set128.h"
#include "common/io/line_reader.h"
#include "common/core/log.h"
#include "common/core/output_file.h"
#include "common/io/pipeline.h"
#include "common/core/progress.h"
#include "tools/blacklist_urls/url_filter.h"

namespace zlm::blacklist_urls {

namespace {

std::vector<std::string> expand(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (in != "-" && std::filesystem::is_directory(in, ec)) {
      std::vector<std::string> txt;
      for (const auto& e : std::filesystem::directory_iterator(in))
        if (e.is_regular_file() && e.path().extension() == ".txt") txt.push_back(e.path().string());
      std::sort(txt.begin(), txt.end());
      ZLM_LOG_INF("> found %zu files in %s", txt.size(), in.c_str());
      files.insert(files.end(), txt.begin(), txt.end());
    } else {
      files.push_back(in);
    }
  }
  if (files.empty()) throw Error(ErrorKind::Usage, "no input files (a directory needs *.txt URL lists)");
  return files;
}

std::vector<std::string> read_list(const std::string& path) {
  std::vector<std::string> out;
  LineReader r(path);
  std::string_view line;
  while (r.next(line)) {
    line = python_strip(line);
    if (!line.empty() && line[0] != '#') out.emplace_back(line);
  }
  return out;
}

struct Batch {
  std::vector<std::string> urls;
};
struct Result {
  std::vector<std::string> urls;
  std::vector<UrlVerdict> verdicts;
};

// The read stage: the input files' lines, stripped as Python's str.strip(), in batches.
class UrlSource {
 public:
  explicit UrlSource(const std::vector<std::string>& files) : files_(files) {}
  bool next_batch(Batch& b) {
    b.urls.clear();
    while (b.urls.size() < 16384) {
      if (!reader_) {
        if (file_index_ >= files_.size()) break;
        reader_ = std::make_unique<LineReader>(files_[file_index_]);
      }
      std::string_view line;
      if (!reader_->next(line)) {
        reader_.reset();
        ++file_index_;
        continue;
      }
      b.urls.emplace_back(python_strip(line));
    }
    return !b.urls.empty();
  }

 private:
  const std::vector<std::string>& files_;
  size_t file_index_ = 0;
  std::unique_ptr<LineReader> reader_;
};

// The write stage: a URL the filter accepts is a duplicate when an earlier one
// had the same bytes (128-bit hash); accepted URLs to the output in
// first-seen order, the others with their reason to --rejected-out; Megatron's
// status line by time.
class UrlSink {
 public:
  UrlSink(const BlacklistOptions& opt, const CommonFlags& common, double t0)
      : common_(common), out_(opt.output), t0_(t0), next_status_(t0 + common.progress_sec),
        progress_({.label = "urls", .interval_sec = common.progress_sec, .enabled = !common.no_progress && !common.quiet}) {
    if (!opt.rejected_out.empty()) rejected_ = std::make_unique<OutputFile>(opt.rejected_out);
  }
  void write(const Result& r) {
    for (size_t i = 0; i < r.urls.size(); ++i) take(r.urls[i], r.verdicts[i]);
    progress_.add(r.urls.size(), 0);
    progress_.set_kept(counts_[0]);
    if (!common_.quiet && !common_.no_progress && log_elapsed_sec() >= next_status_) {
      status("PROGRESS");
      next_status_ = log_elapsed_sec() + common_.progress_sec;
    }
  }
  void finish(const std::string& output) {
    progress_.finish();
    status("FINAL");
    ZLM_LOG_INF("> writing cleaned up url list to %s", output.c_str());
    out_.commit();
    if (rejected_) rejected_->commit();
  }
  uint64_t total() const { return total_; }
  uint64_t count(UrlVerdict v) const { return counts_[static_cast<int>(v)]; }

 private:
  void take(const std::string& url, UrlVerdict v) {
    if (v == UrlVerdict::Accepted) {
      const XXH128_hash_t h = XXH3_128bits(url.data(), url.size());
      if (!seen_.insert(h.low64, h.high64)) v = UrlVerdict::Duplicate;
    }
    ++counts_[static_cast<int>(v)];
    ++total_;
    if (v == UrlVerdict::Accepted) {
      out_.write(url);
      out_.put('\n');
    } else if (rejected_) {
      rejected_->write(url_verdict_name(v));
      rejected_->put('\t');
      rejected_->write(url);
      rejected_->put('\n');
    }
  }
  void status(const char* what) const {
    ZLM_LOG_INF("%s | time elapsed (s): %.2f | number of urls: %lu | domain blacklisted: %lu | extention blacklisted: %lu | "
                "short urls (<=8): %lu | malformed urls: %lu | duplicate urls: %lu",
                what, log_elapsed_sec() - t0_, (unsigned long)total_, (unsigned long)counts_[1], (unsigned long)counts_[2],
                (unsigned long)counts_[3], (unsigned long)counts_[4], (unsigned long)counts_[5]);
  }

  const CommonFlags& common_;
  OutputFile out_;
  std::unique_ptr<OutputFile> rejected_;
  HashSet128 seen_;
  uint64_t counts_[6] = {0, 0, 0, 0, 0, 0}, total_ = 0;
  double t0_, next_status_;
  Progress progress_;
};

}  // namespace

void run(const BlacklistOptions& opt, const CommonFlags& common, Stats& stats) {
  const double t0 = log_elapsed_sec();
  std::vector<NamedPath> inputs{{"--domain-blacklist", opt.domain_blacklist}, {"--add-domain-blacklist", opt.add_domain_blacklist}};
  for (const auto& in : opt.inputs) inputs.push_back({"<input>", in});
  check_distinct_paths({{"<output>", opt.output}, {"--rejected-out", opt.rejected_out}, {"--stats-out", common.stats_out}}, inputs);
  ZLM_LOG_INF("remove blacklisted urls ..");
  UrlFilterOptions fo;
  if (!opt.domain_blacklist.empty()) fo.domains = read_list(opt.domain_blacklist);
  if (!opt.add_domain_blacklist.empty()) fo.add_domains = read_list(opt.add_domain_blacklist);
  fo.public_suffix_file = opt.public_suffix_list;
  const UrlFilter filter(fo);
  const std::vector<std::string> files = expand(opt.inputs);
  UrlSource source(files);
  UrlSink sink(opt, common, t0);
  run_ordered_pipeline<Batch, Result>(
      opt.threads, [&](Batch& b) { return source.next_batch(b); },
      [&](Batch& b, Result& r) {
        r.verdicts.resize(b.urls.size());
        for (size_t i = 0; i < b.urls.size(); ++i) r.verdicts[i] = filter.check(b.urls[i]);
        r.urls.swap(b.urls);
      },
      [&](Result& r) { sink.write(r); });
  sink.finish(opt.output);
  ZLM_LOG_INF("done :-)");
  stats.set("files_in", static_cast<uint64_t>(files.size()));
  stats.set("urls_in", sink.total());
  stats.set("urls_accepted", sink.count(UrlVerdict::Accepted));
  stats.set("urls_domain_blacklisted", sink.count(UrlVerdict::DomainBlacklist));
  stats.set("urls_extension_blacklisted", sink.count(UrlVerdict::ExtensionBlacklist));
  stats.set("urls_short", sink.count(UrlVerdict::Short));
  stats.set("urls_malformed", sink.count(UrlVerdict::Malformed));
  stats.set("urls_duplicate", sink.count(UrlVerdict::Duplicate));
  stats.set("blacklisted_domains", static_cast<uint64_t>(filter.num_domains()));
  const double el = log_elapsed_sec() - t0;
  stats.set("elapsed_sec", el);
  stats.set("urls_per_sec", el > 0 ? static_cast<double>(sink.total()) / el : 0.0);
}

}  // namespace zlm::blacklist_urls
