// cleanup <input.jsonl> <output.jsonl>            (Megatron's cleanup_dataset.py)
// cleanup --tasks T... --input-files F... --output-path DIR   (cleanup_fix_dataset.py)
#include <thread>

#include "common/io/cli.h"
#include "tools/cleanup/cleanup.h"

int main(int argc, char** argv) {
  zlm::cleanup::CleanupOptions opt;
  opt.workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  zlm::CommonFlags common;
  common.allow_abbrev = true;  // cleanup_fix_dataset.py parses with argparse's default: abbreviations allowed
  CLI::App app{"Repair Unicode (ftfy.fix_text equivalent), keep English (CLD2) and drop documents under 128 GPT-2 tokens, "
               "as Megatron's cleanup_dataset.py; or run cleanup_fix_dataset.py's --tasks."};
  app.add_option("input", opt.input, "Input JSONL (plain, .gz, .xz, .zst)");
  app.add_option("output", opt.output, "Output JSONL");
  app.add_option("--vocab-file", opt.vocab_file, "GPT-2 vocab.json for the token count (default: GPT-2's own, installed with the tools)");
  app.add_option("--merge-file", opt.merge_file, "GPT-2 merges.txt (default: GPT-2's own)");
  app.add_option("--text-key", opt.text_key, "JSON key of the text")->capture_default_str();
  app.add_option("--lang", opt.lang, "Language to keep (CLD2 code)")->capture_default_str();
  app.add_option("--min-lang-percent", opt.min_lang_percent, "Also require this share (0-100) of the text's letters in --lang")
      ->capture_default_str()->check(zlm::finite_range(0.0, 100.0));
  app.add_option("--lang-id-bytes", opt.lang_id_bytes, "Language ID reads the first N bytes of each text (0: all of it)")
      ->capture_default_str();
  app.add_flag("--lang-id-exact", opt.lang_id_exact, "Language ID always reads all of --lang-id-bytes: without it, 256-byte windows (6 in 4 KiB, 9 at most) "
               "spread over them decide when they agree (at least 90% one language, reliably; not with --min-lang-percent)");
  app.add_option("--min-tokens", opt.min_tokens, "Drop documents under 1024 characters with fewer GPT-2 tokens (EOD included)")
      ->capture_default_str();
  app.add_option("--rejected-out", opt.rejected_out, "Write every dropped document with its reason here (JSONL)");
  app.add_option("--tasks", opt.tasks, "cleanup_fix_dataset.py tasks: remove_512 remove_256_javascript remove_512_non_english "
                 "ftfy_fix_text general_cleaning")->expected(1, -1);
  app.add_option("--input-files", opt.input_files, "With --tasks: the JSONL files")->expected(1, -1);
  app.add_option("--output-path", opt.output_path, "With --tasks: directory for name_cleaned.ext / name_filtered.ext");
  app.add_option("--workers", opt.workers, "Worker threads (output is identical for any number)")->capture_default_str()->check(zlm::thread_count());
  app.add_option("--max-bad-records", opt.max_bad_records, "Fail when more than N lines are malformed")->type_name("N");
  zlm::add_common_flags(app, common);
  return zlm::tool_main("cleanup", app, common, argc, argv, [&] {
    return zlm::run_with_stats("cleanup", common, [&](zlm::Stats& stats) {
      zlm::cleanup::run(opt, common, stats);
      return 0;
    });
  });
}
