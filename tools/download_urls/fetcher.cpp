#include "tools/download_urls/fetcher.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <queue>
#include <unordered_map>
#include <vector>

#include "common/core/ascii.h"
#include "common/core/error.h"

namespace zlm::web {
namespace {

double now_sec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

bool accepted_content_type(const char* content_type) {
  if (!content_type || !*content_type) return true;
  const std::string t = ascii_lower(content_type);
  for (std::string_view ok : {"text/html", "application/xhtml+xml", "text/plain"})
    if (t.compare(0, ok.size(), ok) == 0 && (t.size() == ok.size() || t[ok.size()] == ';' || t[ok.size()] == ' '))
      return true;
  return false;
}

namespace {

bool retryable(Reason r, long status) {
  return r == Reason::Timeout || r == Reason::Connection || (r == Reason::HttpStatus && (status == 429 || status >= 500));
}

// A small deterministic jitter (0.75-1.25) from the URL: retries of many URLs spread out, runs repeat.
double jitter(const std::string& url, int attempt) {
  uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(attempt);
  for (unsigned char c : url) h = (h ^ c) * 1099511628211ull;
  return 0.75 + static_cast<double>(h % 1000) / 2000.0;
}

// Why a transfer that libcurl ended with `code` gave no page.
Reason reason_of(CURLcode code, bool redirected) {
  switch (code) {
    case CURLE_FILESIZE_EXCEEDED: return Reason::TooLarge;
    case CURLE_URL_MALFORMAT: return Reason::BadUrl;
    case CURLE_UNSUPPORTED_PROTOCOL: return redirected ? Reason::BadRedirect : Reason::BadUrl;
    case CURLE_COULDNT_RESOLVE_HOST: case CURLE_COULDNT_RESOLVE_PROXY: return Reason::Dns;
    case CURLE_COULDNT_CONNECT: return Reason::Refused;
    case CURLE_OPERATION_TIMEDOUT: return Reason::Timeout;
    case CURLE_TOO_MANY_REDIRECTS: return Reason::TooManyRedirects;
    case CURLE_BAD_CONTENT_ENCODING: return Reason::BadEncoding;
    case CURLE_SSL_CONNECT_ERROR: case CURLE_PEER_FAILED_VERIFICATION: case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER: case CURLE_SSL_CACERT_BADFILE: case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH: case CURLE_SSL_INVALIDCERTSTATUS: case CURLE_SSL_CRL_BADFILE:
      return Reason::Tls;
    case CURLE_RECV_ERROR: case CURLE_SEND_ERROR: case CURLE_GOT_NOTHING: case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2: case CURLE_HTTP2_STREAM: case CURLE_WEIRD_SERVER_REPLY: case CURLE_HTTP3:
      return Reason::Connection;
    default:
      return Reason::Other;
  }
}

}  // namespace

const char* reason_name(Reason r) {
  switch (r) {
    case Reason::Ok: return "ok";
    case Reason::BadUrl: return "bad_url";
    case Reason::Dns: return "dns";
    case Reason::Refused: return "refused";
    case Reason::Timeout: return "timeout";
    case Reason::Tls: return "tls";
    case Reason::Connection: return "connection";
    case Reason::HttpStatus: return "http_status";
    case Reason::TooManyRedirects: return "too_many_redirects";
    case Reason::BadRedirect: return "bad_redirect";
    case Reason::TooLarge: return "too_large";
    case Reason::NotHtml: return "not_html";
    case Reason::BadEncoding: return "bad_encoding";
    case Reason::Empty: return "empty";
    case Reason::Other: return "other";
  }
  return "other";
}

std::string url_host(const std::string& url) {
  size_t start;
  if (ascii_istarts_with(url, "http://")) {
    start = 7;
  } else if (ascii_istarts_with(url, "https://")) {
    start = 8;
  } else {
    return {};
  }
  size_t end = url.find_first_of("/?#", start);
  if (end == std::string::npos) end = url.size();
  std::string authority = url.substr(start, end - start);
  const size_t at = authority.rfind('@');
  if (at != std::string::npos) authority.erase(0, at + 1);
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    return close == std::string::npos ? std::string{} : ascii_lower(authority.substr(0, close + 1));
  }
  const size_t colon = authority.find(':');
  if (colon != std::string::npos) authority.erase(colon);
  return ascii_lower(authority);
}

struct Fetcher::Impl {
  struct Job {
    FetchResult result;
    std::string host;
    double first_start = 0;
    double ready_at = 0;  // for a retry: not before
  };
  struct Transfer {
    CURL* easy = nullptr;
    Job job;
    uint64_t max_bytes = 0;
    bool checked_type = false, wrong_type = false, too_large = false, keep_body = false;
  };
  struct Host {
    int active = 0;
    double next_start = 0;
    std::deque<Job> queue;
  };

