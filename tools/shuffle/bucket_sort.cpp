#include "tools/shuffle/bucket_sort.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <queue>
#include <tuple>

#include "common/core/error.h"
#include "common/core/files.h"

namespace zlm::shuffle {

RecordReader::RecordReader(std::string path, uint64_t body_bytes, size_t buffer_bytes)
    : path_(std::move(path)), body_(body_bytes), buf_(std::max<size_t>(buffer_bytes, 64)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw_errno("cannot open", path_);
}

RecordReader::~RecordReader() {
  if (fd_ >= 0) ::close(fd_);
}

// n bytes of the body to out, refilling the buffer as needed.
void RecordReader::read_exact(void* out, size_t n, uint64_t record_start) {
  if (n > body_ - pos_)
    throw Error(ErrorKind::Format, "%s: byte %lu: a record %s", path_.c_str(), (unsigned long)record_start,
                record_start == pos_ ? "cut short" : "longer than the file");
  auto* dst = static_cast<char*>(out);
  while (n > 0) {
    if (buf_at_ == buf_len_) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(buf_.size(), body_ - pos_));
      ssize_t got;
      do got = ::read(fd_, buf_.data(), want);
      while (got < 0 && errno == EINTR);
      if (got < 0) throw_errno("cannot read", path_);
      if (got == 0) throw Error(ErrorKind::Format, "%s: byte %lu: the file ended early (it shrank while read)", path_.c_str(), (unsigned long)pos_);
      buf_at_ = 0;
      buf_len_ = static_cast<size_t>(got);
    }
    const size_t take = std::min(n, buf_len_ - buf_at_);
    std::memcpy(dst, buf_.data() + buf_at_, take);
    buf_at_ += take;
    pos_ += take;
    dst += take;
    n -= take;
  }
}

bool RecordReader::next(Record& r) {
  if (pos_ == body_) return false;
  const uint64_t start = pos_;
  uint64_t header[3];
  read_exact(header, sizeof header, start);
  r.key = header[0];
  r.index = header[1];
  if (header[2] > body_ - pos_) throw Error(ErrorKind::Format, "%s: byte %lu: a record longer than the file", path_.c_str(), (unsigned long)start);
  r.line.resize(header[2]);
  read_exact(r.line.data(), r.line.size(), start);
  return true;
}

void write_record(OutputFile& out, uint64_t key, uint64_t index, std::string_view line) {
  const uint64_t header[3] = {key, index, line.size()};
  out.write(header, sizeof header);
  out.write(line);
}

BucketSorter::BucketSorter(uint64_t budget_bytes, std::string run_prefix, uint64_t expected_bytes)
    : budget_(std::max<uint64_t>(budget_bytes, 1 << 16)), expected_(expected_bytes), run_prefix_(std::move(run_prefix)) {}

BucketSorter::~BucketSorter() = default;  // the run files' OutputFiles remove them

void BucketSorter::add(uint64_t key, uint64_t index, std::string_view line) {
  const uint64_t held = data_.size() + held_.size() * sizeof(Held);
  if (!held_.empty() && held + line.size() + sizeof(Held) > budget_ / 2) spill();
  if (held_.empty()) data_.reserve(std::min(budget_ / 2, expected_));  // growing by doubling would hold more while it copies
  held_.push_back({key, index, data_.size(), line.size()});
  data_.append(line);
  ++added_;
}

void BucketSorter::sort_held() {
  std::sort(held_.begin(), held_.end(), [](const Held& a, const Held& b) { return std::tie(a.key, a.index) < std::tie(b.key, b.index); });
}

// A new run file (written, then read back by its temporary name until the sorter goes).
OutputFile& BucketSorter::new_run() {
  runs_.push_back(std::make_unique<OutputFile>(run_prefix_ + std::to_string(run_names_++), static_cast<size_t>(std::min<uint64_t>(budget_ / 4, 1 << 20))));
  runs_.back()->skip_sync();
  return *runs_.back();
}

// The records held, sorted, to a new run file.
void BucketSorter::spill() {
  sort_held();
  OutputFile& run = new_run();
  for (const Held& h : held_) write_record(run, h.key, h.index, std::string_view(data_).substr(h.offset, h.length));
  run.finish();
  bytes_spilled_ += data_.size();
  held_.clear();
  data_.clear();
}

uint64_t BucketSorter::finish(OutputFile& out) {
  if (runs_.empty()) {
    sort_held();
    for (const Held& h : held_) {
      out.write(data_.data() + h.offset, h.length);
      out.put('\n');
    }
    return held_.size();
  }
  if (!held_.empty()) spill();
  std::string().swap(data_);  // the budget's bytes go to the merge's buffers
  std::vector<Held>().swap(held_);
  // Each run being merged holds a read buffer and its current line: as many runs at once as
  // half the budget holds; more are first merged in groups into longer runs.
  // At most as many as may be open (64 descriptors left to the rest of the process).
  const uint64_t per_run = kMergeBuffer + bytes_spilled_ / std::max<uint64_t>(added_, 1) * 2;
  const size_t fan_in = static_cast<size_t>(std::clamp<uint64_t>(budget_ / 2 / per_run, 2, usable_open_files()));
  while (runs_.size() > fan_in) {
    std::vector<std::unique_ptr<OutputFile>> group(std::make_move_iterator(runs_.begin()), std::make_move_iterator(runs_.begin() + fan_in));
    runs_.erase(runs_.begin(), runs_.begin() + fan_in);
    OutputFile& run = new_run();
    merge(group, [&](const Record& r) { write_record(run, r.key, r.index, r.line); });
    run.finish();
    ++merge_passes_;
  }  // the group's files go with it
  const uint64_t lines = merge(runs_, [&](const Record& r) {
    out.write(r.line);
    out.put('\n');
  });
  if (lines != added_)
    throw Error(ErrorKind::Internal, "%s*: the runs hold %lu lines, %lu were added", run_prefix_.c_str(), (unsigned long)lines, (unsigned long)added_);
  return lines;
}

// A k-way merge of `runs` into sink(record): the smallest (key, index) at the head of any run next.
template <typename Sink>
uint64_t BucketSorter::merge(const std::vector<std::unique_ptr<OutputFile>>& runs, Sink&& sink) {
  std::vector<std::unique_ptr<RecordReader>> readers;
  std::vector<Record> heads(runs.size());
  using Head = std::tuple<uint64_t, uint64_t, size_t>;  // key, index, run
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> queue;
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string& path = runs[i]->temp_path();
    readers.push_back(std::make_unique<RecordReader>(path, file_size(path), kMergeBuffer));
    if (readers[i]->next(heads[i])) queue.emplace(heads[i].key, heads[i].index, i);
  }
  uint64_t lines = 0;
  while (!queue.empty()) {
    const size_t i = std::get<2>(queue.top());
    queue.pop();
    sink(heads[i]);
    ++lines;
    std::string().swap(heads[i].line);  // a head keeps no capacity of a long line it held
    if (readers[i]->next(heads[i])) queue.emplace(heads[i].key, heads[i].index, i);
  }
  return lines;
}

}  // namespace zlm::shuffle
