// Collectives for data parallelism and ZeRO behind one interface, with three
// implementations chosen by make_comm():
//   world size 1  -> local (copies; no process group);
//   CPU tensors   -> c10d's Gloo backend from the LibTorch wheel (loopback or TCP);
//   CUDA tensors  -> c10d's NCCL backend.
// Rendezvous is a c10d TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 serves it,
// or torchrun's agent does). Every blocking call, and wait() of the *_async
// ones, returns when the collective finished and turns a failure (a dead peer,
// a timeout) into zlm::Error naming the operation and this rank, so no rank
// hangs when another dies.
//
//   auto comm = make_comm(dist_env_from_process(), "gloo", /*gpu=*/-1, std::chrono::minutes(10));
//   comm->all_reduce_sum(t);                // in place, every rank gets the sum
//   comm->reduce_scatter_sum(shard, full);  // full = world * shard elements; rank r gets the sum of chunk r
//   comm->all_gather(full, shard);          // chunk r of full = shard of rank r
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "trainer/dist_env.h"

namespace zlm::trainer {

class Comm {
 public:
  virtual ~Comm() = default;
  int rank() const { return rank_; }
  int world() const { return world_; }
  virtual std::string backend() const = 0;
  virtual void all_reduce_sum(at::Tensor& t) = 0;
  virtual void all_reduce_max(at::Tensor& t) = 0;
  virtual void reduce_scatter_sum(at::Tensor& shard, const at::Tensor& full) = 0;
  virtual void all_gather(at::Tensor& full, const at::Tensor& shard) = 0;
  // An operation under way; wait() finishes it (and throws like the blocking calls).
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual void wait() = 0;
  };
  // all_gather started in the background (Gloo's worker threads, NCCL's stream);
  // `full` and `shard` must stay alive until wait().
  virtual std::unique_ptr<Pending> all_gather_async(at::Tensor& full, const at::Tensor& shard) = 0;
  // reduce_scatter_sum and all_reduce_sum started in the background, likewise.
  virtual std::unique_ptr<Pending> reduce_scatter_async(at::Tensor& shard, const at::Tensor& full) = 0;
  virtual std::unique_ptr<Pending> all_reduce_async(at::Tensor& t) = 0;
  virtual void broadcast(at::Tensor& t, int root) = 0;
  virtual void barrier() = 0;
  // Every rank's string, in rank order (through the rendezvous store).
  virtual std::vector<std::string> exchange(const std::string& key, const std::string& mine) = 0;
  virtual void shutdown() {}

 protected:
  int rank_ = 0, world_ = 1;
};

// gpu: this rank's CUDA device index, or -1 for CPU tensors.
std::unique_ptr<Comm> make_comm(const DistEnv& env, const std::string& backend, int gpu, std::chrono::milliseconds timeout);

// Whether this build has each backend.
bool comm_has_gloo();
bool comm_has_nccl();

}  // namespace zlm::trainer
