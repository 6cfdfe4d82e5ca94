#include "tools/shuffle/shuffle.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/core/error.h"
#include "common/io/input_files.h"
#include "common/io/line_reader.h"
#include "common/core/log.h"
#include "common/core/files.h"
#include "common/core/mapped_file.h"
#include "common/core/output_file.h"
#include "common/core/progress.h"
#include "tools/shuffle/bucket_sort.h"

namespace zlm::shuffle {

uint64_t line_key(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + (i + 1) * 0xD1B54A32D192ED03ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

namespace {

// At least 64 KiB (--memory-mb takes fractions, as near_dedup's).
uint64_t budget_bytes(double memory_mb) { return std::max<uint64_t>(static_cast<uint64_t>(memory_mb * 1048576.0), 1 << 16); }

// The write buffer of each of `buckets` files open at once: together half the
// budget, from 4 KiB to 64 KiB each.
size_t bucket_buffer(double memory_mb, uint32_t buckets) {
  return static_cast<size_t>(std::clamp<uint64_t>(budget_bytes(memory_mb) / 2 / buckets, 4096, 1 << 16));
}

// The read buffer of a bucket's records: an eighth of the budget, 4 KiB to 1 MiB.
size_t reader_buffer(double memory_mb) { return static_cast<size_t>(std::clamp<uint64_t>(budget_bytes(memory_mb) / 8, 4096, 1 << 20)); }

// Bucket files one pass may hold open: within the open-file limit (usable_open_files)
// and with at least 4 KiB of buffer each in half the budget.
uint32_t buckets_per_pass(double memory_mb, uint32_t buckets) {
  return static_cast<uint32_t>(std::min<uint64_t>({buckets, usable_open_files(), std::max<uint64_t>(budget_bytes(memory_mb) / 2 / 4096, 1)}));
}

// Buckets: enough that one (decompressed) bucket fits the memory budget; compressed
// inputs are assumed to expand 4x, stdin gets 64 buckets. Returns log2 of their number.
uint32_t bucket_bits(const ShuffleOptions& opt, const LineReader& reader, uint64_t in_bytes) {
  const uint64_t budget = budget_bytes(opt.memory_mb);
  const uint64_t expected = opt.input == "-" ? budget * 64 : in_bytes * (reader.compression() == Compression::None ? 1 : 4);
  const uint32_t most = buckets_per_pass(opt.memory_mb, 1u << 16);  // no more buckets than may be open at once: larger ones are sorted in runs
  uint32_t bits = 0;
  while ((expected >> bits) > budget / 2 && bits < 16 && (2u << bits) <= most) ++bits;
  return bits;
}

// Every line with its key into one BucketSorter (sorted in memory when the input
// fits the budget, in runs next to the output otherwise). Returns the lines.
uint64_t shuffle_in_one_bucket(LineReader& reader, const ShuffleOptions& opt, uint64_t in_bytes, OutputFile& out, Progress& progress) {
  const bool sized = reader.compression() == Compression::None && opt.input != "-" && in_bytes > 0;  // a pipe stats as 0 bytes
  BucketSorter sorter(budget_bytes(opt.memory_mb), opt.output + ".run", sized ? in_bytes : BucketSorter::kUnknownSize);
  std::string_view line;
  uint64_t lines = 0;
  while (reader.next(line)) {
    sorter.add(line_key(opt.seed, lines), lines, line);
    ++lines;
    progress.add(1, line.size() + 1);
    progress.maybe_report();
  }
  sorter.finish(out);
  return lines;
}

// First pass: each line, with its key and index, into the temporary bucket its
// key's top bits choose; second pass: each bucket read back, sorted within the
// budget, appended to the output and removed. Returns the lines.
uint64_t shuffle_through_buckets(LineReader& reader, const ShuffleOptions& opt, uint32_t bits, OutputFile& out, Progress& progress) {
  const uint32_t buckets = 1u << bits;
  ZLM_LOG_INF("two-pass shuffle through %u temporary buckets next to %s", buckets, opt.output.c_str());
  std::vector<std::unique_ptr<OutputFile>> parts;
  for (uint32_t b = 0; b < buckets; ++b) {
    parts.push_back(std::make_unique<OutputFile>(opt.output + ".bucket" + std::to_string(b), bucket_buffer(opt.memory_mb, buckets)));
    parts.back()->skip_sync();  // read back and removed by this run
  }
  std::string_view line;
  uint64_t lines = 0;
  while (reader.next(line)) {
    const uint64_t key = line_key(opt.seed, lines);
    OutputFile& part = *parts[key >> (64 - bits)];
    write_record(part, key, lines, line);
    ++lines;
    progress.add(1, line.size() + 1);
    progress.maybe_report();
  }
  for (auto& part : parts) part->finish();  // closed (descriptors and buffers free for the sorting), read back by the temporary name
  Record rec;
  for (uint32_t b = 0; b < buckets; ++b) {
    const std::string& path = parts[b]->temp_path();
    const uint64_t size = file_size(path);
    BucketSorter sorter(budget_bytes(opt.memory_mb), opt.output + ".bucket" + std::to_string(b) + ".run", size);
    {  // the reader's buffer and descriptor go before the merge
      RecordReader in(path, size, reader_buffer(opt.memory_mb));
      while (in.next(rec)) sorter.add(rec.key, rec.index, rec.line);
    }
    sorter.finish(out);
    parts[b].reset();
  }
  return lines;
}

}  // namespace

void run(const ShuffleOptions& opt, const CommonFlags& common, Stats& stats) {
  const double t0 = log_elapsed_sec();
  check_distinct_paths({{"<output>", opt.output}, {"--stats-out", common.stats_out}}, {{"<input>", opt.input}});
  uint64_t in_bytes = 0;
  struct stat st {};
  if (opt.input != "-" && ::stat(opt.input.c_str(), &st) == 0) in_bytes = static_cast<uint64_t>(st.st_size);
  LineReader reader(opt.input);
  const uint32_t bits = bucket_bits(opt, reader, in_bytes);
  Progress progress({.label = "lines", .total_bytes = reader.compression() == Compression::None ? in_bytes : 0,
                     .interval_sec = common.progress_sec, .enabled = !common.no_progress && !common.quiet});
  OutputFile out(opt.output);
  const uint64_t lines = bits == 0 ? shuffle_in_one_bucket(reader, opt, in_bytes, out, progress) : shuffle_through_buckets(reader, opt, bits, out, progress);
  progress.finish();
  out.commit();
  stats.set("lines", lines);
  stats.set("bytes_in", reader.bytes_read());
  stats.set("buckets", static_cast<uint64_t>(1u << bits));
  stats.set("seed", opt.seed);
  stats.set("elapsed_sec", log_elapsed_sec() - t0);
}

}  // namespace zlm::shuffle

// ---------------------------------------------------------------- sharded

namespace zlm::shuffle {

namespace {

constexpr char kScatterEnd[8] = {'Z', 'L', 'M', 'S', 'H', 'U', 'F', '1'};

std::string count_path(const ShardedOptions& o, size_t part) {
  return strprintf("%s/shuffle/counts/%s.count", o.work.c_str(), file_number(part, o.parts.size()).c_str());
}
// The scattered records depend on the seed and the bucket count: their directory says both, so a
// run with others never takes them for its own.
std::string scatter_path(const ShardedOptions& o, size_t part, uint32_t bucket) {
  return strprintf("%s/shuffle/scatter-seed%lu-buckets%u/%s.bucket-%05u", o.work.c_str(), (unsigned long)o.seed, o.buckets,
                   file_number(part, o.parts.size()).c_str(), bucket);
}
std::string bucket_path(const ShardedOptions& o, uint32_t bucket) { return strprintf("%s/bucket-%05u.jsonl", o.output_dir.c_str(), bucket); }

uint32_t bucket_bits_of(uint32_t buckets) {
  uint32_t bits = 0;
  while ((1u << bits) < buckets) ++bits;
  return bits;
}

uint64_t read_count(const std::string& path) {
  const std::string s = read_file(path);
  char* end = nullptr;
  const unsigned long long n = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || (*end != '\n' && *end != '\0'))
    throw Error(ErrorKind::Format, "%s: not a line count ---> HINT: remove it and re-run the count task", path.c_str());
  return n;
}

uint64_t count_task(const ShardedOptions& o, size_t part) {
  LineReader reader(o.parts[part]);
  std::string_view line;
  uint64_t n = 0;
  while (reader.next(line)) ++n;
  write_file_atomic(count_path(o, part), std::to_string(n) + "\n");
  return n;
}

// One pass of a scatter task: the part's records of buckets [lo, hi) to their
// files, finished (not yet published). Returns the part's lines.
uint64_t scatter_pass(const ShardedOptions& o, size_t part, uint64_t first, uint32_t lo, uint32_t hi, std::vector<std::unique_ptr<OutputFile>>& out) {
  const uint32_t bits = bucket_bits_of(o.buckets);
  for (uint32_t b = lo; b < hi; ++b) out[b] = std::make_unique<OutputFile>(scatter_path(o, part, b), bucket_buffer(o.memory_mb, hi - lo));
  std::vector<uint64_t> records(o.buckets, 0);
  LineReader reader(o.parts[part]);
  std::string_view line;
  uint64_t n = 0;
  while (reader.next(line)) {
    const uint64_t index = first + n++;
    const uint64_t key = line_key(o.seed, index);
    const uint32_t b = bits == 0 ? 0 : static_cast<uint32_t>(key >> (64 - bits));
    if (b < lo || b >= hi) continue;
    write_record(*out[b], key, index, line);
    ++records[b];
  }
  for (uint32_t b = lo; b < hi; ++b) {
    out[b]->write(&records[b], 8);
    out[b]->write(kScatterEnd, 8);
    out[b]->finish();  // closed: the next pass's files take its descriptor
  }
  return n;
}

// A scatter task in passes over its part, each over as many buckets as may be open at once.
uint64_t scatter_task(const ShardedOptions& o, size_t part, uint64_t& passes) {
  uint64_t first = 0;  // the part's first line's index in the whole corpus
  for (size_t p = 0; p < part; ++p) first += read_count(count_path(o, p));
  const uint64_t expected = read_count(count_path(o, part));
  const uint32_t per_pass = buckets_per_pass(o.memory_mb, o.buckets);
  std::vector<std::unique_ptr<OutputFile>> out(o.buckets);
  for (uint32_t lo = 0; lo < o.buckets; lo += per_pass) {
    const uint64_t n = scatter_pass(o, part, first, lo, std::min(o.buckets, lo + per_pass), out);
    if (n != expected)
      throw Error(ErrorKind::Usage, "%s has %lu lines, %lu when it was counted ---> HINT: it changed since the count stage: remove %s/shuffle "
                  "and re-run", o.parts[part].c_str(), (unsigned long)n, (unsigned long)expected, o.work.c_str());
    ++passes;
  }
  for (auto& f : out) f->publish();  // every bucket complete before any appears
  return expected;
}

// The records' bytes of a scattered bucket file (what precedes its trailer: the
// record count and the end marker) and that count; a file without the marker is refused.
std::pair<uint64_t, uint64_t> scatter_body(const std::string& path) {
  const uint64_t size = file_size(path);
  char trailer[16] = {};
  if (size >= 16) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw_errno("cannot open", path);
    const ssize_t got = ::pread(fd, trailer, sizeof trailer, static_cast<off_t>(size - 16));
    const int err = errno;
    ::close(fd);
    errno = err;
    if (got < 0) throw_errno("cannot read the end of", path);
    if (got != 16) throw Error(ErrorKind::Format, "%s: the file shrank while it was read (%lu bytes, then %ld at the end)", path.c_str(), (unsigned long)size, (long)got);
  }
  if (size < 16 || std::memcmp(trailer + 8, kScatterEnd, 8) != 0)
    throw Error(ErrorKind::Format, "%s: no end marker: the file is truncated ---> HINT: remove it and re-run its scatter task", path.c_str());
  return {size - 16, load_unaligned<uint64_t>(reinterpret_cast<const uint8_t*>(trailer))};
}

uint64_t gather_task(const ShardedOptions& o, uint32_t bucket, uint64_t& runs, uint64_t& passes) {
  std::vector<std::pair<uint64_t, uint64_t>> bodies;  // each part's record bytes and count, checked before any is read
  uint64_t bytes = 0;
  for (size_t part = 0; part < o.parts.size(); ++part) {
    bodies.push_back(scatter_body(scatter_path(o, part, bucket)));
    bytes += bodies.back().first;
  }
  BucketSorter sorter(budget_bytes(o.memory_mb), strprintf("%s/bucket-%05u.run", std::filesystem::path(scatter_path(o, 0, 0)).parent_path().c_str(), bucket),
                      bytes);
  Record rec;
  for (size_t part = 0; part < o.parts.size(); ++part) {
    const std::string path = scatter_path(o, part, bucket);
    const auto [body, want] = bodies[part];
    RecordReader in(path, body, reader_buffer(o.memory_mb));
    uint64_t got = 0;
    for (; in.next(rec); ++got) sorter.add(rec.key, rec.index, rec.line);
    if (got != want) throw Error(ErrorKind::Format, "%s: %lu records, its end marker says %lu", path.c_str(), (unsigned long)got, (unsigned long)want);
  }
  OutputFile out(bucket_path(o, bucket));
  const uint64_t lines = sorter.finish(out);
  if (sorter.runs() > 0) ZLM_LOG_INF("gather %u: sorted in %zu runs of --memory-mb %g / 2", bucket, sorter.runs(), o.memory_mb);
  runs += sorter.runs();
  passes += sorter.merge_passes();
  out.commit();
  return lines;
}

}  // namespace