  Impl(const FetchOptions& o, FetchStats& s) : opt(o), stats(s) {
    multi = curl_multi_init();
    ZLM_CHECK(multi != nullptr, "curl_multi_init");
    curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(opt.per_host));
    curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, static_cast<long>(opt.connections));
    curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, static_cast<long>(opt.connections));
    curl_multi_setopt(multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
  }
  ~Impl() {
    for (auto& [easy, t] : active) {
      curl_multi_remove_handle(multi, easy);
      curl_easy_cleanup(easy);
    }
    for (CURL* e : idle) curl_easy_cleanup(e);
    curl_multi_cleanup(multi);
  }

  static size_t on_header(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const size_t bytes = size * n;
    std::string_view line(data, bytes);
    if (line.substr(0, 5) == "HTTP/") {
      t->job.result.headers.clear();  // a new response (after a redirect or a 100 Continue)
      t->job.result.http_version = std::string(line.substr(0, line.find(' ')));
    }
    t->job.result.headers.append(line);
    return bytes;
  }

  static size_t on_body(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const size_t bytes = size * n;
    if (!t->checked_type) {
      t->checked_type = true;
      long status = 0;
      char* type = nullptr;
      curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
      curl_easy_getinfo(t->easy, CURLINFO_CONTENT_TYPE, &type);
      t->keep_body = status >= 200 && status < 300;
      if (t->keep_body && !accepted_content_type(type)) {
        t->wrong_type = true;
        return 0;  // ends the transfer: no need for the body
      }
    }
    if (!t->keep_body) return bytes;  // an error page: read (the connection stays usable) but not kept
    if (t->job.result.body.size() + bytes > t->max_bytes) {
      t->too_large = true;
      return 0;
    }
    t->job.result.body.append(data, bytes);
    return bytes;
  }

  CURL* take_handle() {
    if (!idle.empty()) {
      CURL* e = idle.back();
      idle.pop_back();
      curl_easy_reset(e);
      return e;
    }
    CURL* e = curl_easy_init();
    ZLM_CHECK(e != nullptr, "curl_easy_init");
    return e;
  }

  void start(Job job);
  void finish(CURL* easy, CURLcode code);
  void classify(Transfer& t, CURLcode code, double& retry_after);
  void enqueue(Job job);
  void release_retries(double now);
  void take_work(const std::function<std::optional<Work>(bool& more)>& next, bool& more);
  double start_allowed(double now);
  bool reap();

  const FetchOptions& opt;
  FetchStats& stats;
  CURLM* multi = nullptr;
  std::unordered_map<CURL*, std::unique_ptr<Transfer>> active;
  std::vector<CURL*> idle;
  std::unordered_map<std::string, Host> hosts;
  std::vector<std::string> waiting_hosts;  // hosts with a non-empty queue (may hold stale entries)
  std::vector<Job> retries;                // a min-heap on ready_at
  // Idle hosts whose --host-delay has not passed: forgotten once it has (a min-heap on the time).
  std::priority_queue<std::pair<double, std::string>, std::vector<std::pair<double, std::string>>,
                      std::greater<>> cooling;
  std::function<void(FetchResult&&)> done;
  size_t queued = 0;
};

void Fetcher::Impl::start(Job job) {
  Host& host = hosts[job.host];
  ++host.active;
  stats.max_host_active = std::max(stats.max_host_active, host.active);
  const double t0 = now_sec();
  host.next_start = t0 + opt.host_delay_sec;
  if (job.first_start == 0) job.first_start = t0;
  ++job.result.attempts;
  ++stats.started;
  auto t = std::make_unique<Transfer>();
  t->easy = take_handle();
  t->max_bytes = opt.max_bytes;
  t->job = std::move(job);
  t->job.result.body.clear();
  t->job.result.headers.clear();
  CURL* e = t->easy;
  curl_easy_setopt(e, CURLOPT_URL, t->job.result.url.c_str());
  curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Impl::on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Impl::on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(e, CURLOPT_MAXREDIRS, static_cast<long>(opt.max_redirects));
  curl_easy_setopt(e, CURLOPT_AUTOREFERER, 1L);
  curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");  // every encoding this libcurl decodes
  curl_easy_setopt(e, CURLOPT_COOKIEFILE, "");       // cookies kept across this URL's redirects,
  curl_easy_setopt(e, CURLOPT_COOKIELIST, "ALL");    // and none from the handle's earlier URLs
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opt.connect_timeout_sec * 1000));
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(opt.timeout_sec * 1000));
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, opt.low_speed_bytes);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, static_cast<long>(std::ceil(opt.low_speed_time_sec)));
  curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(opt.max_bytes));
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, opt.http2 ? CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
  if (!opt.user_agent.empty()) curl_easy_setopt(e, CURLOPT_USERAGENT, opt.user_agent.c_str());
  if (!opt.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, opt.ca_file.c_str());
  curl_multi_add_handle(multi, e);
  active.emplace(e, std::move(t));
}

