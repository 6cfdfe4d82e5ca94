#include "tools/dedup/dedup.h"

#include <simdjson.h>

#include <memory>
#include <unordered_map>
#include <vector>

#include "common/core/output_file.h"
#include "common/core/bad_records.h"
#include "common/core/error.h"
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
    for (auto [name, list] : obj) {
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


}  // namespace

void run(const DedupOptions& opt, const CommonFlags& common, Stats& stats) {
  double t0 = log_elapsed_sec();
  check_distinct_paths({{"<output>", opt.output}, {"--removed-out", opt.removed_out}, {"--stats-out", common.stats_out}},
                       {{"<groups>", opt.groups}, {"<input>", opt.input}});
  if (opt.keep != "first" && opt.keep != "longest") throw Error(ErrorKind::Usage, "--keep must be first or longest");
  uint32_t num_groups = 0;
  uint64_t group_ids = 0;
  auto group_of = read_groups(opt.groups, &num_groups, &group_ids);
  ZLM_LOG_INF("will be removing %lu urls", (unsigned long)(group_ids - num_groups));
  std::vector<std::string> keys{opt.key, opt.text_key};
  const uint64_t kNone = UINT64_MAX;
  // The record number (data line number) of each group's chosen document.
  std::vector<uint64_t> chosen(num_groups, kNone);
  if (opt.keep == "longest") {
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
        size_t len = utf8_length(values[1]);
        uint64_t rec = batch.first_record + i;
        if (chosen[it->second] == kNone || len > best_len[it->second]) chosen[it->second] = rec, best_len[it->second] = len;
      }
  }
  JsonlBatchReader reader({opt.input});
  JsonlWriter out(opt.output);
  std::unique_ptr<JsonlWriter> removed_out;
  if (!opt.removed_out.empty()) removed_out = std::make_unique<JsonlWriter>(opt.removed_out);
  JsonFieldExtractor extractor;
  std::vector<std::string> values;
  std::string detail;
  LineBatch batch;
  uint64_t written = 0, removed = 0, removed_chars = 0, in = 0, missing_key = 0;
  std::string missing_detail;
  BadRecords bad(opt.max_bad_records);
  Progress progress({.label = "docs", .total_bytes = reader.total_file_bytes(), .interval_sec = common.progress_sec,
                     .enabled = !common.no_progress && !common.quiet});
  while (reader.next_batch(batch)) {
    for (size_t i = 0; i < batch.lines.size(); ++i) {
      const LineRef& ref = batch.lines[i];
      std::string_view line = batch.line(ref);
      ++in;
      RecordStatus st = extractor.extract(line, batch.capacity_after(ref), keys, values, &detail);
      if (st != RecordStatus::Ok) {
        if (st == RecordStatus::MissingKey) ++missing_key, missing_detail = detail;
        bad.add(opt.input + ":" + std::to_string(ref.line_number), std::string("[SKIPPING] ") + record_status_name(st) + ": " + detail);
        if (removed_out) removed_out->write_raw_line(line);
        continue;
      }
      bool keep = true;
      auto it = group_of.find(values[0]);
      if (it != group_of.end()) {
        uint64_t rec = batch.first_record + i;
        uint64_t& c = chosen[it->second];
        if (c == kNone) c = rec;  // --keep first: the first member met
        keep = c == rec;
      }
      if (keep) {
        out.write_raw_line(line);
        ++written;
      } else {
        ++removed;
        removed_chars += utf8_length(values[1]);
        if (removed_out) removed_out->write_raw_line(line);
      }
    }
    progress.add(batch.lines.size(), batch.bytes);
    progress.set_kept(written);
    progress.maybe_report();
  }
  progress.finish();
  // A key absent from every record is a wrong flag, not bad data: an empty
  // output with exit 0 would look like success.
  if (in > 0 && missing_key == in)
    throw Error(ErrorKind::Usage, "%s: every one of its %lu records lacks a key (%s) ---> HINT: check --key and --text-key",
                opt.input.c_str(), (unsigned long)in, missing_detail.c_str());
  out.commit();
  if (removed_out) removed_out->commit();
  ZLM_LOG_INF(" [PROCESSED] time (s): %.2f | written: %lu | removed: %lu (char: %lu)", log_elapsed_sec() - t0,
              (unsigned long)written, (unsigned long)removed, (unsigned long)removed_chars);
  ZLM_LOG_INF("done :-)");
  stats.set("groups", static_cast<uint64_t>(num_groups));
  stats.set("docs_in", in);
  stats.set("docs_written", written);
  stats.set("docs_removed", removed);
  stats.set("chars_removed", removed_chars);
  stats.set("docs_bad", bad.count());
  stats.set("elapsed_sec", log_elapsed_sec() - t0);
}

}  // namespace zlm::dedup
