// The process grid of model parallelism as Megatron-LM lays it out
// (docs/design.md, "Parallel training"): its groups, and the layers of each
// pipeline stage. The mappings that use the tensor-parallel group are in
// trainer/model/tensor_parallel.h.
//
// Grid: world = TP x DP x PP, global rank = tp + TP * (dp + DP * pp), so the
// ranks of one tensor-parallel group are adjacent, then data parallel, then the
// pipeline (Megatron's default order).
//
//   ProcessGrid grid(world_comm, /*tp=*/2, /*pp=*/2);
//   grid.tp()  // the ranks that split each layer (adjacent)
//   grid.dp()  // the ranks holding the same model part (ZeRO shards over it)
//   grid.pp()  // the stages of one pipeline; grid.embedding(): its first and last
//   grid.mp()  // the TP x PP ranks of one model replica (gradient norm)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainer/parallel/comm.h"

namespace zlm::trainer {

class ProcessGrid {
 public:
  // Creates the groups (collective over the world: every rank calls it with the same sizes).
  ProcessGrid(Comm& world, int tp, int pp);
  int tp_size() const { return tp_size_; }
  int pp_size() const { return pp_size_; }
  int dp_size() const { return dp_size_; }
  int tp_rank() const { return tp_rank_; }
  int pp_rank() const { return pp_rank_; }
  int dp_rank() const { return dp_rank_; }
  bool first_stage() const { return pp_rank_ == 0; }
  bool last_stage() const { return pp_rank_ == pp_size_ - 1; }
  int global_rank(int tp, int dp, int pp) const { return tp + tp_size_ * (dp + dp_size_ * pp); }
  Comm& world() { return world_; }
  Comm& tp() { return *tp_; }
  Comm& dp() { return *dp_; }
  Comm& pp() { return *pp_; }
  Comm& mp() { return *mp_; }
  // The first and last stage of this rank's pipeline (null on other stages and without PP).
  Comm* embedding() { return embedding_.get(); }
  // "rank 0: tp 0 pp 0 dp 0" lines, one per rank.
  std::string describe() const;

 private:
  Comm& world_;
  int tp_size_ = 1, pp_size_ = 1, dp_size_ = 1, tp_rank_ = 0, pp_rank_ = 0, dp_rank_ = 0;
  std::unique_ptr<Comm> tp_, dp_, pp_, mp_, embedding_;
};

// The layers of pipeline stage `stage` (of `stages`), one list per virtual chunk:
// chunk v holds layers [(v * stages + stage) * n, + n), n = layers / (stages * chunks).
std::vector<std::vector<int64_t>> stage_layers(int64_t layers, int stages, int chunks, int stage);

}  // namespace zlm::trainer
