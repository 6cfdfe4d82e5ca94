#include "common/io/cli.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "common/core/build_info.h"
#include "common/core/error.h"
#include "common/core/log.h"

namespace zlm {

CLI::Validator thread_count() {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const long cap = std::max(64L, 4L * static_cast<long>(cores));
  return CLI::Validator(
      [cap, cores](const std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long n = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || errno == ERANGE || n < 1 || n > cap)
          return "'" + (v.size() > 24 ? v.substr(0, 24) + "..." : v) + "' is not a thread count between 1 and " + std::to_string(cap) +
                 " (4 x the " + std::to_string(cores) + " cores, at least 64)";
        return "";
      },
      "1.." + std::to_string(cap));
}

namespace {
std::string shown(const std::string& v) { return "'" + (v.size() > 24 ? v.substr(0, 24) + "..." : v) + "'"; }
std::string number(double v) { return strprintf("%g", v); }
}  // namespace

CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](const std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0' || !std::isfinite(x) || x < lo || x > hi)
          return shown(v) + " is not a number between " + number(lo) + " and " + number(hi);
        return "";
      },
      "[" + number(lo) + ", " + number(hi) + "]");
}

CLI::Validator whole_number(uint64_t lo, uint64_t hi) {
  return CLI::Validator(
      [lo, hi](const std::string& v) -> std::string {
        errno = 0;
        char* end = nullptr;
        const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
        const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
        if (!digits || *end != '\0' || errno == ERANGE || x < lo || x > hi)
          return shown(v) + " is not a whole number between " + std::to_string(lo) + " and " + std::to_string(hi);
        return "";
      },
      std::to_string(lo) + ".." + std::to_string(hi));
}

std::string version_line(const char* tool_name) {
  return strprintf("%s zerolm %s (git %s, %s, %s)", tool_name, build_version(), build_git_describe(), build_type(),
                   build_compiler());
}

void add_common_flags(CLI::App& app, CommonFlags& common) {
  app.add_flag("-v,--verbose", common.verbose, "More log output (debug level)")->group("Common");
  app.add_flag("-q,--quiet", common.quiet, "Only warnings and errors on stderr")->group("Common");
  app.add_option("--stats-out", common.stats_out, "Write the end-of-run summary as JSON to FILE")
      ->group("Common")
      ->type_name("FILE");
  app.add_option("--progress-sec", common.progress_sec, "Seconds between progress lines on stderr")
      ->group("Common")
      ->check(finite_range(0.001, 86400.0))
      ->capture_default_str();
  app.add_flag("--no-progress", common.no_progress, "Do not print progress lines")->group("Common");
}

int run_with_stats(const char* tool_name, const CommonFlags& common, const std::function<int(Stats&)>& fn) {
  Stats stats(tool_name);
  int rc = fn(stats);
  if (!common.quiet) stats.print_table();
  if (!common.stats_out.empty()) stats.write_json(common.stats_out);
  return rc;
}

std::vector<std::string> expand_abbreviations(const std::vector<std::string>& long_names, std::vector<std::string> args) {
  for (auto& arg : args) {
    if (arg == "--") break;
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) continue;
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    if (std::find(long_names.begin(), long_names.end(), name) != long_names.end()) continue;
    std::vector<std::string> candidates;
    for (const auto& n : long_names)
      if (n.compare(0, name.size(), name) == 0) candidates.push_back(n);
    if (candidates.size() > 1) {  // argparse's words: the argument as given, the candidates in definition order
      std::string list;
      for (const auto& c : candidates) list += (list.empty() ? "" : ", ") + c;
      throw Error(ErrorKind::Usage, "ambiguous option: %s could match %s", arg.c_str(), list.c_str());
    }
    if (candidates.size() == 1) arg = candidates[0] + (eq == std::string::npos ? "" : arg.substr(eq));
  }
  return args;
}

namespace {

// Every "--name" the parser knows, option groups included.
void collect_long_names(const CLI::App& app, std::vector<std::string>& out) {
  for (const CLI::Option* opt : app.get_options())
    for (const auto& n : opt->get_lnames()) out.push_back("--" + n);
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) collect_long_names(*sub, out);
}

void parse_args(CLI::App& app, const CommonFlags& common, int argc, char** argv) {
  if (!common.allow_abbrev) return app.parse(argc, argv);
  std::vector<std::string> all, names;  // in definition order, each once
  collect_long_names(app, all);
  for (const auto& n : all)
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  std::vector<std::string> args = expand_abbreviations(names, std::vector<std::string>(argv + 1, argv + argc));
  std::vector<char*> expanded{argv[0]};
  for (auto& a : args) expanded.push_back(a.data());
  app.parse(static_cast<int>(expanded.size()), expanded.data());
}

}  // namespace

int tool_main(const char* tool_name, CLI::App& app, CommonFlags& common, int argc, char** argv,
              const std::function<int()>& body) {
  log_init(tool_name);
  app.name(tool_name);
  app.set_version_flag("--version", version_line(tool_name));
  app.get_formatter()->column_width(36);
  try {
    try {
      parse_args(app, common, argc, argv);
    } catch (const Error& e) {  // an ambiguous abbreviation: a parse error like CLI11's
      throw CLI::ParseError(e.what(), CLI::ExitCodes::ArgumentMismatch);
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool_name, e.what());
    std::fprintf(stderr, "Run with --help for usage.\n");
    return exit_code(ErrorKind::Usage);
  }
  if (common.quiet) log_set_level(LogLevel::Wrn);
  if (common.verbose > 0) log_set_level(LogLevel::Dbg);
  ZLM_LOG_DBG("%s", version_line(tool_name).c_str());
  try {
    return body();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool_name, e.what());
    if (e.kind() == ErrorKind::Usage) std::fprintf(stderr, "Run with --help for usage.\n");
    return exit_code(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool_name, e.what());
    return 1;
  }
}

}  // namespace zlm
