#include "trainer/parallel/grid.h"

#include "common/core/error.h"
#include "common/core/log.h"

namespace zlm::trainer {

ProcessGrid::ProcessGrid(Comm& world, int tp, int pp) : world_(world), tp_size_(tp), pp_size_(pp) {
  const int W = world.world();
  if (tp < 1 || pp < 1 || W % (tp * pp) != 0)
    throw Error(ErrorKind::Internal, "world size %d is not divisible by tensor-parallel size %d x pipeline-parallel size %d (the settings "
                "check this first: data_parallel_size)", W, tp, pp);
  dp_size_ = W / (tp * pp);
  const int r = world.rank();
  tp_rank_ = r % tp;
  dp_rank_ = (r / tp) % dp_size_;
  pp_rank_ = r / (tp * dp_size_);
  // Every group, in one global order; each rank joins the ones it belongs to
  // (a member blocks until all members joined, so the order must be the same everywhere).
  auto join = [&](std::unique_ptr<Comm>& slot, const std::string& name, const std::vector<int>& ranks) {
    for (int m : ranks)
      if (m == r) slot = world.new_group(name, ranks);
  };
  for (int p = 0; p < pp; ++p)
    for (int d = 0; d < dp_size_; ++d) {
      std::vector<int> g;
      for (int t = 0; t < tp; ++t) g.push_back(global_rank(t, d, p));
      join(tp_, strprintf("tp_%d_%d", d, p), g);
    }
  for (int p = 0; p < pp; ++p)
    for (int t = 0; t < tp; ++t) {
      std::vector<int> g;
      for (int d = 0; d < dp_size_; ++d) g.push_back(global_rank(t, d, p));
      join(dp_, strprintf("dp_%d_%d", t, p), g);
    }
  for (int d = 0; d < dp_size_; ++d)
    for (int t = 0; t < tp; ++t) {
      std::vector<int> g;
      for (int p = 0; p < pp; ++p) g.push_back(global_rank(t, d, p));
      join(pp_, strprintf("pp_%d_%d", t, d), g);
    }
  for (int d = 0; d < dp_size_; ++d) {
    std::vector<int> g;
    for (int p = 0; p < pp; ++p)
      for (int t = 0; t < tp; ++t) g.push_back(global_rank(t, d, p));
    join(mp_, strprintf("mp_%d", d), g);
  }
  if (pp > 1)
    for (int d = 0; d < dp_size_; ++d)
      for (int t = 0; t < tp; ++t) join(embedding_, strprintf("emb_%d_%d", t, d), {global_rank(t, d, 0), global_rank(t, d, pp - 1)});
}

std::string ProcessGrid::describe() const {
  std::string s;
  for (int p = 0; p < pp_size_; ++p)
    for (int d = 0; d < dp_size_; ++d)
      for (int t = 0; t < tp_size_; ++t)
        s += strprintf("     rank %3d: tensor-parallel rank %d, data-parallel rank %d, pipeline stage %d\n", global_rank(t, d, p), t, d, p);
  return s;
}

std::vector<std::vector<int64_t>> stage_layers(int64_t layers, int stages, int chunks, int stage) {
  const int64_t n = layers / (static_cast<int64_t>(stages) * chunks);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(chunks));
  for (int v = 0; v < chunks; ++v)
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(v)].push_back((static_cast<int64_t>(v) * stages + stage) * n + i);
  return out;
}

}  // namespace zlm::trainer
