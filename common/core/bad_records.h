// Counting malformed records the same way in every tool (docs/design.md, "Conventions"):
// each one is counted and logged with its place ("file:line"), the first
// `log_first` one by one, and the run fails (zlm::Error Format) once more than
// --max-bad-records have been seen (max < 0: never), or when every record was bad.
//
//   zlm::BadRecords bad(opt.max_bad_records);
//   bad.add(strprintf("%s:%lu", file, line), "malformed_json: ...");
//
// Not thread-safe: call it from the ordered (serial) stage.
#pragma once

#include <cstdint>
#include <string>

namespace zlm {

class BadRecords {
 public:
  explicit BadRecords(int64_t max_bad_records, uint64_t log_first = 20) : max_(max_bad_records), log_first_(log_first) {}
  // `where` is "file:line"; `what` is the reason and detail.
  void add(const std::string& where, const std::string& what);
  uint64_t count() const { return count_; }
  // A run whose every record was bad wrote nothing worth having: zlm::Error
  // (Format) naming the first bad record, so that it does not exit 0. Call it
  // before the outputs are published; nothing happens when records is 0 or
  // some record was good.
  void fail_if_all_bad(uint64_t records, const std::string& input) const;

 private:
  int64_t max_;
  uint64_t log_first_, count_ = 0;
  std::string first_where_, first_what_;
};

}  // namespace zlm
