#include "tools/blacklist_urls/url_filter.h"

#include <libpsl.h>
#include <unicode/uchar.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "common/core/error.h"
#include "common/core/utf8.h"

namespace zlm {

const char* url_verdict_name(UrlVerdict v) {
  switch (v) {
    case UrlVerdict::Accepted: return "accepted";
    case UrlVerdict::DomainBlacklist: return "domain_blacklist";
    case UrlVerdict::ExtensionBlacklist: return "extension_blacklist";
    case UrlVerdict::Short: return "short";
    case UrlVerdict::Malformed: return "malformed";
    case UrlVerdict::Duplicate: return "duplicate";
  }
  return "?";
}

const std::vector<std::string>& UrlFilter::builtin_domains() {
  static const std::vector<std::string> kDomains = {
      "500px", "aapks", "akamaihd", "amazon", "apple", "artifactfire", "artstation", "awwni", "bandcamp",
      "battleforthenet", "coinscalendar", "dailymotion", "deviantart", "discord", "discordapp", "dlapkandroid",
      "dropbox", "e621", "ebay", "edealinfo", "erome", "eroshare", "explosm", "facebook", "fbcdn", "flickr",
      "furaffinity", "futhead", "gatopardo", "gfycat", "gifsound", "gifsoup", "giphy", "github", "google", "gunprime",
      "gyazo", "horsefucker", "hotdealstar", "imagefap", "imageshack", "imgflip", "imgur", "instagram", "karmadecay",
      "kryptocal", "kym-cdn", "liveleak", "livememe", "lmgtfy", "magaimg", "memegenerator", "minorplanetcenter",
      "minus", "mobafire", "morejpeg", "nocookie", "pcpartpicker", "photobucket", "pinimg", "pinterest", "pixiv",
      "pornhub", "prntscr", "puu", "qkme", "quickmeme", "radd", "redd", "reddit", "reddit-stream", "redditlog",
      "redditmedia", "reddituploads", "redtube", "reupp", "reverb", "roanoke", "rollingstone", "sli", "soundcloud",
      "soundgasm", "spankbang", "spotify", "strawpoll", "streamable", "timeanddate", "tinypic", "touhouradio",
      "tumblr", "twimg", "twitch", "twitter", "vid", "vimeo", "vine", "vkaao", "vocaroo", "voyagefusion", "walmart",
      "wciu", "wikimedia", "wikipedia", "xhamster", "xkcd", "xvideos", "youtu", "youtube", "youtubedoubler", "ytimg",
      "zillexplorer"};
  return kDomains;
}

const std::vector<std::string>& UrlFilter::builtin_extensions() {
  static const std::vector<std::string> kExtensions = {
      ".3gp", ".7z", ".aif", ".apk", ".app", ".avi", ".bin", ".bmp", ".bz2", ".css", ".csv", ".dat", ".deb", ".dmg",
      ".doc", ".docx", ".exe", ".gif", ".gifv", ".gz", ".iso", ".jar", ".jpeg", ".jpg", ".js", ".log", ".mid",
      ".midi", ".mkv", ".mov", ".mp3", ".mp4", ".mpeg", ".mpg", ".ogg", ".ogv", ".otf", ".pdf", ".pkg", ".png",
      ".pps", ".ppt", ".pptx", ".psd", ".py", ".qt", ".ram", ".rar", ".sql", ".svg", ".swf", ".tar.gz", ".tar",
      ".tgz", ".tiff", ".ttf", ".txt", ".wav", ".webm", ".wma", ".wmv", ".xls", ".xlsx", ".xml", ".xz", ".zip"};
  return kExtensions;
}

UrlFilter::UrlFilter(const UrlFilterOptions& options) {
  if (!options.public_suffix_file.empty()) {
    psl_ = psl_load_file(options.public_suffix_file.c_str());
    if (!psl_) throw Error(ErrorKind::Io, "cannot load the public suffix list '%s'", options.public_suffix_file.c_str());
    own_psl_ = true;
  } else {
    psl_ = psl_latest(nullptr);  // the system list (Debian's publicsuffix), else libpsl's built-in copy
    own_psl_ = psl_ != nullptr && psl_ != psl_builtin();
    if (!psl_) psl_ = psl_builtin();
    if (!psl_) throw Error(ErrorKind::Io, "no public suffix list available ---> HINT: apt-get install publicsuffix");
  }
  const auto& base = options.domains.empty() ? builtin_domains() : options.domains;
  for (const auto& d : base) domains_.insert(d);
  for (const auto& d : options.add_domains) domains_.insert(d);
  for (const auto& e : builtin_extensions())
    if (e.find('.', 1) == std::string::npos) extensions_.insert(e);
}

UrlFilter::~UrlFilter() {
  if (own_psl_) psl_free(const_cast<psl_ctx_t*>(psl_));
}

namespace {

// Python's str.isspace().
bool py_space(uint32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
  if (cp < 0x80) return false;
  if (cp == 0x85) return true;
  int8_t type = u_charType(static_cast<UChar32>(cp));
  if (type == U_SPACE_SEPARATOR || type == U_LINE_SEPARATOR || type == U_PARAGRAPH_SEPARATOR) return true;
  UCharDirection dir = u_charDirection(static_cast<UChar32>(cp));
  return dir == U_WHITE_SPACE_NEUTRAL || dir == U_BLOCK_SEPARATOR || dir == U_SEGMENT_SEPARATOR;
}

bool py_digit(uint32_t cp) { return (cp >= '0' && cp <= '9') || (cp >= 0x80 && u_charType(static_cast<UChar32>(cp)) == U_DECIMAL_DIGIT_NUMBER); }

// Decodes one code point (an ill-formed byte reads as U+FFFD, length 1).
size_t next_cp(std::string_view s, size_t i, uint32_t* cp) {
  size_t n = utf8_decode(s.substr(i), cp);
  if (n == 0) {
    *cp = 0xFFFD;
    n = 1;
  }
  return n;
}

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

bool ascii_alnum(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

bool is_label(std::string_view l) {
  if (l.empty() || l.size() > 63 || !ascii_alnum(l.front()) || !ascii_alnum(l.back())) return false;
  for (char c : l)
    if (!ascii_alnum(c) && c != '-') return false;
  return true;
}

bool is_domain_host(std::string_view host) {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);  // the optional trailing dot of the TLD
  size_t last = host.rfind('.');
  if (last == std::string_view::npos) return false;  // at least one label before the TLD
  std::string_view tld = host.substr(last + 1);
  if (tld.size() < 2) return false;
  for (char c : tld)
    if (!ascii_alnum(c) && c != '-') return false;
  size_t start = 0;
  while (start <= last) {
    size_t dot = host.find('.', start);
    if (!is_label(host.substr(start, dot - start))) return false;
    start = dot + 1;
  }
  return true;
}

// \d{1,3}(\.\d{1,3}){3}: with Python's Unicode \d (Megatron's URL regex), or
// ASCII digits only (tldextract's IPv4 test).
bool is_ipv4(std::string_view host, bool unicode_digits) {
  int groups = 0, digits = 0;
  for (size_t i = 0; i < host.size();) {
    uint32_t cp;
    size_t n = next_cp(host, i, &cp);
    if (cp == '.') {
      if (digits == 0 || ++groups > 3) return false;
      digits = 0;
    } else if (unicode_digits ? py_digit(cp) : (cp >= '0' && cp <= '9')) {
      if (++digits > 3) return false;
    } else {
      return false;
    }
    i += n;
  }
  return groups == 3 && digits > 0;
}

bool iequals_prefix(std::string_view s, std::string_view lower_prefix) {
  if (s.size() < lower_prefix.size()) return false;
  for (size_t i = 0; i < lower_prefix.size(); ++i)
    if (ascii_lower(s[i]) != lower_prefix[i]) return false;
  return true;
}

}  // namespace

std::string_view python_strip(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    uint32_t cp;
    size_t n = next_cp(s, b, &cp);
    if (!py_space(cp)) break;
    b += n;
  }
  size_t e = s.size();
  while (e > b) {
    size_t k = e - 1;
    while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    uint32_t cp;
    size_t n = next_cp(s, k, &cp);
    if (k + n != e || !py_space(cp)) break;
    e = k;
  }
  return s.substr(b, e - b);
}

