#include "trainer/zero.h"

#include <ATen/ExpandUtils.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>

#ifdef ZLM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "common/core/error.h"
#include "common/core/log.h"

namespace zlm::trainer {

namespace {

struct Slot {
  std::string name;
  torch::Tensor param;  // the module's parameter (its data is swapped, never the object)
  int64_t offset = 0, numel = 0;
  std::vector<int64_t> shape;
  bool in_norm = true;  // counts in the gradient norm on this rank (ZeroConfig::in_norm)
};

struct Bucket {
  std::vector<Slot> slots;
  int64_t numel = 0, padded = 0, decay_end = 0;  // decay_end: weights [0, decay_end), the rest not decayed
  int64_t own_begin = 0, own_len = 0;            // the range this rank steps
  int block = -1;                                // transformer block index, -1 for the outer bucket
  bool sharded_params = false;                   // stage 3: parameters exist only as shards
  bool hooked = false;                           // gradients reduced from autograd hooks (stages 0-2; 0, 1: on the last micro-batch)
  bool reduced = false;                          // stages 0, 1: this step's reduction is launched
  torch::Tensor flat_param;   // full parameters (unless sharded_params)
  torch::Tensor param_shard;  // sharded_params: this rank's parameters (device, or host with offload_params)
  torch::Tensor flat_grad;    // stages 0, 1: the buffer param.grad views point into
  torch::Tensor grad_shard;   // reduced gradient of the owned range (device; stage 1: a view of flat_grad, reduced in place)
  torch::Tensor host_grad;    // offload, stages 0, 1 (and delayed updates): host copy of grad_shard
  bool shard_in_flat = false;  // grad_shard is (a view into) flat_grad
  // Offload, stages 0, 1: grad_shard goes to host_grad as soon as its
  // reduction is done (not for a bucket of its own, which the caller changes
  // after reduce_grads, nor with delayed updates, whose step reads host_grad
  // in the background); d2h_done marks the end of the copy.
  bool early_d2h = false;
  std::optional<c10::Event> d2h_done;
  torch::Tensor host_param;   // offload with CUDA, 16-bit parameters on the device: the cast chunk on its way up
  torch::Tensor master, exp_avg, exp_avg_sq;  // owned range, fp32, on the optimizer's device
  bool master_is_param = false;
  size_t ready = 0;
};

// Pinned host memory of exactly n elements: LibTorch's caching host
// allocator rounds every block up to a power of two (up to 2x the host memory
// of an offloaded optimizer).
torch::Tensor pinned_zeros(int64_t n, torch::ScalarType dtype) {
#ifdef ZLM_HAVE_CUDA
  const size_t size = static_cast<size_t>(n) * c10::elementSize(dtype);
  void* p = nullptr;
  if (cudaHostAlloc(&p, std::max<size_t>(size, 1), cudaHostAllocDefault) != cudaSuccess)
    throw Error(ErrorKind::Io, "cannot pin %zu bytes of host memory for the offloaded optimizer ---> HINT: ulimit -l, or less offload", size);
  std::memset(p, 0, size);
  return torch::from_blob(p, {n}, [](void* q) { cudaFreeHost(q); }, torch::TensorOptions().dtype(dtype));
#else
  return torch::zeros({n}, torch::TensorOptions().dtype(dtype).pinned_memory(true));
#endif
}

torch::Tensor zeros_on(int64_t n, const torch::Device& dev, bool pin, torch::ScalarType dtype = torch::kFloat) {
  if (pin && dev.is_cpu()) return pinned_zeros(n, dtype);
  return torch::zeros({n}, torch::TensorOptions().dtype(dtype).device(dev));
}

int64_t bytes(const torch::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

// Copies between the device and pinned host memory on a stream of their own
// (CUDA), so that they overlap the compute stream's work: each starts when the
// compute stream has done what was queued on it so far, and an event marks its
// end. On the CPU a plain copy (nothing to overlap; the same code path runs).
struct CopyStream {
  std::optional<c10::Stream> stream;
  explicit CopyStream(const torch::Device& d) {
    if (d.is_cuda()) stream = c10::impl::VirtualGuardImpl(d.type()).getStreamFromGlobalPool(d);
  }
  void copy(torch::Tensor dst, const torch::Tensor& src, std::optional<c10::Event>& done) const {
    if (!stream) {
      dst.copy_(src);
      return;
    }
    std::optional<c10::Event> queued;
    mark(queued);
    queued->block(*stream);
    c10::StreamGuard on(*stream);
    dst.copy_(src, /*non_blocking=*/true);
    done.emplace(stream->device_type());
    done->record(*stream);
  }
  // The host waits for the copy (or the work) an event marks.
  static void wait(std::optional<c10::Event>& e) {
    if (!e) return;
    e->synchronize();
    e.reset();
  }
  // An event for what the compute stream has queued so far (none on CPU).
  void mark(std::optional<c10::Event>& e) const {
    if (!stream) return;
    e.emplace(stream->device_type());
    e->record(c10::impl::VirtualGuardImpl(stream->device_type()).getStream(stream->device()));
  }
};

}  // namespace

struct ZeroEngine::Impl {
  Gpt2& model;
  Comm& comm;
  ZeroConfig cfg;
  torch::Device device, opt_device;
  bool pin = false;
  int W = 1, rank = 0;
  // Stages 0, 1 with gradients of another dtype than the parameters: param.grad
  // cannot be a view of the bucket; a hook adds it in (Megatron's main_grad).
  bool main_grad = false;
  // The factor reduce_grads recorded (see zero.h), applied in fp32 by the
  // norm and the step: for 16-bit gradients, and for those that go to the
  // host as soon as they are reduced (defer_mult); 1 otherwise.
  double grad_mult = 1.0;
  bool defer_mult = false;
  CopyStream d2h;                       // gradients to the host (CUDA; a plain copy on CPU)
  std::optional<c10::Event> up_done;    // offload: the last step's parameter copies up (queued on the compute stream)
  // Offload at stages 2, 3: a bucket's reduced part on its way to the host
  // gradient shard (copied into landing_buf on the copy stream with CUDA), added
  // there when the next bucket's reduction completes or the backward ends.
  struct Landing {
    Bucket* k;
    torch::Tensor part, host;
    std::optional<c10::Event> done;
  };
  std::optional<Landing> landing;
  torch::Tensor landing_buf;  // pinned, CUDA only
  std::vector<Bucket> buckets;            // [0] outer, [1 + l] block l
  // Per bucket: the virtual-pipeline chunk whose backward produces its
  // gradients (the outer bucket and those of their own: the first chunk on the
  // first stage, the last chunk elsewhere). Per chunk: the launch order of its
  // hooked buckets (reverse model order), and how many are launched.
  std::vector<size_t> chunk_of;
  std::vector<std::vector<size_t>> launch_order;
  std::vector<size_t> next_launch;
  size_t wte_bucket = 0;  // the bucket holding wte.weight (its own with pipeline parallelism)
  static constexpr size_t kNone = SIZE_MAX;
  int64_t micro_total = 1, micro_done = 0;  // micro-batches of this step, and those whose backward is done
  std::mutex mu;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // keep the hooked nodes alive
  double sum_counted(const std::function<torch::Tensor(const Bucket&)>& of, const std::function<torch::Tensor(const torch::Tensor&)>& f,
                     bool zero_padding_neutral);
  void adamw(Bucket& k, const torch::Tensor& grad, double mult, double lr, const torch::Tensor& steps, bool publish);
  void publish(bool copy);
  torch::Tensor anchor;  // stage 3: a leaf that requires grad, so that the embedding's backward runs
  // Stage 3, a part with the embeddings and the head: the gradients of the
  // outer bucket and of wte's, from the head's backward to the embeddings'
  // (one buffer when wte is in the outer bucket).
  torch::Tensor outer_grad, wte_grad;