void Fetcher::Impl::classify(Transfer& t, CURLcode code, double& retry_after) {
  FetchResult& r = t.job.result;
  long status = 0, redirects = 0;
  char* type = nullptr;
  char* effective = nullptr;
  char* ip = nullptr;
  curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_getinfo(t.easy, CURLINFO_REDIRECT_COUNT, &redirects);
  curl_easy_getinfo(t.easy, CURLINFO_CONTENT_TYPE, &type);
  curl_easy_getinfo(t.easy, CURLINFO_EFFECTIVE_URL, &effective);
  curl_easy_getinfo(t.easy, CURLINFO_PRIMARY_IP, &ip);
  curl_off_t after = -1;
  curl_easy_getinfo(t.easy, CURLINFO_RETRY_AFTER, &after);
  retry_after = after > 0 ? static_cast<double>(after) : -1;
  r.status = status;
  r.content_type = type ? type : "";
  r.final_url = effective ? effective : r.url;
  r.remote_ip = ip ? ip : "";
  r.detail.clear();
  if (code == CURLE_OK) {
    const bool success = status >= 200 && status < 300;
    if (!success) {
      r.reason = Reason::HttpStatus;
      r.detail = "HTTP " + std::to_string(status);
      r.body.clear();
    } else if (!accepted_content_type(type)) {
      r.reason = Reason::NotHtml;
      r.detail = r.content_type;
      r.body.clear();
    } else {
      r.reason = Reason::Ok;
    }
    return;
  }
  r.detail = curl_easy_strerror(code);
  r.body.clear();
  r.reason = reason_of(code, redirects > 0);
  if (code == CURLE_WRITE_ERROR) {  // our callbacks ended the transfer
    r.reason = t.too_large ? Reason::TooLarge : t.wrong_type ? Reason::NotHtml : Reason::Other;
    if (t.wrong_type) r.detail = r.content_type;
    if (t.too_large) r.detail = "body over " + std::to_string(opt.max_bytes) + " bytes";
  }
}

void Fetcher::Impl::finish(CURL* easy, CURLcode code) {
  auto it = active.find(easy);
  ZLM_CHECK(it != active.end(), "a finished transfer that was not started");
  std::unique_ptr<Transfer> t = std::move(it->second);
  active.erase(it);
  curl_multi_remove_handle(multi, easy);
  double retry_after = -1;
  classify(*t, code, retry_after);
  curl_off_t down = 0;
  curl_easy_getinfo(easy, CURLINFO_SIZE_DOWNLOAD_T, &down);
  stats.bytes += static_cast<uint64_t>(down);
  idle.push_back(easy);
  auto host = hosts.find(t->job.host);
  ZLM_CHECK(host != hosts.end(), "a transfer's host was forgotten");
  --host->second.active;
  if (!host->second.queue.empty()) {
    waiting_hosts.push_back(t->job.host);
  } else if (host->second.active == 0) {
    if (host->second.next_start <= now_sec()) {
      hosts.erase(host);
    } else {
      cooling.emplace(host->second.next_start, t->job.host);
    }
  }
  Job job = std::move(t->job);
  const double t1 = now_sec();
  job.result.seconds = t1 - job.first_start;
  if (retryable(job.result.reason, job.result.status) && job.result.attempts <= opt.retries) {
    double delay = opt.retry_base_sec * std::pow(2.0, job.result.attempts - 1) * jitter(job.result.url, job.result.attempts);
    if (retry_after >= 0) delay = retry_after;
    job.ready_at = t1 + std::min(delay, opt.retry_max_sec);
    ++stats.retried;
    retries.push_back(std::move(job));
    std::push_heap(retries.begin(), retries.end(), [](const Job& a, const Job& b) { return a.ready_at > b.ready_at; });
    return;
  }
  done(std::move(job.result));
}

