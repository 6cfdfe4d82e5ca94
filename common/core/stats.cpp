#include "common/core/stats.h"

#include <cstdio>

#include "common/core/build_info.h"
#include "common/core/error.h"
#include "common/core/json_writer.h"
#include "common/core/output_file.h"

namespace zlm {
namespace {
std::string value_text(const Stats::Value& v, bool json) {
  if (auto* u = std::get_if<uint64_t>(&v)) return std::to_string(*u);
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) return strprintf(json ? "%.17g" : "%.3f", *d);
  const auto& s = std::get<std::string>(v);
  return json ? json_string(s) : s;
}
}  // namespace

void Stats::put(const std::string& key, Value value) {
  for (auto& [k, v] : entries_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries_.emplace_back(key, std::move(value));
}

const Stats::Value* Stats::get(const std::string& key) const {
  for (const auto& [k, v] : entries_)
    if (k == key) return &v;
  return nullptr;
}

std::string Stats::to_json() const {
  std::string out = "{\n  \"tool\": " + json_string(tool_) + ",\n  \"version\": " + json_string(build_version());
  for (const auto& [k, v] : entries_) out += ",\n  " + json_string(k) + ": " + value_text(v, true);
  out += "\n}\n";
  return out;
}

void Stats::print_table() const {
  size_t width = 0;
  for (const auto& [k, v] : entries_) width = std::max(width, k.size());
  std::fprintf(stderr, "---- %s summary ----\n", tool_.c_str());
  for (const auto& [k, v] : entries_)
    std::fprintf(stderr, "  %-*s  %s\n", static_cast<int>(width), k.c_str(), value_text(v, false).c_str());
  std::fflush(stderr);
}

void Stats::write_json(const std::string& path) const { write_file_atomic(path, to_json()); }

}  // namespace zlm
