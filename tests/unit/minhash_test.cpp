#include "common/dedup/minhash.h"
#include "common/dedup/minhash_kernel.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/core/utf8.h"
#include "common/dedup/union_find.h"
#include "test_util.h"

namespace zlm {
namespace {

TEST(Shingles, CodePointWindowsIncludingTheLast) {
  std::vector<uint64_t> h;
  shingle_hashes("abcdef", 5, h);
  EXPECT_EQ(h.size(), 2u);  // "abcde", "bcdef"
  shingle_hashes("ab\xc3\xa9" "cd", 5, h);  // 5 code points, 6 bytes
  EXPECT_EQ(h.size(), 1u);
  shingle_hashes("abcd", 5, h);
  EXPECT_TRUE(h.empty());
  EXPECT_EQ(shingle_set("aaaaaaaa", 5).size(), 1u);
}

// The slow obvious shingling: the code point starts (the reference UTF-8 step),
// then XXH3-64 of the bytes of every window of n of them.
std::vector<uint64_t> shingles_reference(std::string_view text, uint32_t n) {
  std::vector<size_t> starts;
  for (size_t at = 0; at < text.size();) {
    starts.push_back(at);
    const Utf8Step st = utf8_step_reference(text.substr(at));
    at += st.ok ? st.len : 1;
  }
  starts.push_back(text.size());
  std::vector<uint64_t> out;
  for (size_t i = 0; i + n < starts.size(); ++i) out.push_back(XXH3_64bits(text.data() + starts[i], starts[i + n] - starts[i]));
  return out;
}

// The fast shingling (an ASCII path for 5-grams, the ring for the rest) against it on
// text mixing ASCII runs of every length with 2-, 3- and 4-byte characters and
// ill-formed bytes, for window lengths around the specialised one.
TEST(Shingles, EqualTheReferenceOnMixedText) {
  const std::vector<std::string> pieces{"a", "b", " ", "\xc3\xa9", "\xe2\x80\x94", "\xf0\x9f\x98\x80", "\xff", "\xe2\x80", "\n", "xyz"};
  std::mt19937 rng(9);
  std::vector<uint64_t> h;
  for (int t = 0; t < 300; ++t) {
    std::string text;
    const int len = static_cast<int>(rng() % 60);
    for (int i = 0; i < len; ++i) text += pieces[rng() % (t % 3 == 0 ? 3 : pieces.size())];
    for (uint32_t n : {1u, 2u, 4u, 5u, 6u, 9u}) {
      shingle_hashes(text, n, h);
      EXPECT_EQ(h, shingles_reference(text, n)) << "n=" << n << " text #" << t;
    }
  }
}

// The vectorised kernel against its scalar definition, for permutation counts around every
// vector width (and past the padding) and values with all 32 bits set, under every
// instruction set this binary has code for and this CPU runs (AVX-512, AVX2, SSE4, scalar).
void check_kernel_against_scalar() {
  std::mt19937_64 rng(11);
  for (uint32_t k : {1u, 2u, 3u, 7u, 8u, 9u, 15u, 16u, 17u, 31u, 33u, 63u, 64u, 65u, 100u, 129u, 256u}) {
    std::vector<uint64_t> mul(k), add(k);
    for (uint32_t i = 0; i < k; ++i) {
      mul[i] = rng() | 1;
      add[i] = rng();
    }
    const PermutationTable table = make_permutation_table(mul, add);
    for (size_t n : {0u, 1u, 5u, 1000u}) {
      std::vector<uint32_t> xs(n);
      for (auto& x : xs) x = static_cast<uint32_t>(rng());
      if (n > 1) xs[0] = ~0u;
      std::vector<uint32_t> fast(k + 1, 0xABCDEF01u), slow(k);
      min_permutations(xs.data(), n, table, fast.data());
      min_permutations_scalar(xs.data(), n, table, slow.data());
      EXPECT_EQ(std::vector<uint32_t>(fast.begin(), fast.begin() + k), slow) << "k=" << k << " n=" << n;
      EXPECT_EQ(fast[k], 0xABCDEF01u) << "wrote past k=" << k;  // the padding lanes are not stored
    }
  }
}

TEST(MinHashKernel, VectorisedEqualsScalarOnEveryTarget) {
#if defined(__x86_64__)
  EXPECT_GE(min_permutations_targets(), 2u);  // the static target and at least SSE4 on any x86-64 of this century
#endif
  for (size_t target = min_permutations_targets(); target-- > 0;) {  // the default, 0, last
    use_min_permutations_target(target);
    SCOPED_TRACE(min_permutations_target());
    check_kernel_against_scalar();
  }
}

// Against the set of low 32 bits (std::set): every value kept, in order of first
// occurrence, with repeats, zeros, values equal in their low 32 bits only, and
// values that share a slot of the table; near-consecutive repeats are left out.
TEST(LowBitsFewerRepeats, EveryValueKeptInFirstOccurrenceOrder) {
  std::mt19937_64 rng(5);
  std::vector<uint32_t> slots, got;
  for (size_t n : {0u, 1u, 7u, 100u, 50000u}) {
    std::vector<uint64_t> hashes;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t r = rng();
      hashes.push_back(i % 5 == 1 ? hashes[i - 1] ^ (r << 32) : i % 7 == 3 ? 0 : i % 3 == 2 ? (r & 0xFFFF) << 16 : r);
    }
    low32_fewer_repeats(hashes, slots, got);
    std::vector<uint32_t> first;  // the first occurrences, in order
    std::set<uint32_t> seen;
    for (uint64_t h : hashes)
      if (seen.insert(static_cast<uint32_t>(h)).second) first.push_back(static_cast<uint32_t>(h));
    std::vector<uint32_t> got_first;
    seen.clear();
    for (uint32_t x : got)
      if (seen.insert(x).second) got_first.push_back(x);
    EXPECT_EQ(got_first, first) << "n=" << n;
    size_t next_to_equal = 0;  // repeats of the value just before (never in another slot), 0 aside
    for (size_t i = 1; i < n; ++i) next_to_equal += static_cast<uint32_t>(hashes[i]) == static_cast<uint32_t>(hashes[i - 1]) && static_cast<uint32_t>(hashes[i]) != 0;
    if (n >= 100) {
      EXPECT_GT(next_to_equal, n / 10);
    }
    EXPECT_LE(got.size(), n - next_to_equal) << "a repeat of the value just before is left out";
  }
}

// Against std::sort + std::unique: hashes, hashes with many repeats, values crowded in
// a few top-bit buckets (past the buckets' insertion sort), and sizes around the cut-over.
TEST(SortUniqueHashes, EqualsSortAndUnique) {
  std::mt19937_64 rng(23);
  for (size_t n : {0u, 1u, 255u, 256u, 257u, 1000u, 70000u}) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<uint64_t> h(n);
      for (auto& x : h) x = kind == 0 ? rng() : kind == 1 ? rng() % 50 * 0x0123456789ABCDEFull : (rng() >> 60) << 60 | rng() % 1000;
      std::vector<uint64_t> want = h;
      std::sort(want.begin(), want.end());
      want.erase(std::unique(want.begin(), want.end()), want.end());
      sort_unique_hashes(h);
      EXPECT_EQ(h, want) << "n=" << n << " kind=" << kind;
    }
  }
}

