#include "trainer/parallel/comm.h"

#include <fcntl.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef ZLM_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef ZLM_HAVE_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <cstdlib>
#include <string>

#include "common/core/error.h"
#include "common/core/log.h"

namespace zlm::trainer {

namespace {

class DonePending final : public Comm::Pending {
 public:
  void wait() override {}
};

class LocalComm final : public Comm {
 public:
  std::string backend() const override { return "local"; }
  void all_reduce_sum(at::Tensor&) override {}
  void all_reduce_max(at::Tensor&) override {}
  void reduce_scatter_sum(at::Tensor& shard, const at::Tensor& full) override {
    if (!shard.is_same(full)) shard.copy_(full.view_as(shard));
  }
  void all_gather(at::Tensor& full, const at::Tensor& shard) override {
    if (!shard.is_same(full)) full.copy_(shard.view_as(full));
  }
  std::unique_ptr<Pending> all_gather_async(at::Tensor& full, const at::Tensor& shard) override {
    all_gather(full, shard);
    return std::make_unique<DonePending>();
  }
  std::unique_ptr<Pending> reduce_scatter_async(at::Tensor& shard, const at::Tensor& full) override {
    reduce_scatter_sum(shard, full);
    return std::make_unique<DonePending>();
  }
  std::unique_ptr<Pending> all_reduce_async(at::Tensor&) override { return std::make_unique<DonePending>(); }
  std::unique_ptr<Pending> p2p(const std::vector<P2p>& ops) override {
    if (!ops.empty()) throw Error(ErrorKind::Internal, "point-to-point message to another rank in a one-rank group");
    return std::make_unique<DonePending>();
  }
  void barrier() override {}
  std::unique_ptr<Comm> new_group(const std::string&, const std::vector<int>&) override { return std::make_unique<LocalComm>(); }
  std::vector<std::string> exchange(const std::string&, const std::string& mine) override { return {mine}; }
};

std::unique_ptr<Comm> make_local_comm() { return std::make_unique<LocalComm>(); }

// ZLM_PROCESS_GROUP_ALONE=1: a group of one rank (the run's, and every
// sub-group's) still goes through the process group instead of LocalComm, so
// that one GPU runs NCCL's code paths (the GPU tests; see tests/gpu/).
bool alone_in_group() {
  const char* v = std::getenv("ZLM_PROCESS_GROUP_ALONE");
  return v && std::string(v) == "1";
}

class C10dComm final : public Comm {
 public:
  C10dComm(const DistEnv& env, const std::string& backend, int gpu, std::chrono::milliseconds timeout)
      : name_(backend), timeout_(timeout), gpu_(gpu), loopback_(env.world_size == env.local_world_size) {
    rank_ = env.rank;
    world_ = env.world_size;
    const char* rv = std::getenv("ZLM_P2P_RENDEZVOUS");
    rendezvous_ = rv && std::string(rv) == "1" && backend == "gloo";
    if (rendezvous_ && rank_ == 0)
      ZLM_LOG_INF(" > ZLM_P2P_RENDEZVOUS=1: point-to-point messages follow NCCL's rules (tags ignored, a send waits for its receive)");
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(env.master_port);
    opts.isServer = env.rank == 0 && !env.agent_store;
    opts.numWorkers = static_cast<size_t>(env.world_size);
    opts.waitWorkers = false;
    opts.timeout = timeout;
    if (opts.isServer && env.store_listen_fd >= 0 && ::fcntl(env.store_listen_fd, F_GETFD) != -1)
      opts.masterListenFd = env.store_listen_fd;  // bound by the launcher: no other job can have taken the port since
    c10::intrusive_ptr<c10d::Store> store;
    try {
      store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
    } catch (const std::exception& e) {
      const c10::Error* ce = dynamic_cast<const c10::Error*>(&e);
      const std::string why = ce ? ce->what_without_backtrace() : e.what();
      if (opts.isServer && why.find("ddress already in use") != std::string::npos)
        throw Error(ErrorKind::Usage, "port %d is in use (another job?): rank 0 cannot open the rendezvous store there ---> HINT: give this "
                    "job another --master-port (or MASTER_PORT)", env.master_port);
      throw Error(ErrorKind::Io, "cannot reach the rendezvous store at %s:%d (%s)", env.master_addr.c_str(), env.master_port, why.c_str());
    }
    if (env.agent_store)  // torchrun's agent namespaces each restart attempt
      store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count), store);
    store_ = c10::make_intrusive<c10d::PrefixStore>("zerolm", store);
    if (!env.agent_store) check_own_job(env);
    connect();
  }
  // Rank 0 names the job in its store; a rank that finds another name there
  // reached another job's store (its port was taken by that job).
  void check_own_job(const DistEnv& env) {
    const std::string key = "job_id";
    if (rank_ == 0) {
      store_->set(key, std::vector<uint8_t>(env.job_id.begin(), env.job_id.end()));
      return;
    }
    if (env.job_id.empty()) return;
    const std::vector<uint8_t> got = store_->get(key);
    const std::string theirs(got.begin(), got.end());
    if (theirs != env.job_id)
      throw Error(ErrorKind::Usage, "this rank reached the rendezvous store at %s:%d of another job (%s), not its own (%s): port %d is in "
                  "use (another job?) ---> HINT: give this job another --master-port (or MASTER_PORT)", env.master_addr.c_str(),
                  env.master_port, theirs.empty() ? "no job id" : theirs.c_str(), env.job_id.c_str(), env.master_port);
  }
  // A sub-group: its own namespace of the run's store, its own backend instance.
  C10dComm(const C10dComm& parent, const std::string& group, int rank, int world)
      : name_(parent.name_), timeout_(parent.timeout_), gpu_(parent.gpu_), loopback_(parent.loopback_), rendezvous_(parent.rendezvous_) {
    rank_ = rank;
    world_ = world;
    store_ = c10::make_intrusive<c10d::PrefixStore>("group/" + group, parent.store_);
    connect();
  }
  void connect() {
    if (name_ == "gloo") {
#ifdef ZLM_HAVE_GLOO
      auto o = c10d::ProcessGroupGloo::Options::create(timeout_);
      const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
      o->devices.push_back(iface && *iface ? c10d::ProcessGroupGloo::createDeviceForInterface(iface)
                           : loopback_      ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")  // one host
                                            : c10d::ProcessGroupGloo::createDefaultDevice());
      o->threads = 2;
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("gloo", store_), rank_, world_, o);
#else
      throw Error(ErrorKind::Usage, "this build has no Gloo backend (the gloo headers were missing at build time)");
#endif
    } else {
#ifdef ZLM_HAVE_NCCL
      if (gpu_ < 0) throw Error(ErrorKind::Usage, "the nccl backend needs CUDA tensors; use --distributed-backend gloo on CPU");
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(gpu_));
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = timeout_;
      auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>("nccl", store_), rank_, world_, o);
      nccl->setBoundDeviceId(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(gpu_)));
      pg_ = nccl;
