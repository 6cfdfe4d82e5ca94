// One bucket of shuffle records sorted by (key, index) within a memory budget.
//
//   zlm::shuffle::BucketSorter sorter(budget_bytes, work_dir + "/bucket-00003.run");
//   zlm::shuffle::RecordReader in(path, body_bytes);       // one file of records
//   while (in.next(rec)) sorter.add(rec.key, rec.index, rec.line);
//   OutputFile out(...); sorter.finish(out); out.commit();
//
// A record on disk is three little-endian u64 (key, index, line length) and the
// line's bytes. BucketSorter holds records until they would exceed half the
// budget, then sorts them and writes them as a run file (`run_prefix` + N, a
// temporary OutputFile: removed when the sorter goes, also on SIGINT); finish()
// writes the lines in (key, index) order, sorting in memory when no run was
// written and merging the runs otherwise. A run being merged holds a 16 KiB read
// buffer and its current line: as many runs are merged at once as half the
// budget holds for the average line (at least 2) and the open-file limit
// allows (common/core/files.h; 64 left to the rest), and more runs than that are
// first merged in groups into longer runs (one more read and write of the data
// per pass). The output does not depend on the budget: keys and indexes are
// distinct, so the order is total. Memory: the records held (half the budget;
// the lines' bytes reserved at once, as much of it as the expected size needs,
// so that a doubling buffer never holds 1.5 times it), a run's write buffer (a
// quarter, at most 1 MiB), then the merge's buffers and heads (half), plus the
// longest lines at the heads of the runs being merged; the caller's RecordReader
// is its own. RecordReader streams records through a fixed buffer and names the
// file and byte offset of a record cut short or longer than the file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/core/output_file.h"

namespace zlm::shuffle {

struct Record {
  uint64_t key = 0, index = 0;
  std::string line;
};

// Appends one record (its header, then the line) to `out`.
void write_record(OutputFile& out, uint64_t key, uint64_t index, std::string_view line);

class RecordReader {
 public:
  // Reads the records in the first `body_bytes` of `path` (a trailer after them is the caller's).
  RecordReader(std::string path, uint64_t body_bytes, size_t buffer_bytes = 1 << 20);
  ~RecordReader();
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;
  bool next(Record& r);
  const std::string& path() const { return path_; }

 private:
  void read_exact(void* out, size_t n, uint64_t record_start);
  std::string path_;
  int fd_ = -1;
  uint64_t body_, pos_ = 0;  // pos_: bytes of the body consumed
  std::vector<char> buf_;
  size_t buf_at_ = 0, buf_len_ = 0;
};

class BucketSorter {
 public:
  static constexpr uint64_t kUnknownSize = UINT64_MAX;
  // `expected_bytes`: about how many bytes will be added (lines, or a file of records), when known.
  BucketSorter(uint64_t budget_bytes, std::string run_prefix, uint64_t expected_bytes = kUnknownSize);
  ~BucketSorter();
  void add(uint64_t key, uint64_t index, std::string_view line);
  // Writes every line added, each followed by '\n', in (key, index) order. Returns the lines.
  uint64_t finish(OutputFile& out);
  // Runs written (spilled and merged) so far, and the passes that merged runs into longer ones.
  size_t runs() const { return run_names_; }
  size_t merge_passes() const { return merge_passes_; }

 private:
  struct Held {
    uint64_t key, index;
    size_t offset, length;  // into data_
  };
  static constexpr uint64_t kMergeBuffer = 16 << 10;  // the read buffer of each run being merged
  void sort_held();
  OutputFile& new_run();
  void spill();
  template <typename Sink>
  uint64_t merge(const std::vector<std::unique_ptr<OutputFile>>& runs, Sink&& sink);
  uint64_t budget_, expected_;
  std::string run_prefix_;
  std::vector<Held> held_;
  std::string data_;
  std::vector<std::unique_ptr<OutputFile>> runs_;
  uint64_t added_ = 0, bytes_spilled_ = 0;
  size_t run_names_ = 0, merge_passes_ = 0;
};

}  // namespace zlm::shuffle