Fetcher::Fetcher(FetchOptions options) : options_(std::move(options)) {
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (init != CURLE_OK) throw Error(ErrorKind::Internal, "curl_global_init failed: %s", curl_easy_strerror(init));
}

Fetcher::~Fetcher() = default;

void Fetcher::Impl::enqueue(Job job) {
  const std::string host = job.host;
  hosts[host].queue.push_back(std::move(job));
  waiting_hosts.push_back(host);
  ++queued;
}

// Retries whose back-off is over go to the back of their host's queue.
void Fetcher::Impl::release_retries(double now) {
  const auto later = [](const Job& a, const Job& b) { return a.ready_at > b.ready_at; };
  while (!retries.empty() && retries.front().ready_at <= now) {
    std::pop_heap(retries.begin(), retries.end(), later);
    Job job = std::move(retries.back());
    retries.pop_back();
    enqueue(std::move(job));
  }
}

// New work while there is room to queue it; a URL without an http(s) host is reported at once.
void Fetcher::Impl::take_work(const std::function<std::optional<Work>(bool& more)>& next, bool& more) {
  const size_t queue_limit = static_cast<size_t>(opt.connections) * 4;
  while (more && queued < queue_limit) {
    std::optional<Work> w = next(more);
    if (!w) break;
    Job job;
    job.result.index = w->index;
    job.result.url = std::move(w->url);
    job.host = url_host(job.result.url);
    if (job.host.empty()) {
      job.result.reason = Reason::BadUrl;
      job.result.detail = "not an http or https URL with a host";
      done(std::move(job.result));
      continue;
    }
    enqueue(std::move(job));
  }
}

// Starts what the caps allow; returns when a host's delay next lets a transfer start.
double Fetcher::Impl::start_allowed(double now) {
  double next_wake = now + 0.25;
  std::vector<std::string> still_waiting;
  std::sort(waiting_hosts.begin(), waiting_hosts.end());
  waiting_hosts.erase(std::unique(waiting_hosts.begin(), waiting_hosts.end()), waiting_hosts.end());
  for (const std::string& name : waiting_hosts) {
    auto it = hosts.find(name);
    if (it == hosts.end()) continue;
    Host& host = it->second;
    while (!host.queue.empty() && host.active < opt.per_host && static_cast<int>(active.size()) < opt.connections &&
           now_sec() >= host.next_start) {
      Job job = std::move(host.queue.front());
      host.queue.pop_front();
      --queued;
      start(std::move(job));
    }
    if (!host.queue.empty()) {
      still_waiting.push_back(name);
      if (host.next_start > now) next_wake = std::min(next_wake, host.next_start);
    } else if (host.active == 0) {
      if (host.next_start <= now) {
        hosts.erase(it);  // forget idle hosts (a crawl meets millions)
      } else {
        cooling.emplace(host.next_start, name);
      }
    }
  }
  waiting_hosts.swap(still_waiting);
  while (!cooling.empty() && cooling.top().first <= now) {
    auto it = hosts.find(cooling.top().second);
    if (it != hosts.end() && it->second.active == 0 && it->second.queue.empty() && it->second.next_start <= now)
      hosts.erase(it);
    cooling.pop();
  }
  if (!retries.empty()) next_wake = std::min(next_wake, retries.front().ready_at);
  return next_wake;
}

// Lets libcurl move every transfer; reports the finished ones. True when any finished.
bool Fetcher::Impl::reap() {
  int running = 0;
  curl_multi_perform(multi, &running);
  int left = 0;
  bool finished = false;
  while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
    if (msg->msg != CURLMSG_DONE) continue;
    finish(msg->easy_handle, msg->data.result);
    finished = true;
  }
  return finished;
}

void Fetcher::run(const std::function<std::optional<Work>(bool& more)>& next,
                  const std::function<void(FetchResult&&)>& done, const std::function<bool()>& stop) {
  Impl impl(options_, stats_);
  impl.done = done;
  bool more = true;
  while (!stop()) {
    const double now = now_sec();
    impl.release_retries(now);
    impl.take_work(next, more);
    const double next_wake = impl.start_allowed(now);
    if (impl.active.empty() && impl.queued == 0 && impl.retries.empty() && !more) break;
    if (impl.reap()) continue;  // freed slots: start the next transfers before waiting
    int wait_ms = std::clamp(static_cast<int>((next_wake - now_sec()) * 1000), 0, 250);
    if (impl.active.empty()) wait_ms = std::clamp(wait_ms, 1, 5);  // waiting on the caller, a back-off or a delay
    curl_multi_poll(impl.multi, nullptr, 0, wait_ms, nullptr);
  }
}

}  // namespace zlm::web
