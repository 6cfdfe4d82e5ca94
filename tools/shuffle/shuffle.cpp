#include "tools/shuffle/shuffle.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "common/core/error.h"
#include "common/io/line_reader.h"
#include "common/core/log.h"
#include "common/core/files.h"
#include "common/core/output_file.h"
#include "common/core/progress.h"

namespace zlm::shuffle {

uint64_t line_key(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + (i + 1) * 0xD1B54A32D192ED03ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

namespace {

struct Rec {
  uint64_t key, index;
  size_t offset, length;  // into the bucket buffer
};

// Sorts one bucket's records (key, index, line) in memory and appends the lines to out.
void emit_sorted(std::vector<Rec>& recs, const std::string& buf, OutputFile& out) {
  std::sort(recs.begin(), recs.end(), [](const Rec& a, const Rec& b) { return a.key != b.key ? a.key < b.key : a.index < b.index; });
  for (const Rec& r : recs) {
    out.write(buf.data() + r.offset, r.length);
    out.put('\n');
  }
}

// Buckets: enough that one (decompressed) bucket fits the memory budget; compressed
// inputs are assumed to expand 4x, stdin gets 64 buckets. Returns log2 of their number.
uint32_t bucket_bits(const ShuffleOptions& opt, const LineReader& reader, uint64_t in_bytes) {
  const uint64_t budget = std::max<uint64_t>(opt.memory_mb, 1) << 20;
  const uint64_t expected = opt.input == "-" ? budget * 64 : in_bytes * (reader.compression() == Compression::None ? 1 : 4);
  uint32_t bits = 0;
  while ((expected >> bits) > budget / 2 && bits < 16) ++bits;
  return bits;
}

// Every line with its key in memory, sorted, written. Returns the lines.
uint64_t shuffle_in_memory(LineReader& reader, uint64_t seed, OutputFile& out, Progress& progress) {
  std::string buf;
  std::vector<Rec> recs;
  std::string_view line;
  uint64_t lines = 0;
  while (reader.next(line)) {
    recs.push_back({line_key(seed, lines), lines, buf.size(), line.size()});
    buf.append(line);
    ++lines;
    progress.add(1, line.size() + 1);
    progress.maybe_report();
  }
  emit_sorted(recs, buf, out);
  return lines;
}

// First pass: each line, with its key and index, into the temporary bucket its
// key's top bits choose; second pass: each bucket read back, sorted, appended
// to the output and removed. Returns the lines.
uint64_t shuffle_through_buckets(LineReader& reader, const ShuffleOptions& opt, uint32_t bits, OutputFile& out, Progress& progress) {
  const uint32_t buckets = 1u << bits;
  ZLM_LOG_INF("two-pass shuffle through %u temporary buckets next to %s", buckets, opt.output.c_str());
  std::vector<std::unique_ptr<OutputFile>> parts;
  for (uint32_t b = 0; b < buckets; ++b) parts.push_back(std::make_unique<OutputFile>(opt.output + ".bucket" + std::to_string(b), 1 << 16));
  std::string_view line;
  uint64_t lines = 0;
  while (reader.next(line)) {
    const uint64_t key = line_key(opt.seed, lines);
    OutputFile& part = *parts[key >> (64 - bits)];
    const uint64_t header[3] = {key, lines, line.size()};
    part.write(header, sizeof header);
    part.write(line);
    ++lines;
    progress.add(1, line.size() + 1);
    progress.maybe_report();
  }
  std::vector<Rec> recs;
  for (uint32_t b = 0; b < buckets; ++b) {
    parts[b]->commit();  // under its own temporary name, removed below
    const std::string data = read_file(parts[b]->path());
    std::remove(parts[b]->path().c_str());
    recs.clear();
    for (size_t p = 0; p < data.size();) {
      uint64_t header[3];
      std::memcpy(header, data.data() + p, sizeof header);
      p += sizeof header;
      recs.push_back({header[0], header[1], p, header[2]});
      p += header[2];
    }
    emit_sorted(recs, data, out);
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
  const uint64_t lines = bits == 0 ? shuffle_in_memory(reader, opt.seed, out, progress) : shuffle_through_buckets(reader, opt, bits, out, progress);
  progress.finish();
  out.commit();
  stats.set("lines", lines);
  stats.set("bytes_in", reader.bytes_read());
  stats.set("buckets", static_cast<uint64_t>(1u << bits));
  stats.set("seed", opt.seed);
  stats.set("elapsed_sec", log_elapsed_sec() - t0);
}

}  // namespace zlm::shuffle
