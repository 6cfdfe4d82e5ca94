// GPT-2's own vocab.json and merges.txt, installed with the tools, used when a
// tool that takes --vocab-file / --merge-file for GPT-2 is given neither (as
// Megatron's cleanup_dataset.py loads GPT-2's tokenizer by itself), offline.
//
//   zlm::Gpt2Files f = zlm::resolve_gpt2_files(opt.vocab_file, opt.merge_file);
//   // f.vocab_file, f.merge_file: the paths to use; f.bundled: they are ours
//
// The files live in <dir of the running binary>/../share/zerolm/gpt2/ (the
// build tree's build/share and an installed <prefix>/share alike), else in the
// install prefix's share directory compiled in. Dependency-free (zlm_vocab).
#pragma once

#include <string>

namespace zlm {

struct Gpt2Files {
  std::string vocab_file, merge_file;
  bool bundled = false;  // true: the installed GPT-2 files were used
};

// The directory of the installed GPT-2 files, or "" when none is found.
// Reads /proc/self/exe once per call; no allocation beyond the strings.
std::string bundled_gpt2_dir();

// Both given: returned unchanged. Neither: the bundled pair (zlm::Error(Io)
// saying where it looked when they are missing). One alone: zlm::Error(Usage)
// naming the missing flag, since GPT-2's merges do not fit another vocabulary.
// With need_merges false (a vocab.json is all the caller reads), a given
// vocab_file is enough; an empty one is the bundled one. Empty paths that
// are filled from the bundle set `bundled` (the caller says so: this prints nothing).
Gpt2Files resolve_gpt2_files(const std::string& vocab_file, const std::string& merge_file, bool need_merges = true);

}  // namespace zlm
