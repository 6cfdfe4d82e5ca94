#include "trainer/model/fused_layer_norm.h"

#include "common/core/error.h"
#include "trainer/model/autograd_handle.h"

#ifdef ZLM_HAVE_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "trainer/model/ln_grad.h"
#endif

namespace zlm::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

#ifdef ZLM_HAVE_CUDA_KERNELS
// An fp32 buffer the kernel can add into: on `dev`, contiguous.
bool kernel_buffer(const torch::Tensor& t, const torch::Device& dev) {
  return t.device() == dev && t.scalar_type() == torch::kFloat && t.is_contiguous();
}

// The kernel's sums into the targets; false where it does not take the inputs
// (another dtype, an odd width, statistics not in fp32).
bool add_param_grads_kernel(const torch::Tensor& g, const torch::Tensor& x, const torch::Tensor& mean, const torch::Tensor& rstd,
                            MainGrads::Target* wt, MainGrads::Target* bt) {
  const auto dt = x.scalar_type();
  const bool half = dt == torch::kBFloat16 || dt == torch::kHalf;
  if (!x.is_cuda() || !half || g.scalar_type() != dt || !x.is_contiguous() || !g.is_contiguous() || mean.scalar_type() != torch::kFloat ||
      rstd.scalar_type() != torch::kFloat || !kernel_buffer(wt->main, x.device()) || !kernel_buffer(bt->main, x.device()))
    return false;
  const int64_t cols = x.size(-1), rows = x.numel() / std::max<int64_t>(1, cols);
  if (!cuda::ln_param_grad_supported(g.data_ptr(), x.data_ptr(), cols) || mean.numel() != rows || !mean.is_contiguous() ||
      !rstd.is_contiguous())
    return false;
  const c10::cuda::CUDAGuard guard(x.device());
  auto work = torch::empty({cuda::ln_param_grad_workspace(rows, cols)}, x.options().dtype(torch::kFloat));
  const char* err = cuda::ln_param_grad_add(g.data_ptr(), x.data_ptr(), dt == torch::kBFloat16 ? cuda::LnDtype::BF16 : cuda::LnDtype::F16,
                                            rows, cols, mean.data_ptr<float>(), rstd.data_ptr<float>(),
                                            wt->main.data_ptr<float>(), bt->main.data_ptr<float>(), work.data_ptr<float>(),
                                            c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  if (err) throw Error(ErrorKind::Internal, "the layer norm's gradient kernel failed: %s", err);
  return true;
}
#endif

struct FusedLayerNormFn : torch::autograd::Function<FusedLayerNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps, MainGrads::Target* wt,
                               MainGrads::Target* bt) {
    auto [out, mean, rstd] = at::native_layer_norm(x, {x.size(-1)}, w, b, eps);
    ctx->saved_data["w"] = autograd_handle(wt);
    ctx->saved_data["b"] = autograd_handle(bt);
    ctx->save_for_backward({x, w, b, mean, rstd});
    return out;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    const torch::Tensor &x = s[0], &w = s[1], &b = s[2], &mean = s[3], &rstd = s[4];
    auto* wt = from_autograd_handle<MainGrads::Target>(ctx->saved_data["w"]);
    auto* bt = from_autograd_handle<MainGrads::Target>(ctx->saved_data["b"]);
    const bool gx_needed = ctx->needs_input_grad(0);
    const torch::Tensor g = grads[0].contiguous();
    torch::Tensor gx;
    bool summed = false;
#ifdef ZLM_HAVE_CUDA_KERNELS
    summed = add_param_grads_kernel(g, x, mean, rstd, wt, bt);
    if (summed && gx_needed) gx = std::get<0>(at::native_layer_norm_backward(g, x, {x.size(-1)}, mean, rstd, w, b, {true, false, false}));
#endif
    if (!summed) {  // autograd's own backward (its 16-bit gradients), then added
      auto [gx_, gw, gb] = at::native_layer_norm_backward(g, x, {x.size(-1)}, mean, rstd, w, b, {gx_needed, true, true});
      gx = gx_;
      wt->main.add_(gw);
      bt->main.add_(gb);
    }
    wt->added = true;
    bt->added = true;
    // Placeholders for autograd's accumulators (the engine's hooks run on them; never read).
    return {gx, at::empty(w.sizes(), w.options()), at::empty(b.sizes(), b.options()), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fused_layer_norm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, double eps, const MainGrads* main) {
  MainGrads::Target* wt = main && w.defined() && b.defined() && torch::GradMode::is_enabled() ? main->find(w) : nullptr;
  MainGrads::Target* bt = wt ? main->find(b) : nullptr;
  if (!wt || !bt) return at::layer_norm(x, {x.size(-1)}, w, b, eps);
  return FusedLayerNormFn::apply(x, w, b, eps, wt, bt);
}

}  // namespace zlm::trainer
