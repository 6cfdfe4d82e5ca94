// blacklist_urls: Megatron's tools/openwebtext/blacklist_urls.py
// (docs/compatibility.md, "OpenWebText scripts"): drop URLs by domain blacklist, file extension,
// length, malformed form and duplicates (tools/blacklist_urls/url_filter.h for the rules).
//
// Inputs: directories (their *.txt files in sorted order, as Megatron's
// `blacklist_urls <dir> <output>`), files, or "-" for stdin; each line is one
// URL, stripped of surrounding whitespace (Python's str.strip()). Accepted URLs
// are written in first-seen order (Megatron: set order); duplicates are found
// with an XXH3-128 set. The checks run on --threads threads; the output is the
// same for any number. --rejected-out writes "reason<TAB>url" for every
// rejected line, so nothing disappears without a trace.
#pragma once

#include <string>
#include <vector>

#include "common/io/cli.h"
#include "common/core/stats.h"

namespace zlm::blacklist_urls {

struct BlacklistOptions {
  std::vector<std::string> inputs;
  std::string output;
  std::string domain_blacklist;      // replaces the built-in list
  std::string add_domain_blacklist;  // extends the list
  std::string public_suffix_list;
  std::string rejected_out;
  int threads = 1;
};

void run(const BlacklistOptions& options, const CommonFlags& common, Stats& stats);

}  // namespace zlm::blacklist_urls
