#include "tools/blacklist_urls/url_filter.h"

#include <sstream>

#include "test_util.h"

namespace zlm {
namespace {

struct Golden {
  std::string url, domain, verdict_zerolm, verdict_megatron;
  bool well_formed;
};

std::vector<Golden> goldens() {
  std::vector<Golden> out;
  std::istringstream in(test::slurp(test::data_path("urls/golden.tsv")));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::istringstream cols(line);
    std::string col;
    while (std::getline(cols, col, '\t')) f.push_back(col);
    if (f.size() == 4 && line.front() == '\t') f.insert(f.begin(), "");  // the empty URL
    EXPECT_EQ(f.size(), 5u) << line;
    if (f.size() != 5) continue;
    out.push_back({f[0], f[1], f[4], f[3], f[2] == "1"});
  }
  return out;
}

// Against tldextract + Python re running Megatron's regex (tests/reference/make_url_goldens.py).
TEST(UrlFilter, MatchesMegatronReferenceVerdicts) {
  UrlFilter filter({});
  auto cases = goldens();
  ASSERT_GE(cases.size(), 60u);
  for (const auto& g : cases) {
    EXPECT_EQ(filter.domain_label(g.url), g.domain) << g.url;
    EXPECT_EQ(megatron_url_well_formed(g.url), g.well_formed) << g.url;
    EXPECT_STREQ(url_verdict_name(filter.check(g.url)), g.verdict_zerolm.c_str()) << g.url;
  }
}

TEST(UrlFilter, PythonStrip) {
  EXPECT_EQ(python_strip("  \t a b \n"), "a b");
  EXPECT_EQ(python_strip("\xc2\xa0x\xe3\x80\x80"), "x");
  EXPECT_EQ(python_strip("\x1cx\x1f"), "x");
  EXPECT_EQ(python_strip(""), "");
}

TEST(UrlFilter, CustomDomainLists) {
  UrlFilterOptions replace;
  replace.domains = {"example"};
  UrlFilter only_example(replace);
  EXPECT_EQ(only_example.check("https://www.example.com/a"), UrlVerdict::DomainBlacklist);
  EXPECT_EQ(only_example.check("https://www.youtube.com/watch"), UrlVerdict::Accepted);
  UrlFilterOptions extend;
  extend.add_domains = {"example"};
  UrlFilter both(extend);
  EXPECT_EQ(both.check("https://www.example.com/a"), UrlVerdict::DomainBlacklist);
  EXPECT_EQ(both.check("https://www.youtube.com/watch"), UrlVerdict::DomainBlacklist);
}

}  // namespace
}  // namespace zlm
