#include "trainer/model/fused_linear.h"

#include <map>
#include <mutex>

#include "common/core/log.h"
#include "trainer/model/autograd_handle.h"

namespace zlm::trainer {

void MainGrads::claim(const void* owner) {
  targets_.clear();
  owner_ = owner;
}

void MainGrads::release(const void* owner) {
  if (owner_ != owner) return;  // another owner's since
  targets_.clear();
  owner_ = nullptr;
}

void MainGrads::set(const torch::Tensor& param, const torch::Tensor& main) {
  auto t = std::make_unique<Target>();
  t->main = main;
  targets_[param.unsafeGetTensorImpl()] = std::move(t);
}

MainGrads::Target* MainGrads::find(const torch::Tensor& param) const {
  auto it = targets_.find(param.unsafeGetTensorImpl());
  return it == targets_.end() ? nullptr : it->second.get();
}

bool MainGrads::take_added(const torch::Tensor& param) const {
  Target* t = find(param);
  return t && t->added.exchange(false);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// A (1, n) row of ones of g's dtype and device, kept for the next call of the same shape.
torch::Tensor ones_row(const torch::Tensor& g, int64_t n) {
  static std::mutex mu;
  static auto* cache = new std::vector<torch::Tensor>();  // never freed: no destructor at exit after CUDA's
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& t : *cache)
    if (t.size(1) == n && t.device() == g.device() && t.scalar_type() == g.scalar_type()) return t;
  cache->push_back(torch::ones({1, n}, g.options()));
  return cache->back();
}

// Whether ATen takes a 16-bit GEMM with an fp32 output on this device, asked
// once with tiny tensors (a LibTorch without the overload refuses it: the run
// then adds 16-bit gradients, as without the fusion, and says so once). Errors
// of the real calls (out of memory, say) are not caught.
bool fp32_gemm_taken(const torch::Tensor& like) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, bool> known;  // (device index, dtype)
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(static_cast<int>(like.device().index()), static_cast<int>(like.scalar_type()));
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  bool ok = true;
  try {
    auto out = torch::zeros({2, 2}, like.options().dtype(at::kFloat));
    auto a = torch::ones({2, 2}, like.options());
    at::addmm_out(out, out, a.t(), a, at::kFloat);
  } catch (const c10::Error& e) {
    ok = false;
    ZLM_LOG_WRN("gradient-accumulation fusion: this LibTorch refuses a %s GEMM with an fp32 output (%s); 16-bit gradients are added instead",
                c10::toString(like.scalar_type()), e.what_without_backtrace());
  }
  return known[key] = ok;
}

// main (out, in) += g2ᵀ x2 (g2: (N, out), x2: (N, in)).
void add_weight_grad(torch::Tensor& main, const torch::Tensor& g2, const torch::Tensor& x2) {
  if (main.is_cuda() && fp32_gemm_taken(g2)) {
    at::addmm_out(main, main, g2.t(), x2, at::kFloat);
    return;
  }
  main.add_(at::mm(g2.t(), x2));  // what autograd's linear backward computes in the parameters' dtype, then added
}

// main_b (out) += the column sums of g2. On CUDA they are a GEMM too, a row of
// ones times g2, added into the fp32 sums: a 124M step on an H200 ran 2% faster
// than with ATen's column-sum reduction into fp32 (497k against 487k tokens/s).
void add_bias_grad(torch::Tensor& main_b, const torch::Tensor& g2) {
  if (main_b.is_cuda() && fp32_gemm_taken(g2)) {
    auto row = main_b.view({1, -1});
    at::addmm_out(row, row, ones_row(g2, g2.size(0)), g2, at::kFloat);
  } else {
    main_b.add_(g2.sum(0));  // autograd's 16-bit column sums, then added
  }
}

// The backward of both functions below: the input's gradient, and the weight's
// and the bias's (bt: none without a bias) added into their targets.
tensor_list fused_backward(AutogradContext* ctx, const tensor_list& grads, MainGrads::Target* wt, MainGrads::Target* bt) {
  const auto saved = ctx->get_saved_variables();
  const torch::Tensor &x = saved[0], &w = saved[1];
  const torch::Tensor g2 = grads[0].reshape({-1, grads[0].size(-1)});
  torch::Tensor gx;
  if (ctx->needs_input_grad(0)) gx = at::mm(g2, w).view(x.sizes());
  add_weight_grad(wt->main, g2, x.reshape({-1, x.size(-1)}));
  wt->added = true;
  // autograd still gets gradients for w and b, so that their accumulators and
  // the engine's hooks run (on this thread); their values are never read.
  tensor_list out = {gx, at::empty(w.sizes(), w.options())};
  if (bt) {
    add_bias_grad(bt->main, g2);
    bt->added = true;
    out.push_back(at::empty(bt->main.sizes(), g2.options()));
  }
  return out;
}

struct FusedLinearFn : torch::autograd::Function<FusedLinearFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, torch::Tensor b, MainGrads::Target* wt,
                               MainGrads::Target* bt) {
    ctx->saved_data["w"] = autograd_handle(wt);
    ctx->saved_data["b"] = autograd_handle(bt);
    ctx->save_for_backward({x, w});
    return at::linear(x, w, b);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    tensor_list g = fused_backward(ctx, grads, from_autograd_handle<MainGrads::Target>(ctx->saved_data["w"]),
                                   from_autograd_handle<MainGrads::Target>(ctx->saved_data["b"]));
    g.resize(5);  // none for the targets
    return g;
  }
};

// The same without a bias (a custom function's tensor inputs must be defined).
struct FusedLinearNoBiasFn : torch::autograd::Function<FusedLinearNoBiasFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, MainGrads::Target* wt) {
    ctx->saved_data["w"] = autograd_handle(wt);
    ctx->save_for_backward({x, w});
    return at::linear(x, w);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    tensor_list g = fused_backward(ctx, grads, from_autograd_handle<MainGrads::Target>(ctx->saved_data["w"]), nullptr);
    g.resize(3);
    return g;
  }
};

}  // namespace

torch::Tensor fused_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, const MainGrads* main) {
  MainGrads::Target* wt = main && torch::GradMode::is_enabled() ? main->find(w) : nullptr;
  if (!wt) return at::linear(x, w, b);
  MainGrads::Target* bt = b.defined() ? main->find(b) : nullptr;
  if (!b.defined()) return FusedLinearNoBiasFn::apply(x, w, wt);
  if (!bt) return at::linear(x, w, b);  // both fused or neither
  return FusedLinearFn::apply(x, w, b, wt, bt);
}

}  // namespace zlm::trainer
