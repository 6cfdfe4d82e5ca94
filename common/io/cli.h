// Command-line handling shared by every tool: CLI11 for flag parsing plus the
// flags every tool has (-v/-q, --stats-out, --progress-sec, --no-progress,
// --version, --help) and the boundary where errors become exit codes.
//
//   int main(int argc, char** argv) {
//     FooOptions opt;
//     CLI::App app{"what foo does"};
//     app.add_option("--input", opt.input, "input file")->required();
//     zlm::CommonFlags common;
//     return zlm::tool_main("foo", app, common, argc, argv, [&] { return foo::run(opt, common); });
//   }
//
// Parsing is strict: unknown flags, missing values and malformed numbers
// ("12x") are usage errors (exit 2 with the usage text). Inside `body`,
// zlm::Error(Usage) also exits 2; other zlm::Error and std::exception print
// "error: ..." and exit 1. The body's return value is the exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "common/core/stats.h"

namespace zlm {

struct CommonFlags {
  int verbose = 0;
  bool quiet = false;
  std::string stats_out;       // --stats-out FILE: the summary as JSON
  double progress_sec = 5.0;   // --progress-sec
  bool no_progress = false;    // --no-progress
  // Set by a tool before tool_main, not a flag: a long option may then be
  // given by an unambiguous prefix ("--vocab" for "--vocab-file"), as in
  // Python's argparse by default (allow_abbrev=True). The tools whose Megatron
  // script parses with argparse's default set it, so their command lines run
  // unchanged; an ambiguous prefix is a usage error naming the candidates.
  bool allow_abbrev = false;
};

void add_common_flags(CLI::App& app, CommonFlags& common);

int tool_main(const char* tool_name, CLI::App& app, CommonFlags& common, int argc, char** argv,
              const std::function<int()>& body);

// argparse's abbreviation rule over `args` (argv without the program name):
// each "--prefix" or "--prefix=value" that is not one of `long_names` but
// starts exactly one of them is replaced by it; one that starts several is
// zlm::Error(Usage) "ambiguous option: --vo could match --vocab-file,
// --vocab-size" (argparse's words: the argument as given, the candidates in
// the order of `long_names`); others are left for the parser to refuse.
// Nothing after a lone "--" is touched. O(args x names).
std::vector<std::string> expand_abbreviations(const std::vector<std::string>& long_names, std::vector<std::string> args);

// The usual body of a tool: runs fn(stats), then prints the summary table
// (unless -q) and writes --stats-out. Returns fn's exit code.
int run_with_stats(const char* tool_name, const CommonFlags& common, const std::function<int(Stats&)>& fn);

// The one rule for --threads / --workers in every tool: 1 to max(64, 4 x the
// machine's cores); anything else is a usage error naming the bounds.
CLI::Validator thread_count();

// Value checks with readable bounds (CLI11's Range prints 300 digits for a
// double's maximum and lets NaN through; its unsigned conversion turns "-1"
// into 2^64-1):
//   finite_range(lo, hi)      a finite number in [lo, hi]
//   whole_number(lo, hi)      decimal digits only (no sign), in [lo, hi]
CLI::Validator finite_range(double lo, double hi);
CLI::Validator whole_number(uint64_t lo, uint64_t hi);

// The version line: "<tool> zerolm 0.1.0 (git abc123, Release, GNU 12.2.0)".
std::string version_line(const char* tool_name);

}  // namespace zlm
