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
  std::vector<std::string> files;  // for messages, unused for now
};
struct Result {
  std::vector<std::string> urls;
  std::vector<UrlVerdict> verdicts;
};


}  // namespace

void run(const BlacklistOptions& opt, const CommonFlags& common, Stats& stats) {
  double t0 = log_elapsed_sec();
  std::vector<NamedPath> inputs{{"--domain-blacklist", opt.domain_blacklist}, {"--add-domain-blacklist", opt.add_domain_blacklist}};
  for (const auto& in : opt.inputs) inputs.push_back({"<input>", in});
  check_distinct_paths({{"<output>", opt.output}, {"--rejected-out", opt.rejected_out}, {"--stats-out", common.stats_out}}, inputs);
  ZLM_LOG_INF("remove blacklisted urls ..");
  UrlFilterOptions fo;
  if (!opt.domain_blacklist.empty()) fo.domains = read_list(opt.domain_blacklist);
  if (!opt.add_domain_blacklist.empty()) fo.add_domains = read_list(opt.add_domain_blacklist);
  fo.public_suffix_file = opt.public_suffix_list;
  UrlFilter filter(fo);
  std::vector<std::string> files = expand(opt.inputs);
  size_t file_index = 0;
  std::unique_ptr<LineReader> reader;
  OutputFile out(opt.output);
  std::unique_ptr<OutputFile> rejected;
  if (!opt.rejected_out.empty()) rejected = std::make_unique<OutputFile>(opt.rejected_out);
  uint64_t counts[6] = {0, 0, 0, 0, 0, 0}, total = 0;
  HashSet128 seen;
  Progress progress({.label = "urls", .interval_sec = common.progress_sec, .enabled = !common.no_progress && !common.quiet});
  auto status = [&](const char* what) {
    ZLM_LOG_INF("%s | time elapsed (s): %.2f | number of urls: %lu | domain blacklisted: %lu | extention blacklisted: %lu | "
                "short urls (<=8): %lu | malformed urls: %lu | duplicate urls: %lu",
                what, log_elapsed_sec() - t0, (unsigned long)total, (unsigned long)counts[1], (unsigned long)counts[2],
                (unsigned long)counts[3], (unsigned long)counts[4], (unsigned long)counts[5]);
  };
  double next_status = t0 + common.progress_sec;
  run_ordered_pipeline<Batch, Result>(
      opt.threads, static_cast<size_t>(opt.threads) * 2 + 2,
      [&](Batch& b) {
        b.urls.clear();
        while (b.urls.size() < 16384) {
          if (!reader) {
            if (file_index >= files.size()) break;
            reader = std::make_unique<LineReader>(files[file_index]);
          }
          std::string_view line;
          if (!reader->next(line)) {
            reader.reset();
            ++file_index;
            continue;
          }
          b.urls.emplace_back(python_strip(line));
        }
        return !b.urls.empty();
      },
      [&](Batch& b, Result& r) {
        r.verdicts.resize(b.urls.size());
        for (size_t i = 0; i < b.urls.size(); ++i) r.verdicts[i] = filter.check(b.urls[i]);
        r.urls.swap(b.urls);
      },
      [&](Result& r) {
        for (size_t i = 0; i < r.urls.size(); ++i) {
          const std::string& url = r.urls[i];
          UrlVerdict v = r.verdicts[i];
          if (v == UrlVerdict::Accepted) {
            XXH128_hash_t h = XXH3_128bits(url.data(), url.size());
            if (!seen.insert(h.low64, h.high64)) v = UrlVerdict::Duplicate;
          }
          ++counts[static_cast<int>(v)];
          ++total;
          if (v == UrlVerdict::Accepted) {
            out.write(url);
            out.put('\n');
          } else if (rejected) {
            rejected->write(url_verdict_name(v));
            rejected->put('\t');
            rejected->write(url);
            rejected->put('\n');
          }
        }
        progress.add(r.urls.size(), 0);
        progress.set_kept(counts[0]);
        if (!common.quiet && !common.no_progress && log_elapsed_sec() >= next_status) {
          status("PROGRESS");
          next_status = log_elapsed_sec() + common.progress_sec;
        }
      });
  progress.finish();
  status("FINAL");
  ZLM_LOG_INF("> writing cleaned up url list to %s", opt.output.c_str());
  out.commit();
  if (rejected) rejected->commit();
  ZLM_LOG_INF("done :-)");
  stats.set("files_in", static_cast<uint64_t>(files.size()));
  stats.set("urls_in", total);
  stats.set("urls_accepted", counts[0]);
  stats.set("urls_domain_blacklisted", counts[1]);
  stats.set("urls_extension_blacklisted", counts[2]);
  stats.set("urls_short", counts[3]);
  stats.set("urls_malformed", counts[4]);
  stats.set("urls_duplicate", counts[5]);
  stats.set("blacklisted_domains", static_cast<uint64_t>(filter.num_domains()));
  double el = log_elapsed_sec() - t0;
  stats.set("elapsed_sec", el);
  stats.set("urls_per_sec", el > 0 ? static_cast<double>(total) / el : 0.0);
}

}  // namespace zlm::blacklist_urls
