#include "common/io/input_files.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "common/core/error.h"

namespace zlm {
namespace {
bool has_data_extension(const std::string& name) {
  static const char* kBases[] = {".json", ".jsonl", ".txt"};
  static const char* kComp[] = {"", ".gz", ".xz", ".zst"};
  for (const char* b : kBases)
    for (const char* c : kComp) {
      std::string ext = std::string(b) + c;
      if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0) return true;
    }
  return false;
}
}  // namespace

std::vector<std::string> expand_inputs(const std::string& spec) {
  if (spec == "-") return {spec};
  struct stat st {};
  if (::stat(spec.c_str(), &st) == 0) {
    if (S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) return {spec};
    if (S_ISDIR(st.st_mode)) {
      std::vector<std::string> out;
      for (const auto& entry : std::filesystem::directory_iterator(spec)) {
        if (entry.is_regular_file() && has_data_extension(entry.path().filename().string()))
          out.push_back(entry.path().string());
      }
      std::sort(out.begin(), out.end());
      if (out.empty())
        throw Error(ErrorKind::Usage, "input directory '%s' holds no .json/.jsonl/.txt files (optionally .gz/.xz/.zst)",
                    spec.c_str());
      return out;
    }
  }
  glob_t g{};
  int rc = ::glob(spec.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  std::sort(out.begin(), out.end());
  if (out.empty()) throw Error(ErrorKind::Usage, "input '%s': no such file, directory or matching glob", spec.c_str());
  return out;
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& specs) {
  std::vector<std::string> out;
  for (const auto& s : specs) {
    auto files = expand_inputs(s);
    out.insert(out.end(), files.begin(), files.end());
  }
  return out;
}

std::string file_number(uint64_t i, uint64_t count) {
  const int width = std::max<int>(5, static_cast<int>(std::to_string(count > 0 ? count - 1 : 0).size()));
  std::string digits = std::to_string(i);
  return std::string(static_cast<size_t>(std::max<int>(0, width - static_cast<int>(digits.size()))), '0') + digits;
}

}  // namespace zlm