#else
      throw Error(ErrorKind::Usage, "this build has no NCCL backend (built without CUDA or without nccl.h)");
#endif
    }
  }
  ~C10dComm() override { shutdown(); }

  std::string backend() const override { return name_; }
  void all_reduce_sum(at::Tensor& t) override { all_reduce_async(t)->wait(); }
  std::unique_ptr<Pending> all_reduce_async(at::Tensor& t) override {
    std::vector<at::Tensor> v{t};
    return std::make_unique<Op>(this, "all_reduce", pg_->allreduce(v));
  }
  void all_reduce_max(at::Tensor& t) override {
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MAX;
    wait("all_reduce(max)", pg_->allreduce(v, o));
  }
  void reduce_scatter_sum(at::Tensor& shard, const at::Tensor& full) override { reduce_scatter_async(shard, full)->wait(); }
  std::unique_ptr<Pending> reduce_scatter_async(at::Tensor& shard, const at::Tensor& full) override {
    at::Tensor in = full;
    return std::make_unique<Op>(this, "reduce_scatter", pg_->_reduce_scatter_base(shard, in));
  }
  void all_gather(at::Tensor& full, const at::Tensor& shard) override { all_gather_async(full, shard)->wait(); }
  std::unique_ptr<Pending> all_gather_async(at::Tensor& full, const at::Tensor& shard) override {
    at::Tensor in = shard;
    return std::make_unique<Op>(this, "all_gather", pg_->_allgather_base(full, in));
  }
  std::unique_ptr<Pending> p2p(const std::vector<P2p>& ops) override {
    if (ops.empty()) return std::make_unique<DonePending>();
    if (name_ == "nccl") {  // one group: its sends and receives progress together
      pg_->startCoalescing();
      for (const auto& op : ops) post(op, op.tag);
      return std::make_unique<Op>(this, "send/recv", pg_->endCoalescing());
    }
    if (rendezvous_) return p2p_rendezvous(ops);
    auto all = std::make_unique<Ops>();
    for (const auto& op : ops) all->ops.emplace_back(this, op_name(op), post(op, op.tag));
    return all;
  }
  std::unique_ptr<Comm> new_group(const std::string& group, const std::vector<int>& ranks) override {
    auto me = std::find(ranks.begin(), ranks.end(), rank_);
    if (me == ranks.end()) throw Error(ErrorKind::Internal, "rank %d is not a member of group %s", rank_, group.c_str());
    if (ranks.size() == 1 && !alone_in_group()) return make_local_comm();
    return std::unique_ptr<Comm>(new C10dComm(*this, group, static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size())));
  }
  void barrier() override { wait("barrier", pg_->barrier()); }
  std::vector<std::string> exchange(const std::string& key, const std::string& mine) override {
    try {
      store_->set(key + "/" + std::to_string(rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
      std::vector<std::string> all;
      for (int r = 0; r < world_; ++r) {
        auto v = store_->get(key + "/" + std::to_string(r));
        all.emplace_back(v.begin(), v.end());
      }
      return all;
    } catch (const std::exception& e) {
      throw Error(ErrorKind::Io, "rendezvous '%s' among %d ranks failed (%s) ---> HINT: another rank did not start or died", key.c_str(),
                  world_, e.what());
    }
  }
  void shutdown() override {
    if (!pg_) return;
    try {
      pg_->shutdown();
    } catch (const std::exception&) {  // backends without shutdown() are fine
    }
    pg_.reset();
  }

 private:
  class Op final : public Pending {
   public:
    Op(C10dComm* c, const char* name, c10::intrusive_ptr<c10d::Work> w) : comm_(c), name_(name), work_(std::move(w)) {}
    void wait() override { comm_->wait(name_, work_); }

   private:
    C10dComm* comm_;
    const char* name_;
    c10::intrusive_ptr<c10d::Work> work_;
  };
  struct Ops final : public Pending {
    std::vector<Op> ops;
    void wait() override {
      for (auto& op : ops) op.wait();
    }
  };
  static const char* op_name(const P2p& op) { return op.kind == P2p::kSend ? "send" : "recv"; }
  c10::intrusive_ptr<c10d::Work> post(const P2p& op, int tag) {
    std::vector<at::Tensor> v{op.t};
    return op.kind == P2p::kSend ? pg_->send(v, op.peer, tag) : pg_->recv(v, op.peer, tag);
  }
  // NCCL's rules on Gloo (ZLM_P2P_RENDEZVOUS): every message under one tag, so
  // that only the posting order matches them, and each receive acknowledged
  // once the batch's receives are in; the batch returns when its sends are
  // acknowledged. A send whose receive is not in the peer's concurrent batch
  // therefore waits, as on NCCL, and a schedule that relies on more hangs
  // until --distributed-timeout-minutes.
  std::unique_ptr<Pending> p2p_rendezvous(const std::vector<P2p>& ops) {
    constexpr int kData = 0, kAck = 1;
    std::vector<Op> data, acks;  // (a Gloo operation is waited for once: a second wait waits for another message)
    std::vector<at::Tensor> ack_in, ack_out;
    for (const auto& op : ops) {
      data.emplace_back(this, op_name(op), post(op, kData));
      if (op.kind == P2p::kSend) {
        ack_in.push_back(at::empty({1}, op.t.options()));
        acks.emplace_back(this, "recv (acknowledgement)", post({P2p::kRecv, ack_in.back(), op.peer, 0}, kAck));
      }
    }
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].kind == P2p::kRecv) {
        data[i].wait();
        ack_out.push_back(at::zeros({1}, ops[i].t.options()));
        acks.emplace_back(this, "send (acknowledgement)", post({P2p::kSend, ack_out.back(), ops[i].peer, 0}, kAck));
      }
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].kind == P2p::kSend) data[i].wait();
    for (auto& op : acks) op.wait();
    return std::make_unique<DonePending>();
  }

  void wait(const char* op, const c10::intrusive_ptr<c10d::Work>& work) {
    try {
      wait_work(*work, wait_policy(name_), timeout_);
    } catch (const std::exception& e) {
      std::string what = e.what();
      if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
      // Two clocks can expire first on a silent rank, c10d's wait ("Operation timed out") or the transport's own
      // ("Timed out waiting ..."); either way the user wants to know which limit it was.
      if (what.find("imed out") != std::string::npos)
        what += strprintf(" (no answer within --distributed-timeout-minutes %g)", static_cast<double>(timeout_.count()) / 60000.0);
      throw Error(ErrorKind::Io, "%s among %d ranks failed: %s ---> HINT: another rank died or timed out; see its log", op, world_,
                  what.c_str());
    }
  }

  std::string name_;
  std::chrono::milliseconds timeout_;
  int gpu_ = -1;
  bool loopback_ = true;
  bool rendezvous_ = false;  // ZLM_P2P_RENDEZVOUS (Gloo only)
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> pg_;
};

}  // namespace

WaitOn wait_policy(const std::string& backend) { return backend == "nccl" ? WaitOn::Stream : WaitOn::Host; }

void wait_work(c10d::Work& work, WaitOn on, std::chrono::milliseconds timeout) {
  if (on == WaitOn::Stream) work.wait();  // kNoTimeout: the stream waits, not the host
  else work.wait(timeout);
}

std::unique_ptr<Comm> make_comm(const DistEnv& env, const std::string& backend, int gpu, std::chrono::milliseconds timeout) {
  if (env.world_size == 1 && !alone_in_group()) return make_local_comm();
  return std::make_unique<C10dComm>(env, backend, gpu, timeout);
}

}  // namespace zlm::trainer