  std::future<void> pending;  // a delayed update in flight

  bool delayed() const { return cfg.delayed_update_after >= 0; }

  Impl(Gpt2& m, Comm& c, const ZeroConfig& z, const torch::Device& d)
      : model(m), comm(c), cfg(z), device(d), opt_device(z.offload_optimizer ? torch::Device(torch::kCPU) : d), d2h(d) {
    if (delayed() && !cfg.offload_optimizer)
      throw Error(ErrorKind::Usage, "the delayed parameter update needs the CPU offload of the optimizer (it overlaps the CPU step with the device's work)");
    W = comm.world();
    rank = comm.rank();
    pin = z.offload_optimizer && d.is_cuda();
    main_grad = cfg.stage <= 1 && cfg.grad_dtype != cfg.param_dtype;
    defer_mult = cfg.grad_dtype != torch::kFloat || (cfg.offload_optimizer && cfg.stage <= 1 && !delayed());
    const auto L = static_cast<int64_t>(m->blocks->size());
    buckets.resize(static_cast<size_t>(L + 1) + cfg.own_buckets.size());
    for (int64_t l = 0; l <= L; ++l) buckets[static_cast<size_t>(l)].block = static_cast<int>(l) - 1;
    // Assign parameters: "blocks.<l>.*" to block l, those named in own_buckets
    // to a bucket each (after the blocks), everything else to the outer bucket.
    std::vector<std::vector<Slot>> decay(buckets.size()), no_decay(buckets.size());
    for (const auto& item : m->named_parameters()) {
      const std::string& name = item.key();
      size_t b = 0;
      if (name.rfind("blocks.", 0) == 0) b = 1 + std::stoul(name.substr(7, name.find('.', 7) - 7));
      auto own = std::find(cfg.own_buckets.begin(), cfg.own_buckets.end(), name);
      if (own != cfg.own_buckets.end()) b = static_cast<size_t>(L + 1 + (own - cfg.own_buckets.begin()));
      Slot s{name, item.value(), 0, item.value().numel(), item.value().sizes().vec(), !cfg.in_norm || cfg.in_norm(name)};
      (item.value().dim() >= 2 ? decay : no_decay)[b].push_back(s);
    }
    const int64_t unit = static_cast<int64_t>(W) * cfg.align;
    for (size_t b = 0; b < buckets.size(); ++b) {
      Bucket& k = buckets[b];
      for (auto* group : {&decay[b], &no_decay[b]}) {
        for (auto& s : *group) {
          s.offset = k.numel;
          k.numel += s.numel;
          k.slots.push_back(s);
        }
        if (group == &decay[b]) k.decay_end = k.numel;
      }
      k.padded = (k.numel + unit - 1) / unit * unit;
      const int64_t shard = k.padded / W;
      k.own_begin = cfg.stage == 0 ? 0 : rank * shard;
      k.own_len = cfg.stage == 0 ? k.padded : shard;
      k.sharded_params = cfg.stage == 3;
      k.hooked = !k.sharded_params;
      // Parameters: one flat buffer, or at stage 3 only this rank's shard of
      // it, filled parameter by parameter: from the module's values, or drawn
      // on the device (a model with deferred parameters has no values: no
      // whole copy of it exists anywhere, the largest transient is one tensor).
      torch::NoGradGuard no_grad;
      auto fill = [&](torch::Tensor dst, int64_t begin) {  // dst: the bucket's elements [begin, begin + dst.numel())
        for (const auto& s : k.slots) {
          const int64_t lo = std::max(s.offset, begin), hi = std::min(s.offset + s.numel, begin + dst.numel());
          if (hi <= lo) continue;
          const torch::Tensor v = m->deferred() ? m->initial_value(s.name, device) : s.param.detach();
          dst.narrow(0, lo - begin, hi - lo).copy_(v.reshape({-1}).narrow(0, lo - s.offset, hi - lo));
        }
      };
      if (k.sharded_params) {
        auto where = cfg.offload_params ? torch::Device(torch::kCPU) : device;
        k.param_shard = zeros_on(k.own_len, where, cfg.offload_params && device.is_cuda(), cfg.param_dtype);
        fill(k.param_shard, k.own_begin);
        for (auto& s : k.slots) s.param.set_data(torch::empty({0}, torch::TensorOptions().dtype(s.param.scalar_type()).device(device)));
      } else {
        k.flat_param = zeros_on(k.padded, device, false, cfg.param_dtype);
        fill(k.flat_param, 0);
        for (auto& s : k.slots) s.param.set_data(k.flat_param.narrow(0, s.offset, s.numel).view(s.shape));
      }
      // Gradients.
      if (cfg.stage <= 1) {
        k.flat_grad = zeros_on(k.padded, device, false, cfg.grad_dtype);
        if (!main_grad)
          for (auto& s : k.slots) s.param.mutable_grad() = k.flat_grad.narrow(0, s.offset, s.numel).view(s.shape);
        // Stage 1 reduce-scatters in place: the owned range of the full buffer
        // (NCCL's in-place case, output = input + rank * shard) is the shard.
        k.grad_shard = k.flat_grad.narrow(0, k.own_begin, k.own_len);
        k.shard_in_flat = true;
      } else {
        // Stages 2/3 with offload: reduced gradients go straight to host memory,
        // so the device never holds a gradient shard (DeepSpeed does the same).
        k.grad_shard = zeros_on(k.own_len, opt_device, pin, cfg.grad_dtype);
      }
      // Delayed updates read fp32 gradients of their own while the next
      // step's accumulate.
      // Otherwise stages 0, 1 copy the reduced shard to the host (also on a
      // CPU run, so that tests run that path), as soon as it is reduced.
      const bool own_bucket = b >= static_cast<size_t>(L + 1);
      if (delayed()) k.host_grad = zeros_on(k.own_len, opt_device, pin);
      else if (cfg.offload_optimizer && cfg.stage <= 1) {
        k.host_grad = zeros_on(k.own_len, opt_device, pin, cfg.grad_dtype);
        k.early_d2h = !own_bucket;
      }
      // Optimizer state of the owned range: master weights, Adam moments.
      torch::Tensor own = k.sharded_params ? k.param_shard : k.flat_param.narrow(0, k.own_begin, k.own_len);
      // With offload the master weights are a separate host copy (copied back
      // after each step), also when training on CPU, so CPU tests run that path;
      // only fp32 stage-3 shards already in host memory serve as their own
      // master. 16-bit parameters always have an fp32 master copy, which starts
      // from the rounded parameters (as Megatron's and DeepSpeed's do).
      // (Not with delayed updates: the forward reads the parameters while the
      // background step writes the master weights.)
      const bool host_shard = k.sharded_params && cfg.offload_params;
      if (own.device() == opt_device && own.scalar_type() == torch::kFloat && (!cfg.offload_optimizer || host_shard) && !delayed()) {
        k.master = own;
        k.master_is_param = true;
      } else {
        k.master = zeros_on(k.own_len, opt_device, pin);
        k.master.copy_(own);
        if (pin && own.is_cuda() && own.scalar_type() != torch::kFloat) k.host_param = zeros_on(k.own_len, opt_device, pin, cfg.param_dtype);
      }
      k.exp_avg = zeros_on(k.own_len, opt_device, pin);
      k.exp_avg_sq = zeros_on(k.own_len, opt_device, pin);
    }
    // Reduce a bucket's gradients as soon as backward produced them all, in
    // reverse model order within each chunk: its blocks last to first, then
    // the outer bucket and the buckets of their own where the chunk has them.
    const size_t chunks = m->num_chunks();
    chunk_of.assign(buckets.size(), m->part().pre ? 0 : chunks - 1);
    for (size_t v = 0; v < chunks; ++v)
      for (size_t l : m->chunk_blocks(v)) chunk_of[1 + l] = v;
    launch_order.assign(chunks, {});
    next_launch.assign(chunks, 0);
    for (size_t b = static_cast<size_t>(L + 1); b-- > 1;) launch_order[chunk_of[b]].push_back(b);
    launch_order[chunk_of[0]].push_back(0);
    for (size_t b = static_cast<size_t>(L + 1); b < buckets.size(); ++b) launch_order[chunk_of[b]].push_back(b);
    for (auto& order : launch_order) std::erase_if(order, [&](size_t b) { return !buckets[b].hooked || buckets[b].slots.empty(); });
    if (pin && cfg.stage >= 2) {
      int64_t most = 0;
      for (const auto& k : buckets) most = std::max(most, k.own_len);
      landing_buf = pinned_zeros(most, cfg.grad_dtype);
    }
    for (size_t b = 0; b < buckets.size(); ++b)
      for (const auto& s : buckets[b].slots)
        if (s.name == "wte.weight") wte_bucket = b;
    for (size_t b = 0; b < buckets.size(); ++b)
      for (size_t i = 0; buckets[b].hooked && i < buckets[b].slots.size(); ++i) {
        auto acc = torch::autograd::impl::grad_accumulator(buckets[b].slots[i].param);
        acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, b, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
              if (main_grad) add_to_main_grad(buckets[b], buckets[b].slots[i]);
              param_ready(b);
              return outputs;
            }));
        accumulators.push_back(acc);
      }
    if (cfg.stage == 3) {
      auto* self = this;
      anchor = torch::empty({0}, torch::TensorOptions().dtype(torch::kFloat).device(device).requires_grad(true));
      model->block_fn = [self](size_t l, const torch::Tensor& x) { return self->run_sharded_block(l, x); };
      model->embed_fn = [self](const torch::Tensor& idx) { return self->run_sharded_embed(idx); };
      model->head_fn = [self](const torch::Tensor& x) { return self->run_sharded_head(x); };
    }
  }

  ~Impl() {
    if (pending.valid()) pending.wait();
    for (auto& k : buckets) CopyStream::wait(k.d2h_done);  // their buffers go with the engine
    if (landing) CopyStream::wait(landing->done);
    CopyStream::wait(up_done);
    model->block_fn = nullptr;
    model->embed_fn = nullptr;
    model->head_fn = nullptr;
  }

  // A parameter's new 16-bit gradient into its bucket's fp32 buffer, on every
  // micro-batch (the slots of a bucket are disjoint: no lock needed).
  void add_to_main_grad(Bucket& k, Slot& s) {
    torch::NoGradGuard no_grad;
    const torch::Tensor g = s.param.grad();
    if (!g.defined()) return;
    k.flat_grad.narrow(0, s.offset, s.numel).add_(g.reshape({-1}));
    s.param.mutable_grad().reset();
  }

  // ---- hooked buckets, launched in one fixed order on every rank: on every
  // micro-batch at stage 2, on the last one at stages 0 and 1 (the gradients
  // accumulate in the full buffers until then).
  bool reduce_this_micro_batch() const { return cfg.stage >= 2 || (cfg.overlap && micro_done + 1 >= micro_total); }
  void param_ready(size_t b) {
    std::lock_guard<std::mutex> lock(mu);
    if (!reduce_this_micro_batch()) return;
    Bucket& k = buckets[b];
    if (++k.ready < k.slots.size()) return;
    launch_ready(chunk_of[b]);
  }
  void launch_ready(size_t v) {  // holds mu
    const auto& order = launch_order[v];
    for (size_t& next = next_launch[v]; next < order.size(); ++next) {
      Bucket& k = buckets[order[next]];
      if (k.ready < k.slots.size()) return;
      reduce_hooked(k);
    }
  }
  void reduce_hooked(Bucket& k) {
    if (cfg.stage <= 1) {  // in place: all-reduce of the full buffer, or reduce-scatter of it into the shard
      finish_reduces();
      Reducing r{&k, k.flat_grad, torch::Tensor(), nullptr};
      r.op = cfg.stage == 0 ? comm.all_reduce_async(k.flat_grad) : comm.reduce_scatter_async(k.grad_shard, k.flat_grad);
      reducing.push_back(std::move(r));
      k.reduced = true;
      return;
    }
    std::vector<torch::Tensor> grads;
    for (auto& s : k.slots) {
      grads.push_back(s.param.grad());
      s.param.mutable_grad().reset();  // the full gradient is not kept: that is what stage 2 saves
    }
    reduce_into_shard(k, grads);
  }
  // One gradient per slot (undefined: none) into a flat bucket, reduce-scattered
  // and added to this rank's gradient shard.
  void reduce_into_shard(Bucket& k, const std::vector<torch::Tensor>& grads) {
    torch::NoGradGuard no_grad;
    reduce_flat_into_shard(k, flat_grad(k, grads));
  }
  torch::Tensor flat_grad(const Bucket& k, const std::vector<torch::Tensor>& grads) {
    auto full = zeros_on(k.padded, device, false, cfg.grad_dtype);
    for (size_t i = 0; i < k.slots.size(); ++i)
      if (grads[i].defined()) full.narrow(0, k.slots[i].offset, k.slots[i].numel).copy_(grads[i].reshape({-1}));
    return full;
  }
  // The reduce-scatter runs in the background while backward computes the
  // next bucket's gradients (DeepSpeed's overlap_comm); at most one is in
  // flight, and they are added to the shards in launch order, so the sums
  // are those of the blocking version. finish_reduces() completes them all;
  // with land = false a part on its way to a host shard may stay so (the
  // host waits for it only when the next one is ready to go).
  struct Reducing {
    Bucket* k;
    torch::Tensor full, part;
    std::unique_ptr<Comm::Pending> op;
  };
  std::deque<Reducing> reducing;
  void reduce_flat_into_shard(Bucket& k, const torch::Tensor& full) {
    finish_reduces(/*land=*/false);
    Reducing r{&k, full.to(cfg.grad_dtype), torch::empty({k.own_len}, full.options().dtype(cfg.grad_dtype)), nullptr};
    r.op = comm.reduce_scatter_async(r.part, r.full);
    reducing.push_back(std::move(r));
  }
  void finish_reduces(bool land = true) {
    torch::NoGradGuard no_grad;
    for (; !reducing.empty(); reducing.pop_front()) {
      Reducing& r = reducing.front();
      r.op->wait();
      if (!r.part.defined()) {  // reduced in place (stages 0, 1): on its way to the host now
        if (r.k->early_d2h) d2h.copy(r.k->host_grad, r.k->grad_shard, r.k->d2h_done);
        continue;
      }
      if (!cfg.offload_optimizer) {
        r.k->grad_shard.add_(r.part);
        continue;
      }
      // Offload: the part goes to the host on the copy stream and is added to
      // the host shard later, once the previous one is (one staging buffer).
      finish_landing();
      Landing l{r.k, r.part, r.part, std::nullopt};
      if (landing_buf.defined()) {
        l.host = landing_buf.narrow(0, 0, r.part.numel());
        d2h.copy(l.host, r.part, l.done);
      }
      landing = std::move(l);
    }
    if (land) finish_landing();
  }
  void finish_landing() {
    if (!landing) return;
    CopyStream::wait(landing->done);
    landing->k->grad_shard.add_(landing->host);  // both in host memory
    landing.reset();
  }

  // ---- stage 3: a bucket's parameters are gathered around each use. The next
  // bucket's gather is started (prefetched) before this one computes, so
  // communication overlaps computation; at most two buckets are gathered at
  // once. Forward order within a chunk: the embeddings (outer and wte's
  // bucket) on the first chunk of the first stage, its blocks, the head (wte's
  // bucket and outer) on the last chunk of the last stage; backward: the head,
  // the blocks last to first, then the embeddings' backward, which needs no
  // weights. Nothing is prefetched across a chunk's end: with pipeline
  // parallelism the schedule decides what runs next.
  struct InFlight {
    torch::Tensor full, src;
    std::unique_ptr<Comm::Pending> op;
  };
  std::map<size_t, InFlight> inflight;
  // What to prefetch after the forward / before the backward of block bucket b (kNone: nothing).
  size_t next_forward(size_t b) const {
    const size_t v = chunk_of[b];
    if (b - 1 != model->chunk_blocks(v).back()) return b + 1;
    return v + 1 == model->num_chunks() && model->part().post ? wte_bucket : kNone;
  }
  size_t next_backward(size_t b) const { return b - 1 != model->chunk_blocks(chunk_of[b]).front() ? b - 1 : kNone; }
  size_t first_block_bucket() const { return 1 + model->chunk_blocks(0).front(); }  // what the embeddings prefetch
  InFlight start_gather(const Bucket& k) {
    InFlight f;
    f.full = torch::empty({k.padded}, torch::TensorOptions().dtype(cfg.param_dtype).device(device));
    f.src = k.param_shard.device() == device ? k.param_shard : k.param_shard.to(device);
    f.op = comm.all_gather_async(f.full, f.src);
    return f;
  }
  void prefetch(size_t b) {
    if (b >= buckets.size() || !buckets[b].sharded_params || inflight.count(b)) return;
    torch::NoGradGuard no_grad;
    inflight.emplace(b, start_gather(buckets[b]));
  }
  // The bucket's full parameters (the prefetched gather, or a new one).
  torch::Tensor gathered(size_t b) {
    torch::NoGradGuard no_grad;
    auto it = inflight.find(b);
    InFlight f = it != inflight.end() ? std::move(it->second) : start_gather(buckets[b]);
    if (it != inflight.end()) inflight.erase(it);
    f.op->wait();
    return f.full;
  }
  // A block's module parameters become views of its gathered parameters.
  void gather(size_t b) {
    torch::Tensor full = gathered(b);
    for (auto& s : buckets[b].slots) s.param.set_data(full.narrow(0, s.offset, s.numel).view(s.shape));
  }
  // The named parameter of a bucket, as a view of its gathered flat buffer.
  torch::Tensor view_of(const Bucket& k, const torch::Tensor& full, const std::string& name) const {
    for (const auto& s : k.slots)
      if (s.name == name) return full.narrow(0, s.offset, s.numel).view(s.shape);
    throw Error(ErrorKind::Internal, "ZeRO-3: no parameter %s in its bucket", name.c_str());
  }
  // The embeddings' and the head's weights: wte's bucket and the outer one,
  // gathered (one buffer when wte is in the outer bucket). Both gathers are
  // under way before either is waited for.
  std::pair<torch::Tensor, torch::Tensor> gathered_outer() {
    prefetch(0);
    prefetch(wte_bucket);
    torch::Tensor wte = gathered(wte_bucket);
    return {wte, wte_bucket == 0 ? wte : gathered(0)};
  }
  // Their elements (one bucket counted once).
  int64_t outer_padded() const { return buckets[0].padded + (wte_bucket == 0 ? 0 : buckets[wte_bucket].padded); }
  // Zeroed gradient buffers for them (the same buffer twice when wte is in the
  // outer bucket), and their reduce-scatter (wte's bucket first), which
  // consumes outer_grad and wte_grad.
  std::pair<torch::Tensor, torch::Tensor> outer_grads() const {
    auto zeros = [&](const Bucket& k) { return zeros_on(k.padded, device, false, cfg.param_dtype); };
    torch::Tensor outer = zeros(buckets[0]);
    return {wte_bucket == 0 ? outer : zeros(buckets[wte_bucket]), outer};
  }
  void reduce_outer_grads() {
    if (wte_bucket != 0) reduce_flat_into_shard(buckets[wte_bucket], wte_grad);
    reduce_flat_into_shard(buckets[0], outer_grad);
    wte_grad.reset();
    outer_grad.reset();
  }
  void release(Bucket& k) {
    for (auto& s : k.slots) s.param.set_data(torch::empty({0}, s.param.options()));
  }
  torch::Tensor run_sharded_block(size_t l, const torch::Tensor& x);
  torch::Tensor run_sharded_embed(const torch::Tensor& idx);
  torch::Tensor run_sharded_head(const torch::Tensor& x);
};

