#include "trainer/zero/gather.h"

#include "common/core/error.h"
#include "trainer/model/autograd_handle.h"
#include "trainer/zero/host_memory.h"

namespace zlm::trainer {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

ParameterGatherer& gatherer_of(AutogradContext* ctx) { return *from_autograd_handle<ParameterGatherer>(ctx->saved_data["gatherer"]); }

// Forward: gather, run without autograd, release. Backward: gather again,
// recompute with autograd, gradients of the input and of the block's
// parameters, release, reduce-scatter the parameter gradients into the shard.
struct GatheredBlockFn : public torch::autograd::Function<GatheredBlockFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, ParameterGatherer* g, int64_t bucket) {
    const auto b = static_cast<size_t>(bucket);
    ctx->saved_data["gatherer"] = autograd_handle(g);
    ctx->saved_data["bucket"] = bucket;
    save_for_recompute(ctx, x, g->model->tp().rng);
    auto* block = g->model->blocks[static_cast<size_t>(g->state.buckets[b].block)]->as<Gpt2BlockImpl>();
    g->gather(b);
    g->prefetch(g->layout.next_forward(b));  // the next block's forward, or the head's
    torch::Tensor y = block->forward(x);
    g->release(b);
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    ParameterGatherer& g = gatherer_of(ctx);
    const auto b = static_cast<size_t>(ctx->saved_data["bucket"].toInt());
    Bucket& k = g.state.buckets[b];
    auto* block = g.model->blocks[static_cast<size_t>(k.block)]->as<Gpt2BlockImpl>();
    g.gather(b);
    g.prefetch(g.layout.next_backward(b));  // the previous block's backward comes next (the embeddings' needs no weights)
    auto [x, y] = recompute(ctx, block);
    std::vector<torch::Tensor> inputs{x};
    for (auto& p : k.params) inputs.push_back(p);
    auto dg = torch::autograd::grad({y}, inputs, {grads[0]}, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
    g.release(b);
    g.reducer.reduce_into_shard(k, std::vector<torch::Tensor>(dg.begin() + 1, dg.end()));
    return {dg[0], torch::Tensor(), torch::Tensor()};
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
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor anchor, torch::Tensor idx, ParameterGatherer* g) {
    ctx->saved_data["gatherer"] = autograd_handle(g);
    ctx->save_for_backward({idx});
    auto [wte, outer] = g->gathered_outer();
    g->prefetch(g->layout.first_block_bucket());  // the first block's forward
    return gpt2_embed(idx, g->view_of(g->layout.wte_bucket, wte, "wte.weight"), g->view_of(0, outer, "wpe.weight"), g->model->tp());
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    ParameterGatherer& g = gatherer_of(ctx);
    torch::NoGradGuard no_grad;
    torch::Tensor idx = ctx->get_saved_variables()[0];
    if (!g.outer_grads_started()) g.start_outer_grads();  // no head in this graph
    torch::Tensor wte = g.view_of(g.layout.wte_bucket, g.wte_grad(), "wte.weight");
    torch::Tensor wpe = g.view_of(0, g.outer_grad(), "wpe.weight");
    gpt2_embed_backward(grads[0], idx, wte, wpe, g.model->tp());
    g.reduce_outer_grads();
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
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, ParameterGatherer* g, bool with_backward) {
    auto [wte_full, outer] = g->gathered_outer();
    const size_t e = g->layout.wte_bucket;
    const TensorParallel& tp = g->model->tp();
    if (!with_backward)
      return gpt2_head(x, g->view_of(e, wte_full, "wte.weight"), g->view_of(0, outer, "ln_f.weight"), g->view_of(0, outer, "ln_f.bias"), tp);
    torch::AutoGradMode enable(true);
    std::vector<torch::Tensor> leaves{x.detach().requires_grad_(true), g->view_of(e, wte_full, "wte.weight").detach().requires_grad_(true)};
    for (const char* name : {"ln_f.weight", "ln_f.bias"}) leaves.push_back(g->view_of(0, outer, name).detach().requires_grad_(true));
    torch::Tensor y = gpt2_head(leaves[0], leaves[1], leaves[2], leaves[3], tp);
    ctx->saved_data["gatherer"] = autograd_handle(g);
    ctx->saved_data["y"] = y;
    ctx->saved_data["leaves"] = c10::List<torch::Tensor>(leaves);
    return y.detach();
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    ParameterGatherer& g = gatherer_of(ctx);
    torch::Tensor y = ctx->saved_data["y"].toTensor();
    auto leaves = ctx->saved_data["leaves"].toTensorVector();
    ctx->saved_data.erase("y");
    ctx->saved_data.erase("leaves");
    auto dg = torch::autograd::grad({y}, leaves, {grads[0]}, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
    y.reset();
    leaves.clear();  // the gathered buffers go with the graph
    torch::NoGradGuard no_grad;
    g.start_outer_grads();
    if (dg[1].defined()) g.view_of(g.layout.wte_bucket, g.wte_grad(), "wte.weight").copy_(dg[1]);
    if (dg[2].defined()) g.view_of(0, g.outer_grad(), "ln_f.weight").copy_(dg[2]);
    if (dg[3].defined()) g.view_of(0, g.outer_grad(), "ln_f.bias").copy_(dg[3]);
    if (!g.model->part().pre) g.reduce_outer_grads();  // no embeddings' backward to complete them
    return {dg[0], torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

ParameterGatherer::ParameterGatherer(Gpt2& m, ZeroState& s, Comm& comm, GradientReducer& r)
    : model(m), state(s), layout(s.layout), reducer(r), comm_(comm), h2d_(s.device), uploads_(s.buckets.size()) {
  anchor_ = torch::empty({0}, torch::TensorOptions().dtype(torch::kFloat).device(state.device).requires_grad(true));
  model->block_fn = [this](size_t l, const torch::Tensor& x) { return run_block(l, x); };
  model->embed_fn = [this](const torch::Tensor& idx) { return run_embed(idx); };
  model->head_fn = [this](const torch::Tensor& x) { return run_head(x); };
}

ParameterGatherer::~ParameterGatherer() {
  for (auto& [b, f] : inflight_) f.op->wait();
  model->block_fn = nullptr;
  model->embed_fn = nullptr;
  model->head_fn = nullptr;
}

torch::Tensor ParameterGatherer::run_block(size_t l, const torch::Tensor& x) { return GatheredBlockFn::apply(x, this, static_cast<int64_t>(l + 1)); }

torch::Tensor ParameterGatherer::run_embed(const torch::Tensor& idx) { return GatheredEmbedFn::apply(anchor_, idx, this); }

torch::Tensor ParameterGatherer::run_head(const torch::Tensor& x) {
  const bool with_backward = torch::GradMode::is_enabled() && x.requires_grad();
  return GatheredHeadFn::apply(x, this, with_backward);
}

void ParameterGatherer::begin_step() {
  for (auto& [b, f] : inflight_) f.op->wait();
  inflight_.clear();
}

ParameterGatherer::InFlight ParameterGatherer::start_gather(size_t b) {
  const Bucket& k = state.buckets[b];
  InFlight f;
  f.full = torch::empty({k.padded}, torch::TensorOptions().dtype(state.cfg.param_dtype).device(state.device));
  if (k.param_shard.device() == state.device) {
    f.src = k.param_shard;
  } else {  // parameter offload: the pinned shard goes up on the copy stream; the compute stream
            // (so the all-gather) waits for it by event, the host does not
    f.src = torch::empty_like(k.param_shard, k.param_shard.options().device(state.device));
    h2d_.copy(f.src, k.param_shard, uploads_[b]);
    h2d_.join(uploads_[b]);
  }
  f.op = comm_.all_gather_async(f.full, f.src);
  return f;
}

void ParameterGatherer::wait_uploads() {
  for (auto& e : uploads_) CopyStream::wait(e);
}

void ParameterGatherer::prefetch(size_t b) {
  if (b >= state.buckets.size() || !state.buckets[b].sharded_params || inflight_.count(b)) return;
  torch::NoGradGuard no_grad;
  inflight_.emplace(b, start_gather(b));
}

torch::Tensor ParameterGatherer::gathered(size_t b) {
  torch::NoGradGuard no_grad;
  auto it = inflight_.find(b);
  InFlight f = it != inflight_.end() ? std::move(it->second) : start_gather(b);
  if (it != inflight_.end()) inflight_.erase(it);
  f.op->wait();
  return f.full;
}

void ParameterGatherer::gather(size_t b) {
  torch::Tensor full = gathered(b);
  Bucket& k = state.buckets[b];
  for (size_t i = 0; i < k.params.size(); ++i) k.params[i].set_data(k.view(full, i));
}

void ParameterGatherer::release(size_t b) {
  for (auto& p : state.buckets[b].params) p.set_data(torch::empty({0}, p.options()));
}

torch::Tensor ParameterGatherer::view_of(size_t b, const torch::Tensor& flat, const std::string& name) const {
  const Bucket& k = state.buckets[b];
  for (size_t i = 0; i < k.slots.size(); ++i)
    if (k.slots[i].name == name) return k.view(flat, i);
  throw Error(ErrorKind::Internal, "ZeRO-3: no parameter %s in its bucket", name.c_str());
}

std::pair<torch::Tensor, torch::Tensor> ParameterGatherer::gathered_outer() {
  const size_t e = layout.wte_bucket;
  prefetch(0);
  prefetch(e);
  torch::Tensor wte = gathered(e);
  return {wte, e == 0 ? wte : gathered(0)};
}

void ParameterGatherer::start_outer_grads() {
  auto zeros = [&](size_t b) { return zeros_on(state.buckets[b].padded, state.device, false, state.cfg.param_dtype); };
  outer_grad_ = zeros(0);
  wte_grad_ = layout.wte_bucket == 0 ? outer_grad_ : zeros(layout.wte_bucket);
}

void ParameterGatherer::reduce_outer_grads() {
  if (layout.wte_bucket != 0) reducer.reduce_flat_into_shard(state.buckets[layout.wte_bucket], wte_grad_);
  reducer.reduce_flat_into_shard(state.buckets[0], outer_grad_);
  wte_grad_.reset();
  outer_grad_.reset();
}

}  // namespace zlm::trainer
