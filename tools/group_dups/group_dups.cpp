#include "tools/group_dups/group_dups.h"

#include <simdjson.h>

#include <unordered_map>
#include <vector>

#include "common/core/output_file.h"
#include "common/core/bad_records.h"
#include "common/core/error.h"
#include "common/core/jsonl_writer.h"
#include "common/core/json_writer.h"
#include "common/io/line_reader.h"
#include "common/core/log.h"
#include "tools/group_dups/union_find.h"

namespace zlm::group_dups {

void run(const GroupOptions& opt, const CommonFlags& common, Stats& stats) {
  double t0 = log_elapsed_sec();
  check_distinct_paths({{"<output>", opt.output}, {"--stats-out", common.stats_out}}, {{"<input>", opt.input}});
  std::unordered_map<std::string, uint32_t> index;
  std::vector<const std::string*> names;  // id by first appearance
  UnionFind uf;
  auto intern = [&](std::string_view id) {
    auto [it, inserted] = index.try_emplace(std::string(id), static_cast<uint32_t>(names.size()));
    if (inserted) {
      names.push_back(&it->first);
      uf.resize(names.size());
    }
    return it->second;
  };
  LineReader reader(opt.input);
  simdjson::dom::parser parser;
  std::string_view line;
  uint64_t lines = 0, links = 0;
  BadRecords bad(opt.max_bad_records);
  std::vector<uint32_t> members;
  std::vector<std::pair<uint32_t, uint32_t>> line_links;
  while (reader.next(line)) {
    ++lines;
    if (line.empty()) continue;
    simdjson::padded_string padded(line);
    simdjson::dom::object obj;
    std::string why;
    line_links.clear();
    auto err = parser.parse(padded).get_object().get(obj);
    if (!err) {
      for (auto [main, list] : obj) {
        members.assign(1, intern(main));
        simdjson::dom::array arr;
        if (list.get_array().get(arr)) {
          why = "the value of a main id is not a list";
          break;
        }
        for (simdjson::dom::element item : arr) {
          simdjson::dom::object pair;
          if (item.get_object().get(pair)) {
            why = "a list item is not an {id: similarity} object";
            break;
          }
          for (auto [other, sim] : pair) {
            double s;
            if (sim.get_double().get(s)) {
              why = "a similarity is not a number";
              break;
            }
            if (!(s >= 0.0 && s <= 1.0)) {  // NaN too: a similarity is a Jaccard ratio
              why = strprintf("similarity %g of '%.*s' is outside [0, 1]", s, static_cast<int>(other.size()), other.data());
              break;
            }
            if (s >= opt.threshold) members.push_back(intern(other));
          }
        }
        if (!why.empty()) break;
        for (size_t k = 1; k < members.size(); ++k) line_links.emplace_back(members[0], members[k]);
      }
      if (why.empty())  // a bad line links nothing, not even the keys before its fault
        for (auto [a, b] : line_links) links += uf.unite(a, b);
    } else {
      why = std::string("malformed JSON: ") + simdjson::error_message(err);
    }
    if (!why.empty()) bad.add(opt.input + ":" + std::to_string(lines), why);
    if (lines % 100000 == 0 && !common.quiet)
      ZLM_LOG_INF(" > processed %lu lines in %.2f seconds ...", (unsigned long)lines, log_elapsed_sec() - t0);
  }
  // Components in order of first appearance; members in order of first appearance.
  const uint32_t n = static_cast<uint32_t>(names.size());
  std::vector<uint32_t> group_of_root(n, UINT32_MAX), sizes;
  std::vector<std::vector<uint32_t>> groups;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t r = uf.find(i);
    if (group_of_root[r] == UINT32_MAX) {
      group_of_root[r] = static_cast<uint32_t>(groups.size());
      groups.emplace_back();
    }
    groups[group_of_root[r]].push_back(i);
  }
  JsonlWriter out(opt.output);
  uint64_t kept_groups = 0, removed = 0;
  for (const auto& g : groups) {
    if (g.size() < 2) continue;
    std::string list = "[";
    for (size_t k = 0; k < g.size(); ++k) list += (k ? ", " : "") + json_string(*names[g[k]]);
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
  stats.set("ids_seen", static_cast<uint64_t>(n));
  stats.set("links_used", links);
  stats.set("groups_out", kept_groups);
  stats.set("ids_in_groups", removed + kept_groups);
  stats.set("ids_to_remove", removed);
  stats.set("threshold", opt.threshold);
  stats.set("elapsed_sec", log_elapsed_sec() - t0);
}

}  // namespace zlm::group_dups