namespace {

// Forward: gather, run without autograd, release. Backward: gather again,
// recompute with autograd, gradients of the input and of the block's
// parameters, release, reduce-scatter the parameter gradients into the shard.
struct GatheredBlockFn : public torch::autograd::Function<GatheredBlockFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, int64_t impl_ptr, int64_t bucket) {
    auto* impl = reinterpret_cast<ZeroEngine::Impl*>(impl_ptr);
    Bucket& k = impl->buckets[static_cast<size_t>(bucket)];
    ctx->saved_data["impl"] = impl_ptr;
    ctx->saved_data["bucket"] = bucket;
    save_for_recompute(ctx, x, impl->model->tp().rng);
    auto* block = impl->model->blocks[static_cast<size_t>(k.block)]->as<Gpt2BlockImpl>();
    impl->gather(static_cast<size_t>(bucket));
    impl->prefetch(impl->next_forward(static_cast<size_t>(bucket)));  // the next block's forward, or the head's
    torch::Tensor y = block->forward(x);
    impl->release(k);
    return y;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    auto* impl = reinterpret_cast<ZeroEngine::Impl*>(ctx->saved_data["impl"].toInt());
    const auto b = static_cast<size_t>(ctx->saved_data["bucket"].toInt());
    Bucket& k = impl->buckets[b];
    auto* block = impl->model->blocks[static_cast<size_t>(k.block)]->as<Gpt2BlockImpl>();
    impl->gather(b);
    impl->prefetch(impl->next_backward(b));  // the previous block's backward comes next (the embeddings' needs no weights)
    auto [x, y] = recompute(ctx, block);
    std::vector<torch::Tensor> inputs{x};
    for (auto& s : k.slots) inputs.push_back(s.param);
    auto g = torch::autograd::grad({y}, inputs, {grads[0]}, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
    impl->release(k);
    impl->reduce_into_shard(k, std::vector<torch::Tensor>(g.begin() + 1, g.end()));
    return {g[0], torch::Tensor(), torch::Tensor()};
  }
};

