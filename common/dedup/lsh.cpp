#include "common/dedup/lsh.h"

namespace zlm {

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
