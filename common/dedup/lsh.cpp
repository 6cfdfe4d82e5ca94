#include "common/dedup/lsh.h"

#include "common/core/error.h"

namespace zlm {

BucketRule lsh_rule(uint32_t num_seeds, uint32_t num_bands, double threshold, int heuristic_iter, const std::string& jaccard) {
  if (num_bands == 0 || num_seeds % num_bands != 0)
    throw Error(ErrorKind::Usage, "--num-seeds (%u) must be a multiple of --num-bands (%u)", num_seeds, num_bands);
  if (heuristic_iter == 0 || heuristic_iter < -1) throw Error(ErrorKind::Usage, "--heuristic-iter must be >= 1 or -1");
  JaccardMode mode;
  if (jaccard == "union") mode = JaccardMode::Union;
  else if (jaccard == "min") mode = JaccardMode::Min;
  else if (jaccard == "max") mode = JaccardMode::Max;
  else throw Error(ErrorKind::Usage, "--jaccard must be union, min or max (got '%s')", jaccard.c_str());
  return {.threshold = threshold, .heuristic_iter = heuristic_iter, .mode = mode};
}

void verify_bucket(std::span<const uint32_t> docs, const BucketRule& rule,
                   const std::function<const std::vector<uint64_t>&(uint32_t)>& shingles_of,
                   const std::function<std::optional<double>(uint32_t, uint32_t)>& known,
                   const std::function<void(uint32_t, uint32_t, double, bool)>& report,
                   const std::function<void(uint32_t, uint32_t, double)>& computed) {
  std::vector<uint32_t> work(docs.begin(), docs.end()), rest;
  for (int round = 0; work.size() > 1 && (rule.heuristic_iter < 0 || round < rule.heuristic_iter); ++round) {
    const uint32_t main = work[0];
    rest.clear();
    for (size_t k = 1; k < work.size(); ++k) {
      const uint32_t other = work[k];
      std::optional<double> seen = known ? known(main, other) : std::nullopt;
      const double sim = seen ? *seen : jaccard(shingles_of(main), shingles_of(other), rule.mode);
      if (!seen && computed) computed(main, other, sim);
      if (sim > rule.threshold)
        report(main, other, sim, !seen);
      else
        rest.push_back(other);
    }
    work.swap(rest);
  }
}

}  // namespace zlm
