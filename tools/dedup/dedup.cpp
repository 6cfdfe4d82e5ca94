#include "tools/dedup/dedup.h"

#include <simdjson.h>

#include <memory>
#include <unordered_map>
#include <vector>

#include "common/core/output_file.h"
#include "common/core/bad_records.h"
#include "common/core/error.h"
#include "common/io/json_members.h"
#include "common/io/jsonl.h"
#include "common/core/jsonl_writer.h"
#include "common/io/line_reader.h"
#include "common/core/log.h"
#include "common/core/progress.h"
#include "common/core/utf8.h"

namespace zlm::dedup {

namespace {

// id -> group index, from group_dups output.
std::unordered_map<std::string, uint32_t> read_groups(const std::string& path, uint32_t* num_groups, uint64_t* ids) {
  std::unordered_map<std::string, uint32_t> group_of;
  LineReader reader(path);
  simdjson::dom::parser parser;
  std::string_view line;
  uint32_t g = 0;
  while (reader.next(line)) {
    if (line.empty()) continue;
    simdjson::padded_string padded(line);
    simdjson::dom::object obj;
    if (parser.parse(padded).get_object().get(obj))
      throw Error(ErrorKind::Format, "%s:%lu: not a group line {\"n\": [ids]}", path.c_str(), (unsigned long)reader.line_number());
    for (const auto& [name, list] : python_members(obj)) {  // a repeated group name: its last list, as Megatron's json.loads
      simdjson::dom::array arr;
      if (list.get_array().get(arr))
        throw Error(ErrorKind::Format, "%s:%lu: group '%.*s' is not a list", path.c_str(), (unsigned long)reader.line_number(),
                    static_cast<int>(name.size()), name.data());
      for (simdjson::dom::element id : arr) {
        std::string_view s;
        if (id.get_string().get(s))
          throw Error(ErrorKind::Format, "%s:%lu: a group member is not a string", path.c_str(), (unsigned long)reader.line_number());
        if (!group_of.emplace(std::string(s), g).second)
          ZLM_LOG_WRN("%s:%lu: id '%.*s' is in more than one group; the first one counts", path.c_str(),
                      (unsigned long)reader.line_number(), static_cast<int>(s.size()), s.data());
        ++*ids;
      }
      ++g;
    }
  }
  *num_groups = g;
  return group_of;
}


constexpr uint64_t kNone = UINT64_MAX;

// --keep longest: the record number (data line number) of each group's longest document.
std::vector<uint64_t> choose_longest(const DedupOptions& opt, const std::unordered_map<std::string, uint32_t>& group_of, uint32_t num_groups,
                                     const std::vector<std::string>& keys) {
  std::vector<uint64_t> chosen(num_groups, kNone);
  std::vector<size_t> best_len(num_groups, 0);
  JsonlBatchReader reader({opt.input});
  JsonFieldExtractor extractor;
  std::vector<std::string> values;
  std::string detail;
  LineBatch batch;
  while (reader.next_batch(batch))
    for (size_t i = 0; i < batch.lines.size(); ++i) {
      const LineRef& ref = batch.lines[i];
      if (extractor.extract(batch.line(ref), batch.capacity_after(ref), keys, values, &detail) != RecordStatus::Ok) continue;
      auto it = group_of.find(values[0]);
      if (it == group_of.end()) continue;
      const size_t len = utf8_length(values[1]);
      const uint64_t rec = batch.first_record + i;
      if (chosen[it->second] == kNone || len > best_len[it->second]) chosen[it->second] = rec, best_len[it->second] = len;
    }
  return chosen;
}

struct Counts {
  uint64_t in = 0, written = 0, removed = 0, removed_chars = 0, missing_key = 0;
  std::string missing_detail;
};

// Every line of the input: kept byte-identical when its document is in no group
// or is its group's chosen one (with --keep first, the first met), else
// removed; malformed lines are counted and skipped. Removed and skipped lines
// go to --removed-out.
Counts filter_documents(const DedupOptions& opt, const CommonFlags& common, const std::unordered_map<std::string, uint32_t>& group_of,
                        std::vector<uint64_t>& chosen, const std::vector<std::string>& keys, BadRecords& bad) {
  JsonlBatchReader reader({opt.input});
  JsonlWriter out(opt.output);
  std::unique_ptr<JsonlWriter> removed_out;
  if (!opt.removed_out.empty()) removed_out = std::make_unique<JsonlWriter>(opt.removed_out);
  JsonFieldExtractor extractor;
  std::vector<std::string> values;
  std::string detail;
  LineBatch batch;
  Counts c;
  Progress progress({.label = "docs", .total_bytes = reader.total_file_bytes(), .interval_sec = common.progress_sec,
                     .enabled = !common.no_progress && !common.quiet});
  while (reader.next_batch(batch)) {
    for (size_t i = 0; i < batch.lines.size(); ++i) {
      const LineRef& ref = batch.lines[i];
      const std::string_view line = batch.line(ref);
      ++c.in;
      const RecordStatus st = extractor.extract(line, batch.capacity_after(ref), keys, values, &detail);
      if (st != RecordStatus::Ok) {
        if (st == RecordStatus::MissingKey) ++c.missing_key, c.missing_detail = detail;
        bad.add(opt.input + ":" + std::to_string(ref.line_number), std::string("[SKIPPING] ") + record_status_name(st) + ": " + detail);
        if (removed_out) removed_out->write_raw_line(line);
        continue;
      }
      bool keep = true;
      if (auto it = group_of.find(values[0]); it != group_of.end()) {
        uint64_t& choice = chosen[it->second];
        if (choice == kNone) choice = batch.first_record + i;  // --keep first: the first member met
        keep = choice == batch.first_record + i;
      }
      if (keep) {
        out.write_raw_line(line);
        ++c.written;
      } else {
        ++c.removed;
        c.removed_chars += utf8_length(values[1]);
        if (removed_out) removed_out->write_raw_line(line);
      }
    }
    progress.add(batch.lines.size(), batch.bytes);
    progress.set_kept(c.written);
    progress.maybe_report();
  }
  progress.finish();
  // A key absent from every record is a wrong flag, not bad data: an empty
  // output with exit 0 would look like success.
  if (c.in > 0 && c.missing_key == c.in)
    throw Error(ErrorKind::Usage, "%s: every one of its %lu records lacks a key (%s) ---> HINT: check --key and --text-key",
                opt.input.c_str(), (unsigned long)c.in, c.missing_detail.c_str());
  bad.fail_if_all_bad(c.in, opt.input);
  out.commit();
  if (removed_out) removed_out->commit();
  return c;
}

}  // namespace

void run(const DedupOptions& opt, const CommonFlags& common, Stats& stats) {
  const double t0 = log_elapsed_sec();
  check_distinct_paths({{"<output>", opt.output}, {"--removed-out", opt.removed_out}, {"--stats-out", common.stats_out}},
                       {{"<groups>", opt.groups}, {"<input>", opt.input}});
  if (opt.keep != "first" && opt.keep != "longest") throw Error(ErrorKind::Usage, "--keep must be first or longest");
  uint32_t num_groups = 0;
  uint64_t group_ids = 0;
  const auto group_of = read_groups(opt.groups, &num_groups, &group_ids);
  ZLM_LOG_INF("will be removing %lu urls", (unsigned long)(group_ids - num_groups));
  const std::vector<std::string> keys{opt.key, opt.text_key};
  std::vector<uint64_t> chosen = opt.keep == "longest" ? choose_longest(opt, group_of, num_groups, keys) : std::vector<uint64_t>(num_groups, kNone);
  BadRecords bad(opt.max_bad_records);
  const Counts c = filter_documents(opt, common, group_of, chosen, keys, bad);
  ZLM_LOG_INF(" [PROCESSED] time (s): %.2f | written: %lu | removed: %lu (char: %lu)", log_elapsed_sec() - t0,
              (unsigned long)c.written, (unsigned long)c.removed, (unsigned long)c.removed_chars);
  ZLM_LOG_INF("done :-)");
  stats.set("groups", static_cast<uint64_t>(num_groups));
  stats.set("docs_in", c.in);
  stats.set("docs_written", c.written);
  stats.set("docs_removed", c.removed);
  stats.set("chars_removed", c.removed_chars);
  stats.set("docs_bad", bad.count());
  stats.set("elapsed_sec", log_elapsed_sec() - t0);
}

}  // namespace zlm::dedup