bool megatron_url_well_formed(std::string_view url) {
  size_t p;
  if (iequals_prefix(url, "https://")) p = 8;
  else if (iequals_prefix(url, "http://")) p = 7;
  else return false;
  // The host: ASCII letters, digits, '.', '-' and (for the IPv4 form) Unicode digits.
  size_t h = p;
  while (h < url.size()) {
    char c = url[h];
    if (ascii_alnum(c) || c == '.' || c == '-') {
      ++h;
      continue;
    }
    uint32_t cp;
    size_t n = next_cp(url, h, &cp);
    if (cp >= 0x80 && py_digit(cp)) {
      h += n;
      continue;
    }
    break;
  }
  std::string_view host = url.substr(p, h - p);
  if (!is_domain_host(host) && !is_ipv4(host, /*unicode_digits=*/true)) return false;
  size_t r = h;
  if (r < url.size() && url[r] == ':') {  // (?::\d+)?
    size_t d = r + 1, digits = 0;
    while (d < url.size()) {
      uint32_t cp;
      size_t n = next_cp(url, d, &cp);
      if (!py_digit(cp)) break;
      d += n;
      ++digits;
    }
    if (digits == 0) return false;
    r = d;
  }
  std::string_view rest = url.substr(r);
  if (rest.empty() || rest == "/") return true;
  if (rest[0] != '/' && rest[0] != '?') return false;
  if (rest.size() < 2) return false;  // [/?]\S+ needs one more character
  for (size_t i = 1; i < rest.size();) {
    uint32_t cp;
    size_t n = next_cp(rest, i, &cp);
    if (py_space(cp)) return false;
    i += n;
  }
  return true;
}

