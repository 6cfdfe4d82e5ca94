// blacklist_urls <dir|file|-> ... <output>
// Filters URL lists as Megatron's blacklist_urls.py (deterministic, multi-threaded).
#include <thread>

#include "common/io/cli.h"
#include "common/core/error.h"
#include "tools/blacklist_urls/blacklist_urls.h"

int main(int argc, char** argv) {
  zlm::blacklist_urls::BlacklistOptions opt;
  opt.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  zlm::CommonFlags common;
  std::vector<std::string> positional;
  CLI::App app{"Drop URLs by domain blacklist, file extension, length, malformed form and duplicates "
               "(as Megatron's blacklist_urls.py; accepted URLs in first-seen order)."};
  app.add_option("inputs_then_output", positional,
                 "Inputs (directories of *.txt URL lists, files, or - for stdin), then the output file")
      ->required()->expected(2, -1);
  app.add_option("--domain-blacklist", opt.domain_blacklist, "Replace the built-in domain list with FILE (one label per line)");
  app.add_option("--add-domain-blacklist", opt.add_domain_blacklist, "Add the labels of FILE to the domain list");
  app.add_option("--public-suffix-list", opt.public_suffix_list, "public_suffix_list.dat to use instead of the system copy");
  app.add_option("--rejected-out", opt.rejected_out, "Write reason<TAB>url for every rejected URL");
  app.add_option("--threads", opt.threads, "Worker threads (output is identical for any number)")->capture_default_str()->check(zlm::thread_count());
  zlm::add_common_flags(app, common);
  return zlm::tool_main("blacklist_urls", app, common, argc, argv, [&] {
    opt.output = positional.back();
    positional.pop_back();
    opt.inputs = positional;
    return zlm::run_with_stats("blacklist_urls", common, [&](zlm::Stats& stats) {
      zlm::blacklist_urls::run(opt, common, stats);
      return 0;
    });
  });
}
