// Many HTTP(S) fetches at once through libcurl's multi interface, politely
// (docs/design.md, "download_urls").
//
//   zlm::web::Fetcher f(options);
//   f.run(next_url, on_done);   // returns when next_url has no more and all are done
//
// One thread drives every transfer (curl_multi_poll), so a connection costs a
// socket and a buffer, not a thread or a process. The fetcher asks `next` for
// work only while it has a free slot, so memory is bounded by --n_procs and by
// the caller (which bounds its own reorder window). Per host at most
// `per_host` transfers run at once and, with `host_delay_sec`, a new transfer
// to a host starts no sooner than that after the previous one started. A
// transfer that fails with a timeout, a connection error, 429 or a 5xx is tried
// again up to `retries` times, after a back-off (Retry-After when the server
// sends one, else base x 2^attempt, capped), at the back of its host's queue.
// Redirects are followed up to `max_redirects`, to http and https only. Bodies
// are decompressed by curl (gzip, deflate, br, zstd) and capped at `max_bytes`
// after decompression (a gzip bomb stops there). Only HTML, XHTML and plain text
// bodies are kept: another Content-Type ends the transfer at its headers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace zlm::web {

struct FetchOptions {
  int connections = 10;           // transfers at once (download.py's --n_procs)
  int per_host = 4;               // transfers at once to one host
  double host_delay_sec = 0;      // least time between transfer starts to one host
  double connect_timeout_sec = 10;
  double timeout_sec = 30;        // whole transfer (download.py's --timeout)
  double low_speed_time_sec = 15; // abort when under low_speed_bytes/s for this long
  long low_speed_bytes = 100;
  int max_redirects = 10;
  int retries = 2;                // further tries after the first
  double retry_base_sec = 1;
  double retry_max_sec = 60;
  uint64_t max_bytes = 10u << 20;  // body cap after decompression
  std::string user_agent;
  std::string ca_file;            // PEM bundle instead of the system's CA store
  bool http2 = true;
};

// Why a URL gave no page (Reason::Ok: it did). Names are the meta file's "reason" values.
enum class Reason {
  Ok, BadUrl, Dns, Refused, Timeout, Tls, Connection, HttpStatus, TooManyRedirects, BadRedirect, TooLarge,
  NotHtml, BadEncoding, Empty, Other
};
const char* reason_name(Reason r);
constexpr int kReasonCount = static_cast<int>(Reason::Other) + 1;

struct FetchResult {
  uint64_t index = 0;      // the caller's number for the URL
  std::string url;         // as given
  std::string final_url;   // after redirects
  long status = 0;         // last HTTP status (0: no response)
  std::string content_type;
  std::string http_version;  // "HTTP/1.1", "HTTP/2"
  std::string headers;     // the last response's status line and header lines, CRLF-separated
  std::string body;        // decompressed; empty unless status 2xx and an accepted type
  std::string remote_ip;
  double seconds = 0;      // from the first try's start to the end of the last
  int attempts = 0;
  Reason reason = Reason::Ok;  // Ok here means "fetched"; extraction may still find no text
  std::string detail;      // curl's message or the status, for the meta file
};

struct FetchStats {
  uint64_t started = 0, retried = 0, bytes = 0;
  int max_host_active = 0;  // the most transfers seen at once on one host
};

class Fetcher {
 public:
  explicit Fetcher(FetchOptions options);
  ~Fetcher();
  Fetcher(const Fetcher&) = delete;
  Fetcher& operator=(const Fetcher&) = delete;

  struct Work {
    uint64_t index;
    std::string url;
  };
  // `next` returns the next URL to fetch or nullopt (none now: asked again
  // later; `more` says whether any will come). `done` gets every result,
  // in completion order, on the calling thread. `stop` (polled) ends the run
  // early: transfers in flight are abandoned and not reported.
  void run(const std::function<std::optional<Work>(bool& more)>& next,
           const std::function<void(FetchResult&&)>& done, const std::function<bool()>& stop);

  const FetchStats& stats() const { return stats_; }

 private:
  struct Impl;
  FetchOptions options_;
  FetchStats stats_;
};

// The media types whose text is extracted: text/html, application/xhtml+xml and
// text/plain (parameters aside); a missing Content-Type is let through (the body is sniffed).
bool accepted_content_type(const char* content_type);

// The host of an http(s) URL, lower case, without port or user info ("" when none).
std::string url_host(const std::string& url);

}  // namespace zlm::web
