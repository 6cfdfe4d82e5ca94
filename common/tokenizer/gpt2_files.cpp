#include "common/tokenizer/gpt2_files.h"

#include <filesystem>
#include <system_error>

#include "common/core/error.h"

#ifndef ZLM_INSTALL_DATADIR
#define ZLM_INSTALL_DATADIR "/usr/local/share"
#endif

namespace zlm {

namespace {

namespace fs = std::filesystem;
constexpr const char* kVocab = "gpt2-vocab.json";
constexpr const char* kMerges = "gpt2-merges.txt";

fs::path next_to_binary() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return exe.parent_path().parent_path() / "share" / "zerolm" / "gpt2";
}

fs::path installed() { return fs::path(ZLM_INSTALL_DATADIR) / "zerolm" / "gpt2"; }

bool holds_both(const fs::path& dir) {
  std::error_code ec;
  return !dir.empty() && fs::is_regular_file(dir / kVocab, ec) && fs::is_regular_file(dir / kMerges, ec);
}

}  // namespace

std::string bundled_gpt2_dir() {
  for (const fs::path& dir : {next_to_binary(), installed()})
    if (holds_both(dir)) return dir.string();
  return "";
}

Gpt2Files resolve_gpt2_files(const std::string& vocab_file, const std::string& merge_file, bool need_merges) {
  if (!vocab_file.empty() && (!need_merges || !merge_file.empty())) return {vocab_file, merge_file, false};
  if (need_merges && vocab_file.empty() != merge_file.empty())
    throw Error(ErrorKind::Usage, "%s is given without %s: give both, or neither for GPT-2's own files",
                vocab_file.empty() ? "--merge-file" : "--vocab-file", vocab_file.empty() ? "--vocab-file" : "--merge-file");
  const std::string dir = bundled_gpt2_dir();
  if (dir.empty())
    throw Error(ErrorKind::Io, "no --vocab-file given, and GPT-2's files (%s, %s) are neither in %s nor in %s ---> HINT: give "
                "--vocab-file and --merge-file, or reinstall zerolm", kVocab, kMerges, next_to_binary().c_str(), installed().c_str());
  const fs::path d(dir);
  return {vocab_file.empty() ? (d / kVocab).string() : vocab_file, merge_file.empty() ? (d / kMerges).string() : merge_file, true};
}

}  // namespace zlm
