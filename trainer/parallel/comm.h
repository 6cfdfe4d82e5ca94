// Collectives for data, tensor and pipeline parallelism behind one interface,
// with three implementations chosen by make_comm():
//   world size 1  -> local (copies; no process group), unless
//                    ZLM_PROCESS_GROUP_ALONE=1 (one GPU testing NCCL's paths);
//   CPU tensors   -> c10d's Gloo backend from the LibTorch wheel (loopback or TCP);
//   CUDA tensors  -> c10d's NCCL backend.
// Rendezvous is a c10d TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 serves it,
// or torchrun's agent does). Every blocking call, and wait() of the *_async
// ones, returns when the result may be used (wait_work below: on Gloo the
// collective has finished; on NCCL the current CUDA stream is ordered after it
// and the host runs on) and turns a failure (a dead peer, a timeout) into
// zlm::Error naming the operation and this rank, so no rank hangs when another
// dies (on NCCL a hang is reported by the process group's watchdog, after the
// same timeout).
//
//   auto comm = make_comm(dist_env_from_process(), "gloo", /*gpu=*/-1, std::chrono::minutes(10));
//   comm->all_reduce_sum(t);                // in place, every rank gets the sum
//   comm->reduce_scatter_sum(shard, full);  // full = world * shard elements; rank r gets the sum of chunk r
//   comm->all_gather(full, shard);          // chunk r of full = shard of rank r
//   auto tp = comm->new_group("tp0", {0, 1}); // a communicator over some ranks (members only call it)
//   tp->p2p({{Comm::P2p::kSend, t, 1, /*tag=*/0}})->wait();  // point to point, by rank within the group
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "trainer/config/dist_env.h"

namespace c10d {
class Work;
}

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
  // Point to point: a batch of messages to / from ranks of this communicator
  // that progress together (NCCL: one coalesced group, as PyTorch's
  // batch_isend_irecv; Gloo: each on its own). Tensors must stay alive (and
  // unchanged, for a send) until wait(). Messages between two ranks are matched
  // in the order they were posted; Gloo also matches by tag, NCCL ignores tags
  // and a send completes only once its receive is posted, so callers post the
  // messages between two ranks in one order on both sides and a batch's
  // receives in the batch the sender's batch meets. ZLM_P2P_RENDEZVOUS=1 gives
  // Gloo NCCL's rules (tags ignored, a batch waits until its sends are
  // received), so CPU tests prove that a schedule is deadlock-free under NCCL.
  struct P2p {
    enum Kind { kSend, kRecv } kind;
    at::Tensor t;
    int peer, tag;
  };
  virtual std::unique_ptr<Pending> p2p(const std::vector<P2p>& ops) = 0;
  virtual void barrier() = 0;
  // A communicator over `ranks` (ranks of this one, in the new group's rank
  // order). Collective over the members only: each calls it with the same name
  // (unique among the groups of the run) and ranks; a non-member never does.
  // Groups must be created in one global order (members block until all joined).
  virtual std::unique_ptr<Comm> new_group(const std::string& name, const std::vector<int>& ranks) = 0;
  // Every rank's string, in rank order (through the rendezvous store).
  virtual std::vector<std::string> exchange(const std::string& key, const std::string& mine) = 0;
  virtual void shutdown() {}

 protected:
  int rank_ = 0, world_ = 1;
};

// How an operation's wait is done. Gloo: the host waits (its wait is the
// completion), at most `timeout`. NCCL: the current CUDA stream waits on the
// NCCL stream (c10d's wait without a timeout) and the host goes on queueing
// kernels; a wait with any timeout would poll the operation's completion from
// the host and drain the GPU at every collective.
enum class WaitOn { Host, Stream };
WaitOn wait_policy(const std::string& backend);
void wait_work(c10d::Work& work, WaitOn on, std::chrono::milliseconds timeout);

// gpu: this rank's CUDA device index, or -1 for CPU tensors.
std::unique_ptr<Comm> make_comm(const DistEnv& env, const std::string& backend, int gpu, std::chrono::milliseconds timeout);


}  // namespace zlm::trainer