TEST(Jaccard, ModesAndEmptySets) {
  std::vector<uint64_t> a{1, 2, 3, 4}, b{3, 4, 5};
  EXPECT_DOUBLE_EQ(jaccard(a, b, JaccardMode::Union), 2.0 / 5);
  EXPECT_DOUBLE_EQ(jaccard(a, b, JaccardMode::Min), 2.0 / 3);
  EXPECT_DOUBLE_EQ(jaccard(a, b, JaccardMode::Max), 2.0 / 4);
  EXPECT_DOUBLE_EQ(jaccard({}, b, JaccardMode::Union), 0.0);
}

TEST(MinHasher, FastSignatureEqualsReference) {
  MinHasher hasher({.num_seeds = 100, .char_ngram = 5, .seed = 7});
  std::mt19937 rng(3);
  for (int i = 0; i < 50; ++i) {
    std::string text;
    for (int k = 0; k < 10 + i * 37; ++k) text.push_back(static_cast<char>('a' + rng() % 26));
    std::vector<uint32_t> sig(100);
    hasher.signature(text, sig.data());
    EXPECT_EQ(sig, hasher.signature_reference(text));
  }
  std::vector<uint32_t> sig(100);
  hasher.signature("tiny", sig.data());
  EXPECT_EQ(sig, std::vector<uint32_t>(100, 0xFFFFFFFFu));
}

