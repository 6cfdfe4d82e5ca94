#include "trainer/model/tensor_parallel.h"

#include <limits>
#include <mutex>

#include "common/core/error.h"
#include "trainer/model/autograd_handle.h"
#include "trainer/model/cuda_kernels.h"

#ifdef ZLM_HAVE_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "trainer/model/fused_ce.h"
#endif

namespace zlm::trainer {

torch::Tensor swap_rng_state(const torch::Device& device, const torch::Tensor& state) {
  auto gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  torch::Tensor before = gen.get_state();
  if (state.defined()) gen.set_state(state);
  return before;
}

void RngTracker::seed(const torch::Device& device, uint64_t seed, uint64_t tracker_seed) {
  device_ = device;
  auto gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(tracker_seed);
  state_ = gen.get_state();
  gen.set_current_seed(seed);
}

RngTracker::Fork::Fork(RngTracker& tracker) : t(tracker) {
  before = swap_rng_state(t.device_, t.state_);
  t.forked_ = true;
}

RngTracker::Fork::~Fork() {
  t.state_ = swap_rng_state(t.device_, before);
  t.forked_ = false;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

Comm& comm_of(AutogradContext* ctx) { return *from_autograd_handle<Comm>(ctx->saved_data["comm"]); }

// Sums x over the TP ranks in place (Megatron's _reduce): x is a fresh product
// of this rank's GEMM or the gradient of one, which nothing else reads.
torch::Tensor all_reduced(torch::Tensor x, Comm& c) {
  if (!x.is_contiguous()) x = x.contiguous();
  c.all_reduce_sum(x);
  return x;
}

// The sequence-parallel split: a (B, T, ...) tensor's B * T tokens, taken in
// memory order, are cut into TP equal runs and rank r holds run r, viewed as
// (B, T / TP, ...). Everything computed on the split (LayerNorm, dropout, the
// residual adds, biases) is token by token, so any fixed cut is as good as
// Megatron's cut along the sequence of its [s, b, h] layout, and this one makes
// every gather and reduce-scatter a plain concatenation: no transposes.
std::vector<int64_t> split_sizes(const torch::Tensor& x, int64_t n, bool gathered) {
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes[1] = gathered ? sizes[1] * n : sizes[1] / n;
  return sizes;
}

// (B, t, ...) on each rank -> (B, n * t, ...), rank r's run of tokens at [r * B * t, (r + 1) * B * t).
torch::Tensor all_gather_seq(const torch::Tensor& x, Comm& c) {
  const int64_t n = c.world();
  auto in = x.contiguous();
  auto full = torch::empty({n * in.numel()}, in.options());
  c.all_gather(full, in.view({-1}));
  return full.view(split_sizes(in, n, true));
}

// (B, T, ...) -> (B, T / n, ...): rank r gets the sum over ranks of its run of tokens.
torch::Tensor reduce_scatter_seq(const torch::Tensor& x, Comm& c) {
  const int64_t n = c.world();
  auto in = x.contiguous();
  auto out = torch::empty({in.numel() / n}, in.options());
  c.reduce_scatter_sum(out, in.view({-1}));
  return out.view(split_sizes(in, n, false));
}

torch::Tensor own_chunk(const torch::Tensor& x, int64_t n, int64_t rank) {
  auto in = x.contiguous();
  const int64_t run = in.numel() / n;
  return in.view({-1}).narrow(0, rank * run, run).view(split_sizes(in, n, false));
}

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, Comm* comm) {
    ctx->saved_data["comm"] = autograd_handle(comm);
    return x.view_as(x);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) { return {all_reduced(g[0], comm_of(ctx)), torch::Tensor()}; }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, Comm* comm) {
    if (!x.is_contiguous()) return all_reduced(x, *comm);
    ctx->mark_dirty({x});
    return all_reduced(x, *comm);
  }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0], torch::Tensor()}; }
};

struct ScatterToSp : torch::autograd::Function<ScatterToSp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, Comm* comm) {
    ctx->saved_data["comm"] = autograd_handle(comm);
    Comm& c = *comm;
    return own_chunk(x, c.world(), c.rank());
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) { return {all_gather_seq(g[0], comm_of(ctx)), torch::Tensor()}; }
};

struct GatherFromSp : torch::autograd::Function<GatherFromSp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, Comm* comm) {
    ctx->saved_data["comm"] = autograd_handle(comm);
    return all_gather_seq(x, *comm);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) { return {reduce_scatter_seq(g[0], comm_of(ctx)), torch::Tensor()}; }
};

struct ReduceScatterToSp : torch::autograd::Function<ReduceScatterToSp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, Comm* comm) {
    ctx->saved_data["comm"] = autograd_handle(comm);
    return reduce_scatter_seq(x, *comm);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) { return {all_gather_seq(g[0], comm_of(ctx)), torch::Tensor()}; }
};

