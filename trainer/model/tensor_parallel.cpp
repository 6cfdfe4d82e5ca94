#include "trainer/model/tensor_parallel.h"

#include <mutex>

#include "common/core/error.h"
#include "trainer/model/autograd_handle.h"

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

torch::Tensor all_reduced(const torch::Tensor& x, Comm& c) {
  auto y = x.contiguous().clone();
  c.all_reduce_sum(y);
  return y;
}

// (B, t, ...) on each rank -> (B, n * t, ...), rank r's part at [r * t, (r + 1) * t).
torch::Tensor all_gather_seq(const torch::Tensor& x, Comm& c) {
  const int64_t n = c.world();
  auto in = x.contiguous();
  auto full = torch::empty({n * in.numel()}, in.options());
  c.all_gather(full, in.view({-1}));
  std::vector<int64_t> shape{n};
  shape.insert(shape.end(), in.sizes().begin(), in.sizes().end());
  std::vector<int64_t> out = in.sizes().vec();
  out[1] *= n;
  return full.view(shape).transpose(0, 1).reshape(out);
}

// (B, T, ...) -> (B, T / n, ...): rank r gets the sum over ranks of rows [r * T/n, (r + 1) * T/n).
torch::Tensor reduce_scatter_seq(const torch::Tensor& x, Comm& c) {
  const int64_t n = c.world();
  std::vector<int64_t> sizes = x.sizes().vec(), split{sizes[0], n, sizes[1] / n};
  split.insert(split.end(), sizes.begin() + 2, sizes.end());
  auto in = x.reshape(split).transpose(0, 1).contiguous().view({-1});
  auto out = torch::empty({in.numel() / n}, x.options());
  c.reduce_scatter_sum(out, in);
  sizes[1] /= n;
  return out.view(sizes);
}

torch::Tensor own_chunk(const torch::Tensor& x, int64_t n, int64_t rank) {
  const int64_t t = x.size(1) / n;
  return x.narrow(1, rank * t, t).contiguous();
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

}  // namespace

torch::Tensor copy_to_tp(const torch::Tensor& x, const TensorParallel& tp) { return tp.active() ? CopyToTp::apply(x, tp.comm) : x; }
torch::Tensor reduce_from_tp(const torch::Tensor& x, const TensorParallel& tp) { return tp.active() ? ReduceFromTp::apply(x, tp.comm) : x; }
torch::Tensor scatter_to_sp(const torch::Tensor& x, const TensorParallel& tp) { return tp.sp() ? ScatterToSp::apply(x, tp.comm) : x; }
torch::Tensor gather_from_sp(const torch::Tensor& x, const TensorParallel& tp) { return tp.sp() ? GatherFromSp::apply(x, tp.comm) : x; }
torch::Tensor reduce_scatter_to_sp(const torch::Tensor& x, const TensorParallel& tp) {
  return tp.sp() ? ReduceScatterToSp::apply(x, tp.comm) : x;
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, const TensorParallel& tp,
                                           int64_t chunk_rows) {
  if (chunk_rows <= 0) chunk_rows = std::max<int64_t>(1, (int64_t{8} << 20) / std::max<int64_t>(1, logits.size(-1)));
  return VocabParallelCE::apply(logits, targets, tp.active() ? tp.comm : nullptr, tp.active() ? static_cast<int64_t>(tp.rank) : 0, chunk_rows);
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
