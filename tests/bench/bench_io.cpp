// I/O kernels: JSONL line reading + field extraction, and .bin/.idx writing.
// Input: the OpenWebText fixture JSONL (4.7 MB), repeated to ZLM_BENCH_MB (default 64).
// Checked before anything is timed (exit 1 on a difference):
//   - the writer, fed the Megatron fixture's sequences, produces its .bin and
//     .idx byte for byte;
//   - the extractor's "text" of every fixture line is written to
//     ZLM_BENCH_TEXTS_OUT (each followed by a NUL byte) when that is set, for
//     bench_io.sh to compare with what Python's json.loads extracts.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/core/error.h"
#include "common/io/jsonl.h"
#include "common/core/files.h"
#include "common/core/output_file.h"
#include "formats/megatron_mmap.h"
#include "tests/bench/checked_main.h"

namespace {

std::string corpus_path() {
  static std::string path = [] {
    size_t mb = std::getenv("ZLM_BENCH_MB") ? std::strtoul(std::getenv("ZLM_BENCH_MB"), nullptr, 10) : 64;
    std::string src = zlm::read_file(std::string(ZLM_TEST_DATA_DIR) + "/megatron/openwebtext-1000.decoded.jsonl");
    std::string out = (std::filesystem::temp_directory_path() / "zlm_bench_corpus.jsonl").string();
    std::ofstream f(out, std::ios::binary);
    for (size_t written = 0; written < mb << 20; written += src.size()) f << src;
    return out;
  }();
  return path;
}

void BM_JsonlReadLines(benchmark::State& state) {
  std::string path = corpus_path();
  uint64_t bytes = 0;
  for (auto _ : state) {
    zlm::JsonlBatchReader reader({path});
    zlm::LineBatch batch;
    uint64_t lines = 0;
    while (reader.next_batch(batch)) lines += batch.lines.size();
    if (lines == 0) state.SkipWithError("no lines read");
    bytes += reader.total_file_bytes();
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_JsonlReadLines)->Unit(benchmark::kMillisecond);

void BM_JsonlReadAndExtractText(benchmark::State& state) {
  std::string path = corpus_path();
  uint64_t bytes = 0, docs = 0;
  zlm::JsonFieldExtractor extractor;
  std::vector<std::string> keys{"text"}, values;
  std::string detail;
  for (auto _ : state) {
    zlm::JsonlBatchReader reader({path});
    zlm::LineBatch batch;
    while (reader.next_batch(batch)) {
      for (const auto& ref : batch.lines) {
        if (extractor.extract(batch.line(ref), batch.capacity_after(ref), keys, values, &detail) != zlm::RecordStatus::Ok) {
          state.SkipWithError(detail.c_str());
          return;
        }
        ++docs;
        benchmark::DoNotOptimize(values[0].data());
      }
    }
    bytes += reader.total_file_bytes();
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.SetItemsProcessed(static_cast<int64_t>(docs));
}
BENCHMARK(BM_JsonlReadAndExtractText)->Unit(benchmark::kMillisecond);

const std::string kFixture = std::string(ZLM_TEST_DATA_DIR) + "/megatron/meg-gpt2-openwebtext_text_document";

std::vector<std::vector<int32_t>> fixture_sequences() {
  zlm::formats::MegatronReader ref(kFixture);
  std::vector<std::vector<int32_t>> docs;
  for (uint64_t i = 0; i < ref.num_sequences(); ++i) {
    auto t = ref.sequence_tokens(i);
    docs.emplace_back(t.begin(), t.end());
  }
  return docs;
}

// Writes `reps` copies of the sequences, one document each (as the fixture holds them).
uint64_t write_sequences(const std::string& prefix, const std::vector<std::vector<int32_t>>& docs, int reps) {
  zlm::formats::MegatronWriter w(prefix, zlm::formats::DType::UInt16);
  for (int rep = 0; rep < reps; ++rep)
    for (const auto& d : docs) {
      w.add_item(std::span<const int32_t>(d));
      w.end_document();
    }
  const uint64_t bytes = w.bin_bytes();
  w.finalize();
  return bytes;
}

void BM_MegatronWrite(benchmark::State& state) {
  const auto docs = fixture_sequences();
  std::string out = (std::filesystem::temp_directory_path() / "zlm_bench_out").string();
  uint64_t bytes = 0;
  for (auto _ : state) bytes += write_sequences(out, docs, 10);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  std::filesystem::remove(out + ".bin");
  std::filesystem::remove(out + ".idx");
}
BENCHMARK(BM_MegatronWrite)->Unit(benchmark::kMillisecond);

bool checks_pass() {
  const std::string out = (std::filesystem::temp_directory_path() / "zlm_bench_check").string();
  write_sequences(out, fixture_sequences(), 1);
  for (const char* ext : {".bin", ".idx"}) {
    const bool same = zlm::read_file(out + ext) == zlm::read_file(kFixture + ext);
    std::filesystem::remove(out + ext);
    if (!same) {
      std::fprintf(stderr, "the writer's %s differs from the Megatron fixture's; refusing to benchmark\n", ext);
      return false;
    }
  }
  if (const char* path = std::getenv("ZLM_BENCH_TEXTS_OUT")) {
    zlm::JsonlBatchReader reader({std::string(ZLM_TEST_DATA_DIR) + "/megatron/openwebtext-1000.decoded.jsonl"});
    zlm::JsonFieldExtractor extractor;
    std::vector<std::string> keys{"text"}, values;
    std::string detail, texts;
    zlm::LineBatch batch;
    while (reader.next_batch(batch))
      for (const auto& ref : batch.lines) {
        if (extractor.extract(batch.line(ref), batch.capacity_after(ref), keys, values, &detail) != zlm::RecordStatus::Ok) {
          std::fprintf(stderr, "fixture line not extracted: %s\n", detail.c_str());
          return false;
        }
        texts += values[0];
        texts += '\0';
      }
    std::ofstream(path, std::ios::binary) << texts;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) { return zlm::bench::run_if(checks_pass(), argc, argv); }
