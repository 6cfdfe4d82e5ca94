#include "tools/group_dups/group_dups.h"

#include <simdjson.h>

#include <unordered_map>
#include <vector>

#include "common/core/output_file.h"
#include "common/core/bad_records.h"
#include "common/core/error.h"
#include "common/core/jsonl_writer.h"
#include "common/core/json_writer.h"
#include "common/io/json_members.h"
#include "common/io/line_reader.h"
#include "common/core/log.h"
#include "common/dedup/union_find.h"

namespace zlm::group_dups {

namespace {

// Ids interned in order of first appearance, and the union-find over them.
class IdGraph {
 public:
  uint32_t intern(std::string_view id) {
    auto [it, inserted] = index_.try_emplace(std::string(id), static_cast<uint32_t>(names_.size()));
    if (inserted) {
      names_.push_back(&it->first);
      uf_.resize(names_.size());
    }
    return it->second;
  }
  bool unite(uint32_t a, uint32_t b) { return uf_.unite(a, b); }
  uint32_t size() const { return static_cast<uint32_t>(names_.size()); }
  const std::string& name(uint32_t i) const { return *names_[i]; }
  // Components in order of first appearance; members in order of first appearance.
  std::vector<std::vector<uint32_t>> components() {
    std::vector<uint32_t> group_of_root(size(), UINT32_MAX);
    std::vector<std::vector<uint32_t>> groups;
    for (uint32_t i = 0; i < size(); ++i) {
      const uint32_t r = uf_.find(i);
      if (group_of_root[r] == UINT32_MAX) {
        group_of_root[r] = static_cast<uint32_t>(groups.size());
        groups.emplace_back();
      }
      groups[group_of_root[r]].push_back(i);
    }
    return groups;
  }

 private:
  std::unordered_map<std::string, uint32_t> index_;
  std::vector<const std::string*> names_;  // id by first appearance
  UnionFind uf_;
};

// One line of find_duplicates' output, {"main": [{"other": similarity}, ...], ...}: the links of
// the pairs at or above the threshold into `links` (main, other). Returns why the line is bad ("": good).
std::string parse_line(simdjson::dom::parser& parser, std::string_view line, double threshold, IdGraph& ids,
                       std::vector<std::pair<uint32_t, uint32_t>>& links) {
  simdjson::padded_string padded(line);
  simdjson::dom::object obj;
  if (auto err = parser.parse(padded).get_object().get(obj)) return std::string("malformed JSON: ") + simdjson::error_message(err);
  for (const auto& [main, list] : python_members(obj)) {  // repeated keys: the last value, as Megatron's json.loads
    const uint32_t m = ids.intern(main);
    simdjson::dom::array arr;
    if (list.get_array().get(arr)) return "the value of a main id is not a list";
    for (simdjson::dom::element item : arr) {
      simdjson::dom::object pair;
      if (item.get_object().get(pair)) return "a list item is not an {id: similarity} object";
      for (const auto& [other, sim] : python_members(pair)) {
        double s;
        if (sim.get_double().get(s)) return "a similarity is not a number";
        if (!(s >= 0.0 && s <= 1.0))  // NaN too: a similarity is a Jaccard ratio
          return strprintf("similarity %g of '%.*s' is outside [0, 1]", s, static_cast<int>(other.size()), other.data());
        if (s >= threshold) links.emplace_back(m, ids.intern(other));
      }
    }
  }
  return "";
}

}  // namespace

void run(const GroupOptions& opt, const CommonFlags& common, Stats& stats) {
  const double t0 = log_elapsed_sec();
  check_distinct_paths({{"<output>", opt.output}, {"--stats-out", common.stats_out}}, {{"<input>", opt.input}});
  IdGraph ids;
  LineReader reader(opt.input);
  simdjson::dom::parser parser;
  std::string_view line;
  uint64_t lines = 0, links = 0;
  BadRecords bad(opt.max_bad_records);
  std::vector<std::pair<uint32_t, uint32_t>> line_links;
  while (reader.next(line)) {
    ++lines;
    if (line.empty()) continue;
    line_links.clear();
    const std::string why = parse_line(parser, line, opt.threshold, ids, line_links);
    if (why.empty())  // a bad line links nothing, not even the keys before its fault
      for (auto [a, b] : line_links) links += ids.unite(a, b);
    else
      bad.add(opt.input + ":" + std::to_string(lines), why);
    if (lines % 100000 == 0 && !common.quiet)
      ZLM_LOG_INF(" > processed %lu lines in %.2f seconds ...", (unsigned long)lines, log_elapsed_sec() - t0);
  }
  bad.fail_if_all_bad(lines, opt.input);
  JsonlWriter out(opt.output);
  uint64_t kept_groups = 0, removed = 0;
  for (const auto& g : ids.components()) {
    if (g.size() < 2) continue;
    std::string list = "[";
    for (size_t k = 0; k < g.size(); ++k) list += (k ? ", " : "") + json_string(ids.name(g[k]));
    list += "]";
    out.begin_object();
    out.field_raw(std::to_string(kept_groups), list);
    out.end_object();
    ++kept_groups;
    removed += g.size() - 1;
  }
  out.commit();
  ZLM_LOG_INF("out of %lu urls, only %lu are unique and %lu should be removed", (unsigned long)(removed + kept_groups),
              (unsigned long)kept_groups, (unsigned long)removed);
  stats.set("lines_in", lines);
  stats.set("lines_bad", bad.count());
  stats.set("ids_seen", static_cast<uint64_t>(ids.size()));
  stats.set("links_used", links);
  stats.set("groups_out", kept_groups);
  stats.set("ids_in_groups", removed + kept_groups);
  stats.set("ids_to_remove", removed);
  stats.set("threshold", opt.threshold);
  stats.set("elapsed_sec", log_elapsed_sec() - t0);
}

}  // namespace zlm::group_dups