// f(first row, rows) over [0, n) in chunks of `chunk` rows.
template <typename Fn>
void for_chunks(int64_t n, int64_t chunk, Fn&& f) {
  for (int64_t a = 0; a < n; a += chunk) f(a, std::min(chunk, n - a));
}

// Megatron's vocab-parallel cross-entropy, in chunks of rows (see tensor_parallel.h).
// Saved for backward: the logits (as they are), the targets and each row's
// log-sum-exp in fp32.
struct VocabParallelCE : torch::autograd::Function<VocabParallelCE> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor logits, torch::Tensor target, Comm* c, int64_t rank, int64_t chunk) {
    const int64_t N = logits.size(0), V = logits.size(-1), lo = rank * V;
    auto f32 = logits.options().dtype(torch::kFloat);
    auto out_of_range = (target < lo).logical_or(target >= lo + V);
    auto local = (target - lo).masked_fill(out_of_range, 0);
    auto mx = torch::empty({N}, f32);
    for_chunks(N, chunk, [&](int64_t a, int64_t n) { mx.narrow(0, a, n).copy_(std::get<0>(logits.narrow(0, a, n).max(-1))); });
    if (c) c->all_reduce_max(mx);
    // [target logit - max | sum of exp(logit - max)] per row, one all-reduce.
    auto pred_sum = torch::empty({2, N}, f32);
    pred_sum[0].copy_((logits.gather(-1, local.unsqueeze(-1)).squeeze(-1).to(torch::kFloat) - mx).masked_fill(out_of_range, 0));
    for_chunks(N, chunk, [&](int64_t a, int64_t n) {
      pred_sum[1].narrow(0, a, n).copy_((logits.narrow(0, a, n).to(torch::kFloat) - mx.narrow(0, a, n).unsqueeze(-1)).exp_().sum(-1));
    });
    if (c) c->all_reduce_sum(pred_sum);
    auto log_sum = pred_sum[1].log();
    ctx->save_for_backward({logits, local, out_of_range, mx + log_sum});
    ctx->saved_data["chunk"] = chunk;
    return log_sum - pred_sum[0];
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &local = saved[1], &outside = saved[2], &lse = saved[3];
    const int64_t N = logits.size(0), chunk = ctx->saved_data["chunk"].toInt();
    auto grad = torch::empty_like(logits);
    for_chunks(N, chunk, [&](int64_t a, int64_t n) {
      auto p = (logits.narrow(0, a, n).to(torch::kFloat) - lse.narrow(0, a, n).unsqueeze(-1)).exp_();  // softmax, this rank's columns
      p.scatter_add_(-1, local.narrow(0, a, n).unsqueeze(-1), (outside.narrow(0, a, n).to(torch::kFloat) - 1).unsqueeze(-1));
      grad.narrow(0, a, n).copy_(p.mul_(g[0].narrow(0, a, n).unsqueeze(-1)));
    });
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};


// ---- the fused loss (tensor_parallel.h) ----

// Per row: the maximum, the sum of exp(logit - maximum), and the target logit (0 out of range).
struct RowStats {
  torch::Tensor max, sum, target;
};

// The ATen twin of the kernels: row chunks as the chunked path, and within a
// row chunk a running (max, sum) over column chunks, rescaled as the maximum grows.
RowStats row_stats_twin(const torch::Tensor& logits, const torch::Tensor& local, const torch::Tensor& in_range, int64_t chunk_rows,
                        int64_t chunk_cols) {
  const int64_t N = logits.size(0), V = logits.size(1);
  auto f32 = logits.options().dtype(torch::kFloat);
  RowStats r{torch::full({N}, -std::numeric_limits<float>::infinity(), f32), torch::zeros({N}, f32), torch::Tensor()};
  for_chunks(N, chunk_rows, [&](int64_t a, int64_t n) {
    auto m = r.max.narrow(0, a, n), s = r.sum.narrow(0, a, n);
    for_chunks(V, chunk_cols, [&](int64_t c, int64_t k) {
      auto x = logits.narrow(0, a, n).narrow(1, c, k).to(torch::kFloat);
      auto cm = std::get<0>(x.max(-1));
      auto cs = (x - cm.unsqueeze(-1)).exp_().sum(-1);
      auto nm = torch::maximum(m, cm);
      s.mul_((m - nm).exp_()).add_(cs.mul_((cm - nm).exp_()));
      m.copy_(nm);
    });
  });
  r.target = logits.gather(-1, local.unsqueeze(-1)).squeeze(-1).to(torch::kFloat).masked_fill(in_range.logical_not(), 0);
  return r;
}

