// download_urls <url_file> --output raw.json [--n_procs N] [--timeout SEC] ...
// download_urls --from-warc FILE --output raw.json
// The recipe's download step: URLs to {"text", "url"} lines, in input order.
#include <cstdio>
#include <thread>

#include "common/core/build_info.h"
#include "common/core/error.h"
#include "common/io/cli.h"
#include "tools/download_urls/download.h"

int main(int argc, char** argv) {
  zlm::web::DownloadOptions opt;
  opt.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  opt.fetch.user_agent = std::string("zerolm-download_urls/") + zlm::build_version();
  zlm::CommonFlags common;
  CLI::App app{"Fetch every URL of a list and keep each page's main text as a JSON line {\"text\", \"url\"} "
               "(the recipe's raw.json), in input order; resumable: the same command continues an interrupted run."};
  app.add_option("url_file", opt.input, "URL list, one a line (plain, .gz, .xz or .zst)");
  app.add_option("--output", opt.output, "Output JSON lines (raw.json)")->required();
  // Flags of one shape: a number of seconds, or a count, within bounds.
  auto seconds = [&](const char* name, double& value, const char* help, double lo, double hi) {
    app.add_option(name, value, help)->capture_default_str()->check(zlm::finite_range(lo, hi));
  };
  auto count = [&](const char* name, int& value, const char* help, int lo, int hi) {
    app.add_option(name, value, help)->capture_default_str()->check(CLI::Range(lo, hi));
  };
  count("--n_procs,--connections", opt.fetch.connections,
        "Transfers at once (download.py's process count; here connections driven by one thread)", 1, 65536);
  seconds("--timeout", opt.fetch.timeout_sec, "Seconds a whole transfer may take", 0.1, 86400);
  seconds("--connect-timeout", opt.fetch.connect_timeout_sec, "Seconds to connect", 0.1, 3600);
  seconds("--low-speed-time", opt.fetch.low_speed_time_sec,
          "Abort a transfer slower than --low-speed-bytes per second for this many seconds", 1, 3600);
  app.add_option("--low-speed-bytes", opt.fetch.low_speed_bytes, "See --low-speed-time")
      ->capture_default_str()->check(CLI::Range(1L, 1L << 30));
  count("--per-host", opt.fetch.per_host, "Transfers at once to one host", 1, 1024);
  seconds("--host-delay", opt.fetch.host_delay_sec, "Least seconds between transfer starts to one host", 0, 3600);
  count("--retries", opt.fetch.retries, "Further tries after a timeout, a connection error, 429 or 5xx", 0, 100);
  seconds("--retry-delay", opt.fetch.retry_base_sec,
          "First back-off in seconds (doubled each try; a Retry-After header overrides it)", 0, 3600);
  seconds("--retry-max-delay", opt.fetch.retry_max_sec, "Longest back-off in seconds (Retry-After included)", 0, 86400);
  count("--max-redirects", opt.fetch.max_redirects, "Redirects followed (to http and https only)", 0, 100);
  app.add_option("--max-bytes", opt.fetch.max_bytes, "Largest body kept, after decompression")
      ->capture_default_str()->check(zlm::whole_number(1024, uint64_t{1} << 40));
  app.add_option("--user-agent", opt.fetch.user_agent, "User-Agent header")->capture_default_str();
  app.add_option("--ca-file", opt.fetch.ca_file, "PEM certificates to trust instead of the system's CA store");
  app.add_flag("--no-http2{false}", opt.fetch.http2, "Speak HTTP/1.1 only");
  app.add_option("--meta-out", opt.meta_out, "One JSON line per URL: reason, status, final URL, type, bytes, seconds");
  app.add_option("--warc-out", opt.warc_out, "Keep the responses as WARC/1.1 (one gzip member per record)");
  app.add_option("--from-warc", opt.from_warc, "Extract from the response records of this WARC instead of fetching");
  app.add_option("--min-text-chars", opt.min_text_chars, "Pages with less main text count as empty")
      ->capture_default_str()->check(zlm::whole_number(1, 1u << 30));
  app.add_option("--threads", opt.threads, "Text extraction threads (output is identical for any number)")
      ->capture_default_str()->check(zlm::thread_count());
  seconds("--checkpoint-sec", opt.checkpoint_sec,
          "Seconds between saves of the resume state (an interruption refetches at most this much)", 0, 3600);
  std::string part;
  app.add_option("--part", part,
                 "T/K: fetch only the T-th (from 0) of K equal contiguous parts of the list (K parts' outputs "
                 "concatenated are one run's)");
  app.add_flag("--restart", opt.restart, "Ignore the state of an interrupted run and start over");
  zlm::add_common_flags(app, common);
  return zlm::tool_main("download_urls", app, common, argc, argv, [&] {
    if (opt.input.empty() == opt.from_warc.empty())
      throw zlm::Error(zlm::ErrorKind::Usage, "give either a URL file or --from-warc FILE");
    if (!part.empty()) {
      unsigned long long t = 0, k = 0;
      char extra = 0;
      if (std::sscanf(part.c_str(), "%llu/%llu%c", &t, &k, &extra) != 2 || k == 0 || t >= k || part[0] == '-')
        throw zlm::Error(zlm::ErrorKind::Usage, "--part '%s': want T/K with 0 <= T < K, e.g. 3/8", part.c_str());
      opt.part_index = t;
      opt.part_count = k;
    }
    return zlm::run_with_stats("download_urls", common, [&](zlm::Stats& stats) {
      return zlm::web::run_download(opt, common, stats);
    });
  });
}
