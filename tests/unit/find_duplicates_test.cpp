#include "tools/find_duplicates/find_duplicates.h"

#include <simdjson.h>

#include <map>
#include <random>
#include <set>
#include <sstream>

#include "common/core/error.h"
#include "common/core/json_writer.h"
#include "common/dedup/minhash.h"
#include "test_util.h"

namespace zlm::find_duplicates {
namespace {

// A corpus of unrelated documents plus planted near-duplicates of some of them.
struct Planted {
  std::vector<std::pair<std::string, std::string>> docs;  // id, text
  std::map<std::pair<std::string, std::string>, double> pairs;  // planted (original, copy) -> exact J
};

Planted make_corpus(int originals, int copies, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> vocab;
  for (int w = 0; w < 20000; ++w) {
    std::string word;
    for (int k = 0, len = 3 + static_cast<int>(rng() % 7); k < len; ++k) word.push_back(static_cast<char>('a' + rng() % 26));
    vocab.push_back(word);
  }
  Planted c;
  std::vector<std::vector<std::string>> words(originals);
  for (int i = 0; i < originals; ++i) {
    words[i].resize(150);
    std::string text;
    for (auto& w : words[i]) text += (w = vocab[rng() % vocab.size()]) + " ";
    c.docs.emplace_back("doc-" + std::to_string(i), text);
  }
  for (int i = 0; i < copies; ++i) {
    int orig = static_cast<int>(rng() % originals);
    double p = std::uniform_real_distribution<double>(0.0, 0.12)(rng);
    std::string text;
    for (const auto& w : words[orig]) text += (std::uniform_real_distribution<double>(0, 1)(rng) < p ? vocab[rng() % vocab.size()] : w) + " ";
    std::string id = "copy-" + std::to_string(i);
    c.pairs[{c.docs[orig].first, id}] =
        jaccard(shingle_set(c.docs[orig].second, 5), shingle_set(text, 5), JaccardMode::Union);
    c.docs.emplace_back(id, text);
  }
  return c;
}

void write_jsonl(const std::string& path, const Planted& c) {
  std::string out;
  for (const auto& [id, text] : c.docs) out += "{\"url\": " + json_string(id) + ", \"text\": " + json_string(text) + "}\n";
  test::spit(path, out);
}

// (main, other) -> similarity from the output file.
std::map<std::pair<std::string, std::string>, double> read_output(const std::string& path) {
  std::map<std::pair<std::string, std::string>, double> out;
  simdjson::dom::parser parser;
  std::istringstream in(test::slurp(path));
  std::string line;
  while (std::getline(in, line)) {
    simdjson::dom::object obj = parser.parse(line).get_object();
    for (auto [main, list] : obj)
      for (simdjson::dom::object item : list.get_array())
        for (auto [other, sim] : item) out[{std::string(main), std::string(other)}] = double(sim);
  }
  return out;
}

FindDuplicatesOptions options(const std::string& input, const std::string& output, int threads) {
  FindDuplicatesOptions opt;
  opt.inputs = {input, "url"};
  opt.output = output;
  opt.threads = threads;
  return opt;
}

CommonFlags quiet() {
  CommonFlags c;
  c.quiet = true;
  c.no_progress = true;
  return c;
}

TEST(FindDuplicates, RecallPrecisionAndDeterminism) {
  test::TempDir dir;
  Planted corpus = make_corpus(1500, 600, 42);
  write_jsonl(dir.path("in.jsonl"), corpus);
  Stats stats("find_duplicates");
  run(options(dir.path("in.jsonl"), dir.path("out1.jsonl"), 1), quiet(), stats);
  run(options(dir.path("in.jsonl"), dir.path("out8.jsonl"), 8), quiet(), stats);
  EXPECT_EQ(test::slurp(dir.path("out1.jsonl")), test::slurp(dir.path("out8.jsonl")));

  auto found = read_output(dir.path("out1.jsonl"));
  std::map<std::string, std::string> text;
  for (const auto& [id, t] : corpus.docs) text[id] = t;
  // Precision: every reported pair really is above the threshold, with the reported value.
  for (const auto& [pair, sim] : found) {
    double exact = jaccard(shingle_set(text[pair.first], 5), shingle_set(text[pair.second], 5), JaccardMode::Union);
    EXPECT_GT(exact, 0.5) << pair.first << " " << pair.second;
    EXPECT_NEAR(sim, exact, 1e-12);
  }
  // Recall of the planted pairs at J >= 0.8 (either direction; a copy may be reported
  // against another copy of the same original instead, which still groups them).
  std::set<std::pair<std::string, std::string>> undirected;
  for (const auto& [pair, sim] : found) undirected.insert(std::minmax(pair.first, pair.second));
  int high = 0, recalled = 0;
  for (const auto& [pair, j] : corpus.pairs) {
    if (j < 0.8) continue;
    ++high;
    recalled += undirected.count(std::minmax(pair.first, pair.second)) > 0;
  }
  ASSERT_GE(high, 200);
  EXPECT_GE(static_cast<double>(recalled) / high, 0.95) << recalled << " of " << high;
}

TEST(FindDuplicates, FingerprintsRoundTripAndParameterMismatch) {
  test::TempDir dir;
  Planted corpus = make_corpus(300, 100, 7);
  write_jsonl(dir.path("in.jsonl"), corpus);
  Stats stats("find_duplicates");
  auto opt = options(dir.path("in.jsonl"), dir.path("direct.jsonl"), 2);
  opt.save_fingerprints = dir.path("fp.bin");
  run(opt, quiet(), stats);
  FindDuplicatesOptions load;
  load.load_fingerprints = {dir.path("fp.bin")};
  load.output = dir.path("loaded.jsonl");
  run(load, quiet(), stats);
  EXPECT_EQ(test::slurp(dir.path("direct.jsonl")), test::slurp(dir.path("loaded.jsonl")));
  load.num_seeds = 120;
  load.num_bands = 12;
  EXPECT_ZLM_ERROR(run(load, quiet(), stats), ErrorKind::Usage, "--num-seeds 100");
  // A damaged file is refused with its name.
  std::string bytes = test::slurp(dir.path("fp.bin"));
  bytes[100] ^= 1;
  test::spit(dir.path("bad.bin"), bytes);
  load = FindDuplicatesOptions();
  load.load_fingerprints = {dir.path("bad.bin")};
  EXPECT_ZLM_ERROR(run(load, quiet(), stats), ErrorKind::Format, "checksum mismatch");
}

TEST(FindDuplicates, UsageErrors) {
  Stats stats("find_duplicates");
  FindDuplicatesOptions opt;
  opt.inputs = {"a.jsonl"};
  EXPECT_ZLM_ERROR(run(opt, quiet(), stats), ErrorKind::Usage, "pairs");
  opt.inputs = {};
  opt.num_seeds = 99;
  EXPECT_ZLM_ERROR(run(opt, quiet(), stats), ErrorKind::Usage, "multiple of --num-bands");
}

}  // namespace
}  // namespace zlm::find_duplicates