// Planted pairs with a spread of similarities: a base text of random words and
// a copy with a fraction of its words replaced.
struct Pair {
  std::string a, b;
  double j;
};
std::vector<Pair> planted_pairs(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> vocab;
  for (int w = 0; w < 5000; ++w) {
    std::string word;
    int len = 3 + static_cast<int>(rng() % 6);
    for (int k = 0; k < len; ++k) word.push_back(static_cast<char>('a' + rng() % 26));
    vocab.push_back(word);
  }
  std::vector<Pair> pairs;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> words(80);
    for (auto& w : words) w = vocab[rng() % vocab.size()];
    std::string a, b;
    double p = std::uniform_real_distribution<double>(0.0, 0.35)(rng);
    for (size_t k = 0; k < words.size(); ++k) {
      a += words[k] + " ";
      b += (std::uniform_real_distribution<double>(0, 1)(rng) < p ? vocab[rng() % vocab.size()] : words[k]) + " ";
    }
    double j = jaccard(shingle_set(a, 5), shingle_set(b, 5), JaccardMode::Union);
    pairs.push_back({a, b, j});
  }
  return pairs;
}

// The signature agreement estimates J within the binomial error of 100 permutations.
TEST(MinHasher, EstimateTracksExactJaccard) {
  MinHasher hasher({.num_seeds = 100, .char_ngram = 5, .seed = 1234});
  double sq = 0;
  auto pairs = planted_pairs(400, 11);
  for (const auto& p : pairs) {
    std::vector<uint32_t> sa(100), sb(100);
    hasher.signature(p.a, sa.data());
    hasher.signature(p.b, sb.data());
    double est = signature_similarity(sa, sb);
    EXPECT_LT(std::fabs(est - p.j), 5 * std::sqrt(p.j * (1 - p.j) / 100) + 0.02) << "J=" << p.j;
    sq += (est - p.j) * (est - p.j);
  }
  EXPECT_LT(std::sqrt(sq / pairs.size()), 0.05);
}

// LSH detection rate per similarity bin follows 1-(1-s^r)^b within 0.03
// (10 bands x 10 rows, Megatron's defaults).
TEST(MinHashLsh, DetectionRateFollowsTheSCurve) {
  const int bands = 10, rows = 10;
  MinHasher hasher({.num_seeds = 100, .char_ngram = 5, .seed = 1234});
  auto pairs = planted_pairs(6000, 21);
  const int kBins = 10;
  std::vector<double> found(kBins, 0), expected(kBins, 0), count(kBins, 0);
  for (const auto& p : pairs) {
    std::vector<uint32_t> sa(100), sb(100);
    hasher.signature(p.a, sa.data());
    hasher.signature(p.b, sb.data());
    bool candidate = false;
    for (int b = 0; b < bands && !candidate; ++b)
      candidate = std::equal(sa.begin() + b * rows, sa.begin() + (b + 1) * rows, sb.begin() + b * rows);
    int bin = std::min(kBins - 1, static_cast<int>(p.j * kBins));
    found[bin] += candidate;
    expected[bin] += 1 - std::pow(1 - std::pow(p.j, rows), bands);
    count[bin] += 1;
  }
  int checked = 0;
  for (int bin = 0; bin < kBins; ++bin) {
    if (count[bin] < 300) continue;  // too few pairs for a 0.03 tolerance
    ++checked;
    EXPECT_NEAR(found[bin] / count[bin], expected[bin] / count[bin], 0.03)
        << "bin [" << bin / 10.0 << ", " << (bin + 1) / 10.0 << "), " << count[bin] << " pairs";
  }
  EXPECT_GE(checked, 4);
}

// Union-find agrees with a plain BFS over the same random graphs.
TEST(UnionFind, MatchesBreadthFirstSearch) {
  std::mt19937 rng(5);
  for (int iter = 0; iter < 20; ++iter) {
    size_t n = 50 + rng() % 200, m = rng() % 300;
    std::vector<std::vector<uint32_t>> adj(n);
    UnionFind uf(n);
    for (size_t e = 0; e < m; ++e) {
      uint32_t a = rng() % n, b = rng() % n;
      adj[a].push_back(b);
      adj[b].push_back(a);
      uf.unite(a, b);
    }
    std::vector<int> comp(n, -1);
    int c = 0;
    for (size_t s = 0; s < n; ++s) {
      if (comp[s] >= 0) continue;
      std::vector<uint32_t> queue{static_cast<uint32_t>(s)};
      comp[s] = c;
      for (size_t q = 0; q < queue.size(); ++q)
        for (uint32_t v : adj[queue[q]])
          if (comp[v] < 0) comp[v] = c, queue.push_back(v);
      ++c;
    }
    for (size_t a = 0; a < n; ++a)
      for (size_t b = a + 1; b < n; b += 7) EXPECT_EQ(comp[a] == comp[b], uf.find(a) == uf.find(b));
  }
}

}  // namespace
}  // namespace zlm
