// MinHash kernels: shingling and signatures (100 permutations, 5-grams) on the
// OpenWebText fixture texts, one thread. Checked against the slow reference first.
#include <benchmark/benchmark.h>
#include <simdjson.h>

#include <sstream>

#include "tools/find_duplicates/minhash.h"
#include "common/core/output_file.h"

namespace {

const std::vector<std::string>& texts() {
  static std::vector<std::string> t = [] {
    std::vector<std::string> out;
    simdjson::dom::parser parser;
    std::istringstream in(zlm::read_file(std::string(ZLM_TEST_DATA_DIR) + "/megatron/openwebtext-1000.decoded.jsonl"));
    std::string line;
    while (std::getline(in, line)) out.emplace_back(std::string_view(parser.parse(line)["text"].get_string()));
    return out;
  }();
  return t;
}

void BM_Shingles(benchmark::State& state) {
  std::vector<uint64_t> h;
  uint64_t bytes = 0;
  for (auto _ : state)
    for (const auto& t : texts()) {
      zlm::shingle_hashes(t, 5, h);
      bytes += t.size();
    }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_Shingles)->Unit(benchmark::kMillisecond);

void BM_MinHashSignature(benchmark::State& state) {
  zlm::MinHasher hasher({.num_seeds = 100, .char_ngram = 5, .seed = 1234});
  std::vector<uint32_t> sig(100);
  hasher.signature(texts()[3], sig.data());
  if (sig != hasher.signature_reference(texts()[3])) state.SkipWithError("signature differs from the reference");
  std::vector<uint64_t> scratch;
  uint64_t bytes = 0;
  for (auto _ : state)
    for (const auto& t : texts()) {
      hasher.signature(t, sig.data(), &scratch);
      bytes += t.size();
    }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_MinHashSignature)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
