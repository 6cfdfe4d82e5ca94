// GPT-2 BPE encode throughput, one thread, on the OpenWebText fixture texts
// (1000 documents, 4.7 MB, every byte distinct text). Before anything is
// timed, the ids of every document are checked against the reference hashes
// made by tiktoken (tests/data/tokenizer/owt_hashes.txt); a difference exits 1.
//   BM_Gpt2Encode           a fresh piece cache per pass: the cold first pass
//   BM_Gpt2EncodeWarmCache  the cache filled by an earlier pass over the same
//                           text (what repeated text would measure; for context)
#include <benchmark/benchmark.h>
#include <simdjson.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/core/error.h"
#include "common/tokenizer/gpt2_bpe.h"
#include "common/tokenizer/gpt2_pretokenizer.h"
#include "common/core/files.h"
#include "common/core/output_file.h"

namespace {

const std::string kData = ZLM_TEST_DATA_DIR;

struct Corpus {
  std::vector<std::string> texts;
  uint64_t bytes = 0;
  zlm::Gpt2Bpe bpe = zlm::Gpt2Bpe::load(kData + "/gpt2/gpt2-vocab.json", kData + "/gpt2/gpt2-merges.txt");
};

uint64_t fnv64(const std::vector<int32_t>& ids) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t id : ids)
    for (int k = 0; k < 4; ++k) h = (h ^ ((static_cast<uint32_t>(id) >> (8 * k)) & 0xff)) * 1099511628211ULL;
  return h;
}

const Corpus& corpus() {
  static Corpus c = [] {
    Corpus c;
    simdjson::dom::parser parser;
    std::istringstream in(zlm::read_file(kData + "/megatron/openwebtext-1000.decoded.jsonl"));
    std::istringstream hashes(zlm::read_file(kData + "/tokenizer/owt_hashes.txt"));
    std::string line;
    zlm::BpeCache cache;
    while (std::getline(in, line)) {
      std::string text(std::string_view(parser.parse(line)["text"].get_string()));
      size_t count;
      std::string hex;
      hashes >> count >> hex;
      std::vector<int32_t> ids;
      c.bpe.encode(text, ids, &cache);
      if (ids.size() != count || fnv64(ids) != std::stoull(hex, nullptr, 16)) {
        std::fprintf(stderr, "tokenizer output of document %zu differs from the reference; refusing to benchmark\n",
                     c.texts.size() + 1);
        std::exit(1);
      }
      c.texts.push_back(std::move(text));
    }
    if (c.texts.size() != 1000) {
      std::fprintf(stderr, "expected the 1000 fixture documents, read %zu\n", c.texts.size());
      std::exit(1);
    }
    for (const auto& t : c.texts) c.bytes += t.size();
    return c;
  }();
  return c;
}

void BM_Gpt2Encode(benchmark::State& state) {
  const Corpus& c = corpus();
  uint64_t tokens = 0;
  std::vector<int32_t> ids;
  for (auto _ : state) {
    zlm::BpeCache cache;
    for (const auto& t : c.texts) {
      ids.clear();
      c.bpe.encode(t, ids, &cache);
      tokens += ids.size();
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(c.bytes * state.iterations()));
  state.counters["tokens_per_second"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Gpt2Encode)->Unit(benchmark::kMillisecond);

void BM_Gpt2EncodeWarmCache(benchmark::State& state) {
  const Corpus& c = corpus();
  zlm::BpeCache cache;
  std::vector<int32_t> ids;
  for (const auto& t : c.texts) {  // the untimed first pass
    ids.clear();
    c.bpe.encode(t, ids, &cache);
  }
  for (auto _ : state)
    for (const auto& t : c.texts) {
      ids.clear();
      c.bpe.encode(t, ids, &cache);
    }
  state.SetBytesProcessed(static_cast<int64_t>(c.bytes * state.iterations()));
}
BENCHMARK(BM_Gpt2EncodeWarmCache)->Unit(benchmark::kMillisecond);

void BM_Gpt2PreTokenize(benchmark::State& state) {
  const Corpus& c = corpus();
  uint64_t pieces = 0;
  for (auto _ : state)
    for (const auto& t : c.texts) zlm::gpt2_pretokenize(t, [&](std::string_view) { ++pieces; });
  benchmark::DoNotOptimize(pieces);
  state.SetBytesProcessed(static_cast<int64_t>(c.bytes * state.iterations()));
}
BENCHMARK(BM_Gpt2PreTokenize)->Unit(benchmark::kMillisecond);

// Worst cases: 1 MB single word, 1 MB without spaces.
void BM_Gpt2EncodeSingleWord1MB(benchmark::State& state) {
  std::string word(1 << 20, 'a');
  std::vector<int32_t> ids;
  for (auto _ : state) {
    ids.clear();
    corpus().bpe.encode(word, ids, nullptr);
  }
  state.SetBytesProcessed(static_cast<int64_t>(word.size() * state.iterations()));
}
BENCHMARK(BM_Gpt2EncodeSingleWord1MB)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
