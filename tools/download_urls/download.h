// download_urls: the recipe's download step, clean URLs to raw.json
// (docs/design.md, "download_urls"; flags in main.cpp).
//
// Each URL of the input (one a line) is fetched (fetcher.h), decoded to UTF-8
// (charset.h) and reduced to its main text (html_text.h); every page with text
// becomes one line {"text": ..., "url": ...} of the output, in input order
// whatever the completion order, so the output does not depend on the number of
// connections (the tests compare 1 and 256). --meta-out writes one line per URL with what happened to it;
// --warc-out keeps the responses as WARC/1.1 (formats/warc.h).
//
// Resumable: the outputs grow under "<name>.partial" and "<output>.resume"
// records, every few seconds, how many URLs are written and the length of
// each partial file at that moment (after fsync). A run that finds a
// .resume file of the same settings cuts the partial files back to those
// lengths and goes on from the next URL, so an interrupted run (Ctrl-C,
// SIGKILL, a lost node) ends with the same output as one that never stopped.
// Only a complete run renames the files to their final names.
#pragma once

#include <string>

#include "common/core/stats.h"
#include "common/io/cli.h"
#include "tools/download_urls/fetcher.h"

namespace zlm::web {

struct DownloadOptions {
  std::string input;      // URL list (plain or compressed; "-" is stdin, not resumable)
  std::string from_warc;  // instead of fetching: extract from this WARC
  std::string output;     // raw.json (JSON lines)
  std::string meta_out;   // one JSON line per URL
  std::string warc_out;   // the responses as WARC/1.1, one gzip member per record
  FetchOptions fetch;
  int threads = 1;        // extraction threads
  size_t window = 0;      // URLs in flight beyond the last written (0: 16 x connections, at least 1024)
  bool restart = false;   // ignore a .resume file and start over
  double checkpoint_sec = 2.0;
  // --part T/K: only the T-th (0-based) of K contiguous, equal parts of the list's URLs
  // (the parts of K runs, concatenated in order, are one run's output).
  uint64_t part_index = 0, part_count = 1;
  uint64_t min_text_chars = 1;  // pages with less main text count as "empty"
};

// Returns the process exit code: 0 complete, 130 interrupted (resumable).
int run_download(const DownloadOptions& options, const CommonFlags& common, Stats& stats);

}  // namespace zlm::web
