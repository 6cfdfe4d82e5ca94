// cleanup: Megatron's tools/openwebtext/cleanup_dataset.py and
// cleanup_fix_dataset.py (docs/compatibility.md, "OpenWebText scripts").
//
// Default mode, per JSONL document in input order (any --workers):
//   1. text = fix_text(text) (ftfy.fix_text equivalent, common/text/text_fix.h);
//   2. drop it unless CLD2 says --lang (default en) for at least
//      --min-lang-percent of its letters (Megatron: unseeded langdetect);
//   3. if it has fewer than 1024 characters, drop it when its GPT-2 token
//      count plus EOD is below --min-tokens (128).
// Kept documents keep every other field and the field order; a document whose
// text did not change is written byte-identical, otherwise only the text
// value is replaced. Dropped and malformed documents go to --rejected-out as
// {"reason": ..., "line": N, "doc": <the original line>}.
//
// --tasks mode (cleanup_fix_dataset.py): for each --input-files file
// X/name.ext, writes --output-path/name_cleaned.ext and name_filtered.ext;
// tasks are tried in Megatron's fixed order (remove_512,
// remove_256_javascript, remove_512_non_english, ftfy_fix_text,
// general_cleaning) and the first that fires decides.
#pragma once

#include <string>
#include <vector>

#include "common/io/cli.h"
#include "common/core/stats.h"

namespace zlm::cleanup {

struct CleanupOptions {
  std::string input, output;            // default mode
  std::vector<std::string> tasks;       // --tasks mode
  std::vector<std::string> input_files;
  std::string output_path;
  std::string vocab_file, merge_file;
  std::string text_key = "text";
  std::string lang = "en";
  int min_lang_percent = 0;
  size_t lang_id_bytes = 4096;  // language ID reads this much of each text (0: all)
  bool lang_id_exact = false;   // read all of it, never detect_language_sampled's windows
  int min_tokens = 128;
  int max_chars_for_token_check = 1024;  // Megatron: 8 * 128
  std::string rejected_out;
  int workers = 1;
  int64_t max_bad_records = -1;
};

void run(const CleanupOptions& options, const CommonFlags& common, Stats& stats);

}  // namespace zlm::cleanup
