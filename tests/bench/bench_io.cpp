// I/O kernels: JSONL line reading + field extraction, and .bin/.idx writing.
// Each benchmark checks its result before timing (docs/design.md, "Conventions").
// Input: the OpenWebText fixture JSONL (4.7 MB), repeated to ZLM_BENCH_MB (default 64).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/core/error.h"
#include "common/io/jsonl.h"
#include "common/core/output_file.h"
#include "formats/megatron_mmap.h"

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
BENCHMARK(BM_JsonlReadLines)->Unit(benchmark::kMillisecond)->MinTime(2);

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
BENCHMARK(BM_JsonlReadAndExtractText)->Unit(benchmark::kMillisecond)->MinTime(2);

void BM_MegatronWrite(benchmark::State& state) {
  std::string prefix = std::string(ZLM_TEST_DATA_DIR) + "/megatron/meg-gpt2-openwebtext_text_document";
  zlm::formats::MegatronReader ref(prefix);
  std::vector<std::vector<int32_t>> docs;
  for (uint64_t i = 0; i < ref.num_sequences(); ++i) {
    auto t = ref.sequence_tokens(i);
    docs.emplace_back(t.begin(), t.end());
  }
  std::string out = (std::filesystem::temp_directory_path() / "zlm_bench_out").string();
  uint64_t bytes = 0;
  for (auto _ : state) {
    zlm::formats::MegatronWriter w(out, zlm::formats::DType::UInt16);
    for (int rep = 0; rep < 10; ++rep)
      for (const auto& d : docs) {
        w.add_item(std::span<const int32_t>(d));
        w.end_document();
      }
    bytes += w.bin_bytes();
    w.finalize();
  }
  // Check: one repetition's bytes equal the Megatron fixture's .bin, 10 times.
  if (zlm::file_size(out + ".bin") != 10 * ref.bin_bytes()) state.SkipWithError("wrong .bin size");
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  std::filesystem::remove(out + ".bin");
  std::filesystem::remove(out + ".idx");
}
BENCHMARK(BM_MegatronWrite)->Unit(benchmark::kMillisecond)->MinTime(2);

}  // namespace

BENCHMARK_MAIN();