void grad_twin(const torch::Tensor& logits, torch::Tensor& grad, const torch::Tensor& local, const torch::Tensor& in_range,
               const torch::Tensor& lse, const torch::Tensor& dloss, int64_t chunk_rows) {
  const auto minus_one = in_range.to(torch::kFloat).neg_().unsqueeze(-1);
  for_chunks(logits.size(0), chunk_rows, [&](int64_t a, int64_t n) {
    auto p = (logits.narrow(0, a, n).to(torch::kFloat) - lse.narrow(0, a, n).unsqueeze(-1)).exp_();
    p.scatter_add_(-1, local.narrow(0, a, n).unsqueeze(-1), minus_one.narrow(0, a, n));
    grad.narrow(0, a, n).copy_(p.mul_(dloss.narrow(0, a, n).unsqueeze(-1)));
  });
}

#ifdef ZLM_HAVE_CUDA_KERNELS
cuda::CeDtype ce_dtype(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat: return cuda::CeDtype::F32;
    case torch::kBFloat16: return cuda::CeDtype::BF16;
    case torch::kHalf: return cuda::CeDtype::F16;
    default: throw Error(ErrorKind::Internal, "the fused loss takes fp32, bf16 or fp16 logits, not %s", c10::toString(t.scalar_type()));
  }
}

void check_kernel(const char* err, const char* what) {
  if (err) throw Error(ErrorKind::Internal, "the fused loss's %s kernel failed: %s", what, err);
}

RowStats row_stats_kernel(const torch::Tensor& logits, const torch::Tensor& local, const torch::Tensor& in_range) {
  const c10::cuda::CUDAGuard guard(logits.device());
  const int64_t N = logits.size(0);
  auto f32 = logits.options().dtype(torch::kFloat);
  RowStats r{torch::empty({N}, f32), torch::empty({N}, f32), torch::empty({N}, f32)};
  check_kernel(cuda::ce_row_stats(logits.data_ptr(), ce_dtype(logits), N, logits.size(1), logits.stride(0), local.data_ptr<int64_t>(),
                                  in_range.data_ptr<bool>(), r.max.data_ptr<float>(), r.sum.data_ptr<float>(), r.target.data_ptr<float>(),
                                  c10::cuda::getCurrentCUDAStream(logits.device().index()).stream()),
               "statistics");
  return r;
}

void grad_kernel(const torch::Tensor& logits, torch::Tensor& grad, const torch::Tensor& local, const torch::Tensor& in_range,
                 const torch::Tensor& lse, const torch::Tensor& dloss) {
  const c10::cuda::CUDAGuard guard(logits.device());
  check_kernel(cuda::ce_grad(logits.data_ptr(), grad.data_ptr(), ce_dtype(logits), logits.size(0), logits.size(1), logits.stride(0),
                             grad.stride(0), local.data_ptr<int64_t>(), in_range.data_ptr<bool>(), lse.data_ptr<float>(),
                             dloss.data_ptr<float>(), c10::cuda::getCurrentCUDAStream(logits.device().index()).stream()),
               "gradient");
}
#endif

struct FusedSettings {
  int64_t chunk_rows = 0, chunk_cols = 0;
  bool kernel = false, in_place = false;
};

RowStats row_stats(const torch::Tensor& logits, const torch::Tensor& local, const torch::Tensor& in_range, const FusedSettings& f) {
#ifdef ZLM_HAVE_CUDA_KERNELS
  if (f.kernel) return row_stats_kernel(logits, local, in_range);
#endif
  return row_stats_twin(logits, local, in_range, f.chunk_rows, f.chunk_cols);
}

// Megatron's vocab-parallel cross-entropy with the fused passes: each rank's
// (max, sum) pairs, rescaled to the all-reduced maximum, are summed with the
// target logits in one all-reduce (two in all, as the chunked path).
struct FusedVocabParallelCE : torch::autograd::Function<FusedVocabParallelCE> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor logits, torch::Tensor target, Comm* c, int64_t rank, FusedSettings f) {
    if (logits.stride(-1) != 1) logits = logits.contiguous();
    const int64_t N = logits.size(0), V = logits.size(-1), lo = rank * V;
    const auto in_range = ((target >= lo).logical_and(target < lo + V)).contiguous();
    const auto local = (target - lo).masked_fill(in_range.logical_not(), 0).contiguous();
    RowStats st = row_stats(logits, local, in_range, f);
    torch::Tensor mx = st.max;
    auto pred_sum = torch::empty({2, N}, st.sum.options());
    if (c) {
      mx = st.max.clone();
      c->all_reduce_max(mx);
      pred_sum[1].copy_(st.sum * (st.max - mx).exp_());
    } else {
      pred_sum[1].copy_(st.sum);
    }
    pred_sum[0].copy_((st.target - mx).masked_fill_(in_range.logical_not(), 0));
    if (c) c->all_reduce_sum(pred_sum);
    auto log_sum = pred_sum[1].log();
    ctx->save_for_backward({logits, local, in_range, mx + log_sum});
    ctx->saved_data["chunk_rows"] = f.chunk_rows;
    ctx->saved_data["kernel"] = f.kernel;
    ctx->saved_data["in_place"] = f.in_place;
    return log_sum - pred_sum[0];
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &local = saved[1], &in_range = saved[2], &lse = saved[3];
    const auto dloss = g[0].to(torch::kFloat).contiguous();
    torch::Tensor grad = ctx->saved_data["in_place"].toBool() ? logits : torch::empty_like(logits);
#ifdef ZLM_HAVE_CUDA_KERNELS
    if (ctx->saved_data["kernel"].toBool()) {
      grad_kernel(logits, grad, local, in_range, lse, dloss);
      return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
#endif
    grad_twin(logits, grad, local, in_range, lse, dloss, ctx->saved_data["chunk_rows"].toInt());
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};
}  // namespace