uint64_t sharded_task_count(const ShardedOptions& o) { return o.stage == "gather" ? o.buckets : o.parts.size(); }

void run_sharded(const ShardedOptions& o, const CommonFlags& common, Stats& stats) {
  const double t0 = log_elapsed_sec();
  if (o.parts.empty()) throw Error(ErrorKind::Usage, "--parts: no input parts");
  if (o.work.empty()) throw Error(ErrorKind::Usage, "give --work DIR (the counts and the scattered buckets)");
  if (o.buckets == 0 || (o.buckets & (o.buckets - 1)) != 0 || o.buckets > 65536)
    throw Error(ErrorKind::Usage, "--buckets %u: a power of two from 1 to 65536", o.buckets);
  const std::vector<std::string> stages = o.stage == "all" ? std::vector<std::string>{"count", "scatter", "gather"} : std::vector<std::string>{o.stage};
  for (const std::string& st : stages)
    if (st != "count" && st != "scatter" && st != "gather") throw Error(ErrorKind::Usage, "--sharded %s: the stages are count, scatter, gather (or all)", st.c_str());
  if (o.task >= 0 && stages.size() != 1) throw Error(ErrorKind::Usage, "--task needs one stage, not all");
  std::vector<NamedPath> inputs;
  for (const auto& p : o.parts) inputs.push_back({"--parts", p});
  check_distinct_paths({{"--stats-out", common.stats_out}}, inputs);
  std::filesystem::create_directories(o.work + "/shuffle/counts");
  std::filesystem::create_directories(std::filesystem::path(scatter_path(o, 0, 0)).parent_path());
  uint64_t lines = 0, run_tasks = 0, scatter_passes = 0, gather_runs = 0, gather_passes = 0;
  for (const std::string& st : stages) {
    ShardedOptions one = o;
    one.stage = st;
    if (st == "gather") {
      if (o.output_dir.empty()) throw Error(ErrorKind::Usage, "the gather stage needs --bucket-dir");
      std::filesystem::create_directories(o.output_dir);
      // The buckets there are this permutation's: a directory of another seed, bucket count or
      // list of parts is refused rather than taken as done.
      const std::string stamp = o.output_dir + "/.shuffle-settings", want = strprintf("seed=%lu buckets=%u parts=%zu\n", (unsigned long)o.seed,
                                                                                        o.buckets, o.parts.size());
      if (!std::filesystem::exists(stamp)) write_file_atomic(stamp, want);
      else if (read_file(stamp) != want)
        throw Error(ErrorKind::Usage, "%s holds the buckets of another shuffle (%s) ---> HINT: give the flags of that run, or another --bucket-dir",
                    o.output_dir.c_str(), read_file(stamp).c_str());
    }
    const uint64_t n = sharded_task_count(one);
    if (o.task >= static_cast<int64_t>(n)) throw Error(ErrorKind::Usage, "--task %ld: the %s stage has tasks 0..%lu", (long)o.task, st.c_str(), (unsigned long)(n - 1));
    for (uint64_t t = 0; t < n; ++t) {
      if (o.task >= 0 && t != static_cast<uint64_t>(o.task)) continue;
      const std::string done = st == "count" ? count_path(o, t) : st == "scatter" ? scatter_path(o, t, o.buckets - 1) : bucket_path(o, static_cast<uint32_t>(t));
      if (std::filesystem::exists(done)) {
        ZLM_LOG_INF("%s %lu: done already (%s)", st.c_str(), (unsigned long)t, done.c_str());
        continue;
      }
      const uint64_t got = st == "count" ? count_task(o, t) : st == "scatter" ? scatter_task(o, t, scatter_passes) : gather_task(o, static_cast<uint32_t>(t), gather_runs, gather_passes);
      ZLM_LOG_INF("%s %lu: %lu lines", st.c_str(), (unsigned long)t, (unsigned long)got);
      if (st == "gather") lines += got;
      ++run_tasks;
    }
  }
  stats.set("tasks_run", run_tasks);
  stats.set("lines_gathered", lines);
  stats.set("scatter_passes", scatter_passes);  // reads of the parts: buckets past the open-file limit take several
  stats.set("gather_runs", gather_runs);  // sorted runs on disk: buckets past half of --memory-mb
  stats.set("gather_merge_passes", gather_passes);  // runs merged into longer ones first: too many to merge at once
  stats.set("buckets", static_cast<uint64_t>(o.buckets));
  stats.set("seed", o.seed);
  stats.set("elapsed_sec", log_elapsed_sec() - t0);
}

}  // namespace zlm::shuffle