// The embeddings: forward gathers the outer bucket and wte's, looks the
// tokens and positions up and drops them again. Backward needs no weights: the
// gradients of a lookup are the output gradients added into the looked-up rows
// (the same operations autograd runs for gpt2_embed). They complete the
// gradients that the head's backward began when this part has the head too
// (one stage), which are then reduce-scattered. `anchor` (a leaf that requires
// grad) makes autograd run this backward.
struct GatheredEmbedFn : public torch::autograd::Function<GatheredEmbedFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor anchor, torch::Tensor idx, int64_t impl_ptr) {
    auto* impl = reinterpret_cast<ZeroEngine::Impl*>(impl_ptr);
    ctx->saved_data["impl"] = impl_ptr;
    ctx->save_for_backward({idx});
    auto [wte, outer] = impl->gathered_outer();
    impl->prefetch(impl->first_block_bucket());  // the first block's forward
    return gpt2_embed(idx, impl->view_of(impl->buckets[impl->wte_bucket], wte, "wte.weight"), impl->view_of(impl->buckets[0], outer, "wpe.weight"),
                      impl->model->tp());
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    auto* impl = reinterpret_cast<ZeroEngine::Impl*>(ctx->saved_data["impl"].toInt());
    torch::NoGradGuard no_grad;
    torch::Tensor idx = ctx->get_saved_variables()[0], g = grads[0];
    if (!impl->outer_grad.defined()) std::tie(impl->wte_grad, impl->outer_grad) = impl->outer_grads();  // no head in this graph
    torch::Tensor wte = impl->view_of(impl->buckets[impl->wte_bucket], impl->wte_grad, "wte.weight");
    torch::Tensor wpe = impl->view_of(impl->buckets[0], impl->outer_grad, "wpe.weight");
    gpt2_embed_backward(g, idx, wte, wpe, impl->model->tp());
    impl->reduce_outer_grads();
    return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The final LayerNorm and the tied output projection. Forward gathers wte's
// bucket and the outer one and, when a backward will follow, runs with autograd
// on views of the gathered buffers and keeps that small graph (and so the
// buffers) until the backward, which comes right after the loss (the last
// stage runs its last chunk's forward and backward of a micro-batch
// back to back); otherwise it drops the buffers at once. Backward starts the
// gradients of both buckets, which the embeddings' backward completes when
// this part has the embeddings too; else they are reduce-scattered here.
struct GatheredHeadFn : public torch::autograd::Function<GatheredHeadFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, int64_t impl_ptr, bool with_backward) {
    auto* impl = reinterpret_cast<ZeroEngine::Impl*>(impl_ptr);
    auto [wte_full, outer] = impl->gathered_outer();
    const Bucket &e = impl->buckets[impl->wte_bucket], &o = impl->buckets[0];
    const TensorParallel& tp = impl->model->tp();
    if (!with_backward)
      return gpt2_head(x, impl->view_of(e, wte_full, "wte.weight"), impl->view_of(o, outer, "ln_f.weight"), impl->view_of(o, outer, "ln_f.bias"), tp);
    torch::AutoGradMode enable(true);
    std::vector<torch::Tensor> leaves{x.detach().requires_grad_(true), impl->view_of(e, wte_full, "wte.weight").detach().requires_grad_(true)};
    for (const char* name : {"ln_f.weight", "ln_f.bias"}) leaves.push_back(impl->view_of(o, outer, name).detach().requires_grad_(true));
    torch::Tensor y = gpt2_head(leaves[0], leaves[1], leaves[2], leaves[3], tp);
    ctx->saved_data["impl"] = impl_ptr;
    ctx->saved_data["y"] = y;
    ctx->saved_data["leaves"] = c10::List<torch::Tensor>(leaves);
    return y.detach();
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    auto* impl = reinterpret_cast<ZeroEngine::Impl*>(ctx->saved_data["impl"].toInt());
    torch::Tensor y = ctx->saved_data["y"].toTensor();
    auto leaves = ctx->saved_data["leaves"].toTensorVector();
    ctx->saved_data.erase("y");
    ctx->saved_data.erase("leaves");
    auto g = torch::autograd::grad({y}, leaves, {grads[0]}, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
    y.reset();
    leaves.clear();  // the gathered buffers go with the graph
    torch::NoGradGuard no_grad;
    std::tie(impl->wte_grad, impl->outer_grad) = impl->outer_grads();
    const Bucket &e = impl->buckets[impl->wte_bucket], &o = impl->buckets[0];
    if (g[1].defined()) impl->view_of(e, impl->wte_grad, "wte.weight").copy_(g[1]);
    if (g[2].defined()) impl->view_of(o, impl->outer_grad, "ln_f.weight").copy_(g[2]);
    if (g[3].defined()) impl->view_of(o, impl->outer_grad, "ln_f.bias").copy_(g[3]);
    if (!impl->model->part().pre) impl->reduce_outer_grads();  // no embeddings' backward to complete them
    return {g[0], torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ZeroEngine::Impl::run_sharded_block(size_t l, const torch::Tensor& x) {
  return GatheredBlockFn::apply(x, reinterpret_cast<int64_t>(this), static_cast<int64_t>(l + 1));
}

torch::Tensor ZeroEngine::Impl::run_sharded_embed(const torch::Tensor& idx) {
  return GatheredEmbedFn::apply(anchor, idx, reinterpret_cast<int64_t>(this));
}

torch::Tensor ZeroEngine::Impl::run_sharded_head(const torch::Tensor& x) {
  const bool with_backward = torch::GradMode::is_enabled() && x.requires_grad();
  return GatheredHeadFn::apply(x, reinterpret_cast<int64_t>(this), with_backward);
}

ZeroEngine::ZeroEngine(Gpt2& model, Comm& comm, const ZeroConfig& cfg, const torch::Device& device)
    : impl_(std::make_unique<Impl>(model, comm, cfg, device)) {}

ZeroEngine::~ZeroEngine() = default;

void ZeroEngine::begin_step(int64_t micro_batches) {
  torch::NoGradGuard no_grad;
  for (auto& k : impl_->buckets) {
    CopyStream::wait(k.d2h_done);  // a copy that no step read (a skipped one) still reads the buffer
    if (k.flat_grad.defined()) k.flat_grad.zero_();
    if (k.grad_shard.defined() && !k.shard_in_flat) k.grad_shard.zero_();
    k.ready = 0;
    k.reduced = false;
  }
  // A stage-3 gather started and never used would hold the parameters of
  // before the last update: none is kept across steps.
  for (auto& [b, f] : impl_->inflight) f.op->wait();
  impl_->inflight.clear();
  std::fill(impl_->next_launch.begin(), impl_->next_launch.end(), 0);
  impl_->grad_mult = 1.0;
  impl_->micro_total = std::max<int64_t>(1, micro_batches);
  impl_->micro_done = 0;
}

void ZeroEngine::after_backward(size_t chunk) {
  auto& I = *impl_;
  std::lock_guard<std::mutex> lock(I.mu);
  if (chunk >= I.launch_order.size()) throw Error(ErrorKind::Internal, "ZeRO: backward of chunk %zu of %zu", chunk, I.launch_order.size());
  const auto& order = I.launch_order[chunk];
  size_t& next = I.next_launch[chunk];
  if (I.reduce_this_micro_batch()) {
    // Buckets whose parameters got no gradient this time: reduce what there is, in order.
    for (; next < order.size(); ++next) I.reduce_hooked(I.buckets[order[next]]);
    I.finish_reduces();
  }
  for (size_t b : order) I.buckets[b].ready = 0;
  next = 0;
  ++I.micro_done;
}

// Sum of squares in double without a double copy of the gradients: fp32 norms
// of 64-element rows (exact to ~1e-7 each), squared and summed in double.
// Every shard and bucket is a multiple of 64 elements long (ZeroConfig::align);
// a parameter's part of one need not be.
// A length that is not a multiple of 64 has its tail summed in double.
// 16-bit gradients are read in fp32 (no fp32 copy of the shard).
static torch::Tensor sum_of_squares(const torch::Tensor& g) {
  const int64_t rows = g.numel() / 64 * 64;
  auto tail = g.narrow(0, rows, g.numel() - rows).to(torch::kDouble).pow(2).sum();
  if (rows == 0) return tail;
  return at::linalg_vector_norm(g.narrow(0, 0, rows).view({-1, 64}), 2, {1}, false, torch::kFloat).to(torch::kDouble).pow(2).sum() + tail;
}

void ZeroEngine::reduce_grads(double grad_mult) {
  torch::NoGradGuard no_grad;
  auto& I = *impl_;
  I.finish_reduces();
  if (I.cfg.stage <= 1)  // launched during the last backward already, unless overlap is off
    for (const auto& order : I.launch_order)
      for (size_t b : order)
        if (!I.buckets[b].reduced) I.reduce_hooked(I.buckets[b]);
  I.finish_reduces();
  if (I.defer_mult) I.grad_mult = grad_mult;  // applied in fp32 by the norm and the step
  else if (grad_mult != 1.0)
    for (auto& k : I.buckets) k.grad_shard.mul_(grad_mult);
}

torch::Tensor ZeroEngine::reduced_grad(const std::string& param) {
  for (auto& k : impl_->buckets)
    for (const auto& s : k.slots)
      if (s.name == param) {
        if (k.slots.size() != 1) throw Error(ErrorKind::Internal, "ZeRO: %s has no bucket of its own", param.c_str());
        return k.grad_shard;
      }
  throw Error(ErrorKind::Internal, "ZeRO: no parameter %s", param.c_str());
}

// A sum over the parts of the counted parameters (ZeroConfig::in_norm) in this
// rank's owned range of `of(bucket)`, over the data-parallel group. The padding
// is left out, or, when f of zeros is zero (zero_padding_neutral) and every
// parameter of a bucket counts, included: one reduction over the whole shard.
double ZeroEngine::Impl::sum_counted(const std::function<torch::Tensor(const Bucket&)>& of,
                                     const std::function<torch::Tensor(const torch::Tensor&)>& f, bool zero_padding_neutral) {
  torch::NoGradGuard no_grad;
  auto sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kDouble).device(device));
  for (const auto& k : buckets) {
    const torch::Tensor t = of(k);
    bool all = zero_padding_neutral;
    for (const auto& s : k.slots) all = all && s.in_norm;
    if (all) {
      sum += f(t).to(torch::kDouble).to(device);
      continue;
    }
    for (const auto& s : k.slots) {  // the part of each counted parameter in the owned range
      const int64_t lo = std::max(s.offset, k.own_begin), hi = std::min(s.offset + s.numel, k.own_begin + k.own_len);
      if (s.in_norm && hi > lo) sum += f(t.narrow(0, lo - k.own_begin, hi - lo)).to(torch::kDouble).to(device);
    }
  }
  if (cfg.stage > 0) comm.all_reduce_sum(sum);  // stage 0: every rank already holds everything
  return sum.item<double>();
}

double ZeroEngine::grad_sum_of_squares() {
  const double m = impl_->grad_mult;
  return impl_->sum_counted([](const Bucket& k) { return k.grad_shard; }, sum_of_squares, /*zero_padding_neutral=*/true) * m * m;
}

double ZeroEngine::grad_num_zeros() {
  return impl_->sum_counted([](const Bucket& k) { return k.grad_shard; }, [](const torch::Tensor& g) { return (g == 0).sum(); }, false);
}

double ZeroEngine::param_sum_of_squares() {
  sync();
  return impl_->sum_counted([](const Bucket& k) { return k.master; }, sum_of_squares, false);
}

// AdamW over one bucket's owned range with `grad` (multiplied by mult, in
// fp32, first), split at decay_end (weights decayed, the rest not) and cut
// before the padding; CPU offload steps it in chunks. With `publish` each
// updated chunk goes to the parameters at once (cast on the host and copied
// up asynchronously while the next chunk is computed); without (a delayed
// update) only into the 16-bit staging buffer, and publish() copies it.
void ZeroEngine::Impl::adamw(Bucket& k, const torch::Tensor& grad, double mult, double lr, const torch::Tensor& steps, bool publish) {
  torch::NoGradGuard no_grad;
  torch::Tensor own = k.sharded_params ? k.param_shard : k.flat_param.narrow(0, k.own_begin, k.own_len);
  const bool scale = grad.scalar_type() != torch::kFloat || mult != 1.0;
  const int64_t lo = k.own_begin, hi = std::min(k.own_begin + k.own_len, k.numel);
  const int64_t pieces[3] = {lo, std::clamp(k.decay_end, lo, std::max(lo, hi)), std::max(lo, hi)};
  for (int p = 0; p < 2; ++p) {
    const double wd = p == 0 ? cfg.weight_decay : 0.0;
    const int64_t chunk = cfg.offload_optimizer ? cfg.offload_chunk : INT64_MAX;
    for (int64_t a = pieces[p], n = 0; a < pieces[p + 1]; a += n) {
      n = std::min(chunk, pieces[p + 1] - a);
      const int64_t off = a - k.own_begin;
      torch::Tensor g = grad.narrow(0, off, n);
      if (scale) g = g.to(torch::kFloat).mul_(mult);  // unscaled and clipped in fp32, one pass per chunk
      at::_fused_adamw_({k.master.narrow(0, off, n)}, {g}, {k.exp_avg.narrow(0, off, n)}, {k.exp_avg_sq.narrow(0, off, n)}, {}, {steps}, lr,
                        cfg.beta1, cfg.beta2, wd, cfg.eps, false, false);
      if (k.master_is_param) continue;
      if (k.host_param.defined()) {  // cast on the host, 16 bits up
        torch::Tensor staged = k.host_param.narrow(0, off, n);
        staged.copy_(k.master.narrow(0, off, n));
        if (publish) own.narrow(0, off, n).copy_(staged, /*non_blocking=*/true);
      } else if (publish) {
        own.narrow(0, off, n).copy_(k.master.narrow(0, off, n), /*non_blocking=*/pin);
      }
    }
  }
}

// The updated parameters of the owned ranges to where they are used (from
// the 16-bit staging buffers or the master weights), then all-gathered.
void ZeroEngine::Impl::publish(bool copy) {
  torch::NoGradGuard no_grad;
  if (copy)
    for (auto& k : buckets) {
      if (k.master_is_param) continue;
      torch::Tensor own = k.sharded_params ? k.param_shard : k.flat_param.narrow(0, k.own_begin, k.own_len);
      own.copy_(k.host_param.defined() ? k.host_param : k.master, /*non_blocking=*/pin);
    }
  if (cfg.stage >= 1 && W > 1)  // one rank owns everything already
    for (auto& k : buckets)
      if (!k.sharded_params && k.padded > 0) comm.all_gather(k.flat_param, k.flat_param.narrow(0, k.own_begin, k.own_len).clone());
}

void ZeroEngine::step(double lr, double clip_coef) {
  torch::NoGradGuard no_grad;
  auto& I = *impl_;
  sync();
  ++step_;
  auto steps = torch::full({}, static_cast<float>(step_), torch::TensorOptions().dtype(torch::kFloat).device(I.opt_device));
  // The gradients' factor: the clipping coefficient, and for 16-bit gradients
  // the loss-scale and averaging factor too (see zero.h).
  const double mult = I.grad_mult * clip_coef;
  CopyStream::wait(I.up_done);  // last step's copies up are done before the master weights change
  if (I.delayed() && step_ > I.cfg.delayed_update_after) {
    // This step's gradients, unscaled and clipped, into fp32 buffers of their
    // own; AdamW runs in the background until the next step() or sync().
    for (auto& k : I.buckets) {
      k.host_grad.copy_(k.grad_shard);
      if (mult != 1.0) k.host_grad.mul_(mult);
    }
    I.pending = std::async(std::launch::async, [&I, lr, steps] {
      for (auto& k : I.buckets) I.adamw(k, k.host_grad, 1.0, lr, steps, /*publish=*/false);
    });
    return;
  }
  // Offload at stages 0, 1: the reduced gradients are on their way to host
  // memory since their reduction (those of a bucket of its own go now); each
  // bucket's AdamW waits for its own copy only, then runs chunk by chunk on
  // the CPU. The gradients are multiplied per chunk (in place when fp32).
  for (auto& k : I.buckets)
    if (k.host_grad.defined() && !k.early_d2h) I.d2h.copy(k.host_grad, k.grad_shard, k.d2h_done);
  for (auto& k : I.buckets) {
    CopyStream::wait(k.d2h_done);
    I.adamw(k, k.host_grad.defined() ? k.host_grad : k.grad_shard, mult, lr, steps, /*publish=*/true);
  }
  // The master weights and staging buffers are not written again before the
  // next step waits for up_done, so the asynchronous copies up may still run.
  if (I.pin) I.d2h.mark(I.up_done);
  I.publish(/*copy=*/false);
}

void ZeroEngine::sync() {
  auto& I = *impl_;
  if (!I.pending.valid()) return;
  I.pending.get();  // an error of the background step is raised here
  I.publish(/*copy=*/true);
  if (I.pin) {  // the next update writes what the copies read
    I.d2h.mark(I.up_done);
    CopyStream::wait(I.up_done);
  }
}

MemoryPlan ZeroEngine::plan() const {
  const auto& I = *impl_;
  MemoryPlan p;
  int64_t max_gathered = 0, max_staging = 0, max_part = 0;
  const auto param_size = static_cast<int64_t>(c10::elementSize(I.cfg.param_dtype));
  const auto grad_size = static_cast<int64_t>(c10::elementSize(I.cfg.grad_dtype));
  for (const auto& k : I.buckets) {
    p.params_device += bytes(k.flat_param);
    (I.cfg.offload_params ? p.params_host : p.params_device) += bytes(k.param_shard);
    p.params_host += bytes(k.host_param);
    if (I.cfg.stage >= 2) max_staging = std::max(max_staging, k.padded * grad_size);
    max_part = std::max(max_part, k.own_len * grad_size);
    const int64_t shard = k.shard_in_flat ? 0 : bytes(k.grad_shard);
    const bool shard_on_host = I.cfg.offload_optimizer && I.cfg.stage >= 2;  // by role: on CPU-only runs both places are the CPU
    p.grads_device += bytes(k.flat_grad) + (shard_on_host ? 0 : shard);
    p.grads_host += bytes(k.host_grad) + (shard_on_host ? shard : 0);
    int64_t optim = bytes(k.exp_avg) + bytes(k.exp_avg_sq) + (k.master_is_param ? 0 : bytes(k.master));
    (I.cfg.offload_optimizer ? p.optim_host : p.optim_device) += optim;
  }
  // Gathered at once (stage 3): a block and the bucket prefetched for what
  // comes next in its chunk (forward or backward); the embeddings' buckets and
  // the first block's; the head's buckets.
  if (I.cfg.stage == 3) {
    auto padded = [&](size_t b) { return b < I.buckets.size() ? I.buckets[b].padded : 0; };
    for (size_t b = 1; b + I.cfg.own_buckets.size() < I.buckets.size(); ++b)
      max_gathered = std::max({max_gathered, padded(b) + padded(I.next_forward(b)), padded(b) + padded(I.next_backward(b))});
    if (I.model->part().pre) max_gathered = std::max(max_gathered, I.outer_padded() + padded(I.first_block_bucket()));
    if (I.model->part().post) max_gathered = std::max(max_gathered, I.outer_padded());
    max_gathered *= param_size;
  }
  p.params_gathered = max_gathered;
  p.params_device += max_gathered;
  // Two buckets of full gradients at a time (one being reduce-scattered, the
  // next being built); at stage 3 the gradients of the embeddings' and the
  // head's buckets are also held from the head's backward to the embeddings'.
  p.grads_staging = 2 * max_staging;
  // With offload at stages 2, 3 a reduced part waits on the device for its
  // copy to the host (in a pinned buffer of that size, with CUDA).
  if (I.cfg.offload_optimizer && I.cfg.stage >= 2) p.grads_staging += max_part;
  p.grads_host += bytes(I.landing_buf);
  if (I.cfg.stage == 3) p.grads_staging += I.outer_padded() * param_size;
  p.grads_device += p.grads_staging;
  return p;
}

int64_t ZeroEngine::optimizer_state_bytes() const {
  int64_t n = 0;
  for (const auto& k : impl_->buckets) n += bytes(k.exp_avg) + bytes(k.exp_avg_sq) + (k.master_is_param ? 0 : bytes(k.master));
  return n;
}

int64_t ZeroEngine::resident_parameter_bytes() const {
  int64_t n = 0;
  for (const auto& k : impl_->buckets) {
    n += bytes(k.flat_param) + bytes(k.param_shard);
    if (k.sharded_params)
      for (const auto& s : k.slots) n += bytes(s.param);  // empty between uses (else views of flat_param)
  }
  return n;
}

int64_t ZeroEngine::optimizer_state_bytes_full(bool padded) const {
  int64_t n = 0;
  for (const auto& k : impl_->buckets) n += (padded ? k.padded : k.numel) * (k.master_is_param ? 8 : 12);
  return n;
}

int64_t ZeroEngine::padded_numel() const {
  int64_t n = 0;
  for (const auto& k : impl_->buckets) n += k.padded;
  return n;
}

int64_t ZeroEngine::unpadded_numel() const {
  int64_t n = 0;
  for (const auto& k : impl_->buckets) n += k.numel;
  return n;
}

ZeroEngine::FullState ZeroEngine::gather_state() {
  sync();
  torch::NoGradGuard no_grad;
  auto& I = *impl_;
  FullState s;
  s.step = step_;
  auto full_of = [&](const Bucket& k, const torch::Tensor& own) {
    if (I.cfg.stage == 0 || k.padded == 0) return own.to(torch::kCPU);
    auto full = torch::empty({k.padded}, torch::TensorOptions().dtype(torch::kFloat).device(I.device));
    I.comm.all_gather(full, own.to(I.device).contiguous());
    return full.to(torch::kCPU);
  };
  for (const auto& k : I.buckets) {
    torch::Tensor p = full_of(k, k.master), m = full_of(k, k.exp_avg), v = full_of(k, k.exp_avg_sq);
    if (I.rank != 0) continue;
    for (const auto& sl : k.slots) {
      s.params[sl.name] = p.narrow(0, sl.offset, sl.numel).view(sl.shape).clone();
      s.exp_avg[sl.name] = m.narrow(0, sl.offset, sl.numel).view(sl.shape).clone();
      s.exp_avg_sq[sl.name] = v.narrow(0, sl.offset, sl.numel).view(sl.shape).clone();
    }
  }
  return s;
}

void ZeroEngine::load_state(const FullState& s) {
  sync();
  torch::NoGradGuard no_grad;
  auto& I = *impl_;
  step_ = s.step;
  auto flat_of = [](const Bucket& k, const std::map<std::string, torch::Tensor>& m, const char* what) {
    auto full = torch::zeros({k.padded}, torch::kFloat);
    for (const auto& sl : k.slots) {
      auto it = m.find(sl.name);
      if (it == m.end()) throw Error(ErrorKind::Format, "checkpoint has no %s for parameter %s", what, sl.name.c_str());
      if (it->second.numel() != sl.numel)
        throw Error(ErrorKind::Format, "checkpoint %s of %s has %ld elements, the model %ld", what, sl.name.c_str(),
                    (long)it->second.numel(), (long)sl.numel);
      full.narrow(0, sl.offset, sl.numel).copy_(it->second.reshape({-1}));
    }
    return full;
  };
  for (auto& k : I.buckets) {
    auto p = flat_of(k, s.params, "weights");
    auto own = [&](const torch::Tensor& full) { return full.narrow(0, k.own_begin, k.own_len); };
    if (k.sharded_params) k.param_shard.copy_(own(p));
    else k.flat_param.copy_(p);
    if (!k.master_is_param) k.master.copy_(own(p));
    k.exp_avg.copy_(own(flat_of(k, s.exp_avg, "exp_avg")));
    k.exp_avg_sq.copy_(own(flat_of(k, s.exp_avg_sq, "exp_avg_sq")));
  }
}

}  // namespace zlm::trainer