std::string UrlFilter::domain_label(std::string_view url) const {
  // tldextract: drop the scheme, keep the netloc, drop userinfo and port.
  std::string_view s = url;
  size_t colon = s.find("://");
  if (colon != std::string_view::npos) {
    bool scheme = colon > 0;
    for (size_t i = 0; i < colon && scheme; ++i) {
      char c = s[i];
      scheme = ascii_alnum(c) || c == '+' || c == '-' || c == '.';
    }
    if (scheme) s.remove_prefix(colon + 3);
  } else if (s.substr(0, 2) == "//") {
    s.remove_prefix(2);
  }
  s = s.substr(0, s.find_first_of("/?#"));
  size_t at = s.rfind('@');
  if (at != std::string_view::npos) s.remove_prefix(at + 1);
  if (!s.empty() && s[0] == '[') return "";  // IPv6 literal
  s = s.substr(0, s.find(':'));
  std::string host(s);
  for (char& c : host) c = ascii_lower(c);
  while (!host.empty() && host.back() == '.') host.pop_back();
  if (host.empty()) return "";
  if (is_ipv4(host, /*unicode_digits=*/false)) return host;  // tldextract returns an IPv4 address as the domain
  // Hosts repeat a lot in URL lists: a bounded per-thread memo of host -> label.
  struct Memo {
    const UrlFilter* owner = nullptr;
    std::unordered_map<std::string, std::string> map;
  };
  thread_local Memo memo;
  if (memo.owner != this || memo.map.size() >= 65536) {
    memo.map.clear();
    memo.owner = this;
  }
  auto hit = memo.map.find(host);
  if (hit != memo.map.end()) return hit->second;
  std::string label = label_of_host(host);
  memo.map.emplace(std::move(host), label);
  return label;
}

std::string UrlFilter::label_of_host(const std::string& host) const {
  // Labels; the longest ICANN public suffix (no implicit "*" rule: an unknown
  // TLD is no suffix, as in tldextract) -> the label before it.
  std::vector<size_t> starts{0};
  for (size_t i = 0; i < host.size(); ++i)
    if (host[i] == '.') starts.push_back(i + 1);
  for (size_t k = 0; k < starts.size(); ++k) {
    if (host[starts[k]] == '.' || starts[k] == host.size()) continue;  // an empty label is never part of a suffix
    if (psl_is_public_suffix2(psl_, host.c_str() + starts[k], PSL_TYPE_ICANN | PSL_TYPE_NO_STAR_RULE)) {
      if (k == 0) return "";  // the host is itself a public suffix
      return host.substr(starts[k - 1], starts[k] - 1 - starts[k - 1]);
    }
  }
  return host.substr(starts.back());
}

UrlVerdict UrlFilter::check(std::string_view url) const {
  if (domains_.count(domain_label(url))) return UrlVerdict::DomainBlacklist;
  // Every listed extension has one dot except ".tar.gz", which ".gz" covers: so
  // "ends with a listed extension" == "the text from the last dot is listed".
  std::string_view path = url.substr(0, url.find('?'));
  size_t dot = path.rfind('.');
  if (dot != std::string_view::npos && path.size() - dot <= 8) {
    char ext[8];
    size_t n = path.size() - dot;
    for (size_t i = 0; i < n; ++i) ext[i] = ascii_lower(path[dot + i]);
    if (extensions_.count(std::string_view(ext, n))) return UrlVerdict::ExtensionBlacklist;
  }
  if (utf8_length(url) <= 8) return UrlVerdict::Short;
  if (!megatron_url_well_formed(url)) return UrlVerdict::Malformed;
  return UrlVerdict::Accepted;
}

}  // namespace zlm
