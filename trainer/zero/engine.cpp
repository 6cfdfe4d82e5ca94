#include "trainer/zero/engine.h"

#include "common/core/error.h"
#include "trainer/zero/gather.h"
#include "trainer/zero/reduction.h"

namespace zlm::trainer {

namespace {

// The layout of this rank's part of the model over the data-parallel group.
ZeroLayout layout_for(Gpt2& model, const Comm& comm, const ZeroConfig& cfg) {
  std::vector<ParamInfo> params;
  for (const auto& item : model->named_parameters())
    params.push_back({item.key(), item.value().sizes().vec(), !cfg.in_norm || cfg.in_norm(item.key()),
                      cfg.tp_partial_comm && cfg.tp_partial && cfg.tp_partial(item.key())});
  LayoutSpec spec;
  spec.blocks = static_cast<int64_t>(model->blocks->size());
  spec.own_buckets = cfg.own_buckets;
  spec.world = comm.world();
  spec.rank = comm.rank();
  spec.align = cfg.align;
  spec.shard = cfg.plan.shard_optimizer;
  spec.hooked = !cfg.plan.shard_parameters;
  for (size_t v = 0; v < model->num_chunks(); ++v) spec.chunk_blocks.push_back(model->chunk_blocks(v));
  spec.pre = model->part().pre;
  spec.post = model->part().post;
  return make_zero_layout(params, spec);
}

// Sum of squares in double without a double copy of the gradients: fp32 norms
// of 64-element rows (exact to ~1e-7 each), squared and summed in double.
// Every shard and bucket is a multiple of 64 elements long (ZeroConfig::align);
// a parameter's part of one need not be: a length that is not a multiple of 64
// has its tail summed in double. 16-bit gradients are read in fp32 (no fp32
// copy of the shard).
torch::Tensor sum_of_squares(const torch::Tensor& g) {
  const int64_t rows = g.numel() / 64 * 64;
  auto tail = g.narrow(0, rows, g.numel() - rows).to(torch::kDouble).pow(2).sum();
  if (rows == 0) return tail;
  return at::linalg_vector_norm(g.narrow(0, 0, rows).view({-1, 64}), 2, {1}, false, torch::kFloat).to(torch::kDouble).pow(2).sum() + tail;
}

}  // namespace

ZeroEngine::ZeroEngine(Gpt2& model, Comm& comm, const ZeroConfig& cfg, const torch::Device& device)
    : cfg_(cfg), layout_(layout_for(model, comm, cfg_)) {
  state_ = std::make_unique<ZeroState>(model, cfg_, layout_, device);
  d2h_ = std::make_unique<CopyStream>(device);
  reducer_ = std::make_unique<GradientReducer>(*state_, comm, *d2h_);
  if (cfg_.plan.shard_parameters) gatherer_ = std::make_unique<ParameterGatherer>(model, *state_, comm, *reducer_);
  optimizer_ = std::make_unique<ShardOptimizer>(*state_, comm, *d2h_);
}

// The parts go in reverse order, after every copy that reads the buffers is done.
ZeroEngine::~ZeroEngine() {
  optimizer_.reset();  // a delayed update in flight, the copies up
  gatherer_.reset();
  reducer_.reset();
  for (auto& k : state_->buckets) CopyStream::wait(k.d2h_done);
}

void ZeroEngine::begin_step(int64_t micro_batches) {
  torch::NoGradGuard no_grad;
  for (auto& k : state_->buckets) {
    CopyStream::wait(k.d2h_done);  // a copy that no step read (a skipped one) still reads the buffer
    if (k.flat_grad.defined()) k.flat_grad.zero_();
    if (k.grad_shard.defined() && !k.shard_in_flat) k.grad_shard.zero_();
  }
  if (gatherer_) gatherer_->begin_step();
  reducer_->begin_step(micro_batches);
}

void ZeroEngine::after_backward(size_t chunk) { reducer_->after_backward(chunk); }

void ZeroEngine::reduce_grads(double grad_mult) { reducer_->reduce_grads(grad_mult); }

torch::Tensor ZeroEngine::reduced_grad(const std::string& param) {
  for (auto& k : state_->buckets)
    for (const auto& s : k.slots)
      if (s.name == param) {
        if (k.slots.size() != 1) throw Error(ErrorKind::Internal, "ZeRO: %s has no bucket of its own", param.c_str());
        return k.grad_shard;
      }
  throw Error(ErrorKind::Internal, "ZeRO: no parameter %s", param.c_str());
}

double ZeroEngine::grad_sum_of_squares() {
  const double m = reducer_->grad_mult();
  return optimizer_->sum_counted([](const Bucket& k) { return k.grad_shard; }, sum_of_squares, /*zero_padding_neutral=*/true) * m * m;
}

torch::Tensor ZeroEngine::grad_sum_of_squares_tensor() {
  const double m = reducer_->grad_mult();  // the same double arithmetic as above, on the device
  return optimizer_->sum_counted_tensor([](const Bucket& k) { return k.grad_shard; }, sum_of_squares, true).mul(m).mul(m);
}

double ZeroEngine::grad_num_zeros() {
  return optimizer_->sum_counted([](const Bucket& k) { return k.grad_shard; }, [](const torch::Tensor& g) { return (g == 0).sum(); }, false);
}

double ZeroEngine::param_sum_of_squares() {
  sync();
  return optimizer_->sum_counted([](const Bucket& k) { return k.master; }, sum_of_squares, false);
}

// The gradients' factor: the clipping coefficient, and the loss-scale and
// averaging factor that reduce_grads left to the step (see state.h, defer_mult).
// With parameter offload the optimizer writes the host shards that the gathers copy up.
void ZeroEngine::step(double lr, double clip_coef) {
  if (gatherer_) gatherer_->wait_uploads();
  optimizer_->step(lr, reducer_->grad_mult() * clip_coef);
}

void ZeroEngine::step(double lr, const torch::Tensor& clip_coef, const torch::Tensor& found_inf) {
  if (gatherer_) gatherer_->wait_uploads();
  const auto on = [&](const torch::Tensor& t) { return t.to(state_->opt_device).reshape({}); };
  // grad_mult * clip in double, then fp32: the host path's factor, bit for bit.
  optimizer_->step(lr, StepScale{on(clip_coef.mul(reducer_->grad_mult()).to(torch::kFloat)), on(found_inf.to(torch::kFloat))});
}

void ZeroEngine::confirm_step(bool taken) { optimizer_->confirm(taken); }

void ZeroEngine::sync() {
  if (gatherer_) gatherer_->wait_uploads();
  optimizer_->sync();
}

MemoryPlan ZeroEngine::plan() const {
  const int64_t gathered = cfg_.plan.shard_parameters ? layout_.most_gathered() * static_cast<int64_t>(c10::elementSize(cfg_.param_dtype)) : 0;
  return state_->plan(gathered, reducer_->landing_bytes());
}

int64_t ZeroEngine::optimizer_state_bytes() const { return state_->optimizer_state_bytes(); }
int64_t ZeroEngine::resident_parameter_bytes() const { return state_->resident_parameter_bytes(); }
int64_t ZeroEngine::optimizer_state_bytes_full(bool padded) const { return state_->optimizer_state_bytes_full(padded); }

ZeroEngine::FullState ZeroEngine::gather_state() { return optimizer_->gather_state(); }
std::map<std::string, std::vector<int64_t>> ZeroEngine::param_shapes() const {
  std::map<std::string, std::vector<int64_t>> out;
  for (const BucketLayout& b : layout_.buckets)
    for (const SlotLayout& s : b.slots) out[s.name] = s.shape;
  return out;
}

void ZeroEngine::load_state(const FullState& s) {
  if (gatherer_) gatherer_->wait_uploads();
  optimizer_->load_state(s);
}

}  // namespace zlm::trainer
