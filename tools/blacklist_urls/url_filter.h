// URL filters of Megatron's tools/openwebtext/blacklist_urls.py
// (docs/compatibility.md, "OpenWebText scripts"), as pure functions usable from several threads.
//
//   zlm::UrlFilter filter(zlm::UrlFilterOptions{});           // built-in lists
//   zlm::UrlVerdict v = filter.check(url);                    // all but "duplicate"
//
// Checks in Megatron's order, first hit wins: domain blacklist (the
// registered-domain label as tldextract computes it: the label left of the
// longest ICANN public suffix, from the public suffix list through libpsl),
// extension blacklist (the part before the first '?', lower-cased, ends with a
// listed extension), short (<= 8 characters), malformed (not a full match of
// Megatron's URL regex, implemented by hand: megatron_url_well_formed()).
// Duplicates are the caller's business (they depend on order).
//
// Deliberate differences from Megatron: the domain label is compared
// lower-cased (Megatron lets "WWW.YouTube.com" through), and the extension
// list has ".7z" where Megatron's source accidentally fused ".7z" and ".ai"
// into ".7z.ai" (so neither was blocked); the ".ai" TLD is not an extension.
// The public suffix data comes from Debian's publicsuffix package (libpsl's
// psl_latest), so domains follow that snapshot. Thread-safe after construction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

struct psl_ctx_st;

namespace zlm {

enum class UrlVerdict : uint8_t { Accepted, DomainBlacklist, ExtensionBlacklist, Short, Malformed, Duplicate };
const char* url_verdict_name(UrlVerdict v);

struct UrlFilterOptions {
  std::vector<std::string> domains;      // replaces the built-in domain list when non-empty
  std::vector<std::string> add_domains;  // added to the (built-in or given) list
  std::string public_suffix_file;        // default: the system list (libpsl psl_latest)
};

class UrlFilter {
 public:
  explicit UrlFilter(const UrlFilterOptions& options);
  ~UrlFilter();
  UrlFilter(const UrlFilter&) = delete;
  UrlFilter& operator=(const UrlFilter&) = delete;

  UrlVerdict check(std::string_view url) const;
  // tldextract's `domain` of a URL (lower-cased); "" when there is none.
  std::string domain_label(std::string_view url) const;
  size_t num_domains() const { return domains_.size(); }

  static const std::vector<std::string>& builtin_domains();
  static const std::vector<std::string>& builtin_extensions();

 private:
  std::string label_of_host(const std::string& host) const;
  const psl_ctx_st* psl_ = nullptr;
  bool own_psl_ = false;
  struct SvHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_set<std::string, SvHash, std::equal_to<>> domains_;
  std::unordered_set<std::string, SvHash, std::equal_to<>> extensions_;
};

// Full match of Megatron's URL regex (case-insensitive, Unicode \d and \S):
// ^(?:http)s?://(?:(?:[A-Z0-9](?:[A-Z0-9-]{0,61}[A-Z0-9])?\.)+(?:[A-Z]{2,6}\.?|[A-Z0-9-]{2,}\.?)
//  |\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})(?::\d+)?(?:/?|[/?]\S+)$
bool megatron_url_well_formed(std::string_view url);

// Python's str.strip(): removes leading and trailing whitespace (str.isspace()).
std::string_view python_strip(std::string_view s);

}  // namespace zlm
