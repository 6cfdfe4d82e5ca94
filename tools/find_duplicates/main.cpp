// find_duplicates: MinHash LSH near-duplicate candidates verified by exact
// Jaccard, with the flags of Megatron's tools/openwebtext/find_duplicates.py.
#include <thread>

#include "common/dedup/lsh_flags.h"
#include "common/io/cli.h"
#include "common/core/error.h"
#include "common/core/log.h"
#include "tools/find_duplicates/find_duplicates.h"

int main(int argc, char** argv) {
  zlm::find_duplicates::FindDuplicatesOptions opt;
  opt.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  zlm::CommonFlags common;
  common.allow_abbrev = true;  // Megatron's find_duplicates.py parses with argparse's default: abbreviations allowed
  bool jaccard_parallel = false;
  CLI::App app{"Find near-duplicate documents: MinHash LSH candidates verified by exact character n-gram Jaccard "
               "(as Megatron's find_duplicates.py, deterministic)."};
  app.add_option("--inputs", opt.inputs, "Pairs of JSONL file (or glob/directory) and the JSON key holding the document id")
      ->expected(2, -1)->type_name("FILE KEY");
  app.add_option("--output", opt.output, "JSONL of similar documents: {\"main id\": [{\"other id\": similarity}, ...]}");
  app.add_option("--save-fingerprints", opt.save_fingerprints, "Save ids, signatures and texts to FILE (zerolm's binary format)");
  app.add_option("--load-fingerprints", opt.load_fingerprints, "Fingerprint files to load first")->expected(1, -1);
  zlm::add_lsh_flags(app, opt);
  app.add_option("--text-key", opt.text_key, "JSON key of the text")->capture_default_str();
  app.add_option("--threads", opt.threads, "Worker threads (output is identical for any number)")->capture_default_str()->check(zlm::thread_count());
  app.add_option("--max-bad-records", opt.max_bad_records, "Fail when more than N input lines are malformed")->type_name("N");
  app.add_flag("--jaccard-parallel", jaccard_parallel, "Accepted for Megatron command lines: verification is always parallel");
  zlm::add_common_flags(app, common);
  return zlm::tool_main("find_duplicates", app, common, argc, argv, [&] {
    if (opt.inputs.empty() && opt.load_fingerprints.empty())
      throw zlm::Error(zlm::ErrorKind::Usage, "nothing to do: give --inputs and/or --load-fingerprints");
    return zlm::run_with_stats("find_duplicates", common, [&](zlm::Stats& stats) {
      zlm::find_duplicates::run(opt, common, stats);
      return 0;
    });
  });
}
