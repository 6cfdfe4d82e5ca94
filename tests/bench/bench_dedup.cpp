// MinHash kernels: shingling and signatures (100 permutations, 5-grams) on the
// OpenWebText fixture texts, one thread. Before anything is timed, the fast
// signature of every one of the 1000 documents is checked against the slow
// reference implementation (MinHasher::signature_reference); a difference exits 1.
#include <benchmark/benchmark.h>
#include <simdjson.h>

#include <cstdio>
#include <sstream>

#include "common/dedup/minhash.h"
#include "common/dedup/minhash_kernel.h"
#include "common/core/files.h"
#include "common/core/output_file.h"
#include "tests/bench/checked_main.h"

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

const zlm::MinHashParams kOptions{.num_seeds = 100, .char_ngram = 5, .seed = 1234};

// The fast kernel equals the reference on every fixture document.
bool signatures_match_reference() {
  zlm::MinHasher hasher(kOptions);
  std::vector<uint32_t> sig(kOptions.num_seeds);
  for (size_t i = 0; i < texts().size(); ++i) {
    hasher.signature(texts()[i], sig.data());
    if (sig != hasher.signature_reference(texts()[i])) {
      std::fprintf(stderr, "MinHash signature of document %zu differs from the reference; refusing to benchmark\n", i + 1);
      return false;
    }
  }
  return texts().size() == 1000;
}

void BM_MinHashSignature(benchmark::State& state) {
  zlm::MinHasher hasher(kOptions);
  std::vector<uint32_t> sig(kOptions.num_seeds);
  zlm::MinHashScratch scratch;
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

int main(int argc, char** argv) {
  benchmark::AddCustomContext("minhash_target", zlm::min_permutations_target());  // the instruction set dispatched to
  return zlm::bench::run_if(signatures_match_reference(), argc, argv);
}