torch::Tensor copy_to_tp(const torch::Tensor& x, const TensorParallel& tp) { return tp.active() ? CopyToTp::apply(x, tp.comm) : x; }
torch::Tensor reduce_from_tp(const torch::Tensor& x, const TensorParallel& tp) { return tp.active() ? ReduceFromTp::apply(x, tp.comm) : x; }
torch::Tensor scatter_to_sp(const torch::Tensor& x, const TensorParallel& tp) { return tp.sp() ? ScatterToSp::apply(x, tp.comm) : x; }
torch::Tensor gather_from_sp(const torch::Tensor& x, const TensorParallel& tp) { return tp.sp() ? GatherFromSp::apply(x, tp.comm) : x; }
torch::Tensor reduce_scatter_to_sp(const torch::Tensor& x, const TensorParallel& tp) {
  return tp.sp() ? ReduceScatterToSp::apply(x, tp.comm) : x;
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, const TensorParallel& tp,
                                           const CeOptions& o) {
  const int64_t V = std::max<int64_t>(1, logits.size(-1));
  const int64_t rows = o.chunk_rows > 0 ? o.chunk_rows : std::max<int64_t>(1, (int64_t{8} << 20) / V);
  Comm* comm = tp.active() ? tp.comm : nullptr;
  const int64_t rank = tp.active() ? static_cast<int64_t>(tp.rank) : 0;
  const bool kernel = logits.is_cuda() && cuda_kernels_built();
  const CeImpl impl = o.impl != CeImpl::Auto ? o.impl : kernel ? CeImpl::Fused : CeImpl::Chunked;
  if (impl == CeImpl::Chunked) return VocabParallelCE::apply(logits, targets, comm, rank, rows);
  // Writing over the logits needs a tensor of the graph (never a leaf the caller owns).
  const FusedSettings f{rows, o.chunk_cols > 0 ? o.chunk_cols : 4096, kernel, o.logits_dead && !logits.is_leaf()};
  return FusedVocabParallelCE::apply(logits, targets, comm, rank, f);
}

torch::Tensor tp_slice(const torch::Tensor& full, TpSplit split, int size, int rank) {
  if (split.dim < 0 || size == 1) return full;
  std::vector<int64_t> s = full.sizes().vec();
  const auto d = static_cast<size_t>(split.dim);
  const int64_t n = s[d];
  if (n % (split.groups * size) != 0)
    throw Error(ErrorKind::Usage, "a dimension of %ld is not divisible into %d groups over %d tensor-parallel ranks", (long)n, split.groups, size);
  std::vector<int64_t> v(s.begin(), s.begin() + split.dim);
  v.insert(v.end(), {split.groups, size, n / (split.groups * size)});
  v.insert(v.end(), s.begin() + split.dim + 1, s.end());
  s[d] = n / size;
  return full.reshape(v).select(split.dim + 1, rank).reshape(s).clone();
}

torch::Tensor tp_concat(const std::vector<torch::Tensor>& parts, TpSplit split) {
  if (split.dim < 0 || parts.size() == 1) return parts.at(0);
  std::vector<int64_t> s = parts[0].sizes().vec();
  const auto d = static_cast<size_t>(split.dim);
  const int64_t m = s[d];
  std::vector<int64_t> v(s.begin(), s.begin() + split.dim);
  v.insert(v.end(), {split.groups, 1, m / split.groups});
  v.insert(v.end(), s.begin() + split.dim + 1, s.end());
  std::vector<torch::Tensor> r;
  for (const auto& p : parts) r.push_back(p.reshape(v));
  s[d] = m * static_cast<int64_t>(parts.size());
  return torch::cat(r, split.dim + 1).reshape(s);
}

}  // namespace zlm::trainer
