// The fused CPU AdamW (trainer/zero/cpu_adamw.h) against torch's AdamW (ATen's
// fused kernel, what torch.optim.AdamW(fused=True) runs) and against its own
// scalar reference: every gradient and copy type, lengths that are no multiple
// of the vector width, the 16-bit copy equal to torch's rounding of the result,
// and the same bits whatever the split into pieces.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "trainer/zero/cpu_adamw.h"

namespace zlm::trainer {
namespace {

CpuAdamW::Type type_of(torch::ScalarType t) {
  return t == torch::kFloat ? CpuAdamW::kF32 : t == torch::kBFloat16 ? CpuAdamW::kBF16 : CpuAdamW::kF16;
}

struct State {
  torch::Tensor p, m, v, g;
  State clone() const { return {p.clone(), m.clone(), v.clone(), g.clone()}; }
};

State random_state(int64_t n, torch::ScalarType grad_type, int seed) {
  torch::manual_seed(seed);
  return {torch::randn({n}), torch::randn({n}) * 0.01, torch::rand({n}) * 1e-4, (torch::randn({n}) * 0.1).to(grad_type)};
}

const CpuAdamW::Settings kSettings{.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .step = 3, .grad_scale = 0.5f};

// torch's AdamW on the same state: the gradient scaled in fp32 first, as the optimizer does.
State torch_step(State s) {
  auto g = s.g.to(torch::kFloat).mul(kSettings.grad_scale);
  auto steps = torch::full({}, static_cast<float>(kSettings.step));
  at::_fused_adamw_({s.p}, {g}, {s.m}, {s.v}, {}, {steps}, kSettings.lr, kSettings.beta1, kSettings.beta2, kSettings.weight_decay,
                    kSettings.eps, false, false);
  return s;
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const char* what) {
  EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-7)) << what << ": " << (a - b).abs().max().item<double>();
}

TEST(CpuAdamW, EqualsTorchAdamWForEveryGradientAndCopyType) {
  for (auto grad_type : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    for (auto copy_type : {torch::kDouble /* none */, torch::kFloat, torch::kBFloat16, torch::kHalf}) {
      for (int64_t n : {1, 15, 16, 17, 1000, 4099}) {
        SCOPED_TRACE(std::string(c10::toString(grad_type)) + " -> " + c10::toString(copy_type) + ", n " + std::to_string(n));
        const State start = random_state(n, grad_type, static_cast<int>(n));
        State ours = start.clone(), ref = start.clone();
        torch::Tensor copy = copy_type == torch::kDouble ? torch::Tensor() : torch::empty({n}, copy_type);
        torch::Tensor copy_ref = copy.defined() ? torch::empty_like(copy) : torch::Tensor();
        const CpuAdamW::Buffer out{copy.defined() ? copy.data_ptr() : nullptr, copy.defined() ? type_of(copy_type) : CpuAdamW::kNone};
        const CpuAdamW::Buffer out_ref{copy_ref.defined() ? copy_ref.data_ptr() : nullptr, out.type};
        cpu_adamw(kSettings, n, ours.p.data_ptr<float>(), ours.m.data_ptr<float>(), ours.v.data_ptr<float>(),
                  {ours.g.data_ptr(), type_of(grad_type)}, out);
        cpu_adamw_reference(kSettings, n, ref.p.data_ptr<float>(), ref.m.data_ptr<float>(), ref.v.data_ptr<float>(),
                            {ref.g.data_ptr(), type_of(grad_type)}, out_ref);
        const State t = torch_step(start.clone());
        expect_close(ours.p, t.p, "parameters vs torch");
        expect_close(ours.m, t.m, "exp_avg vs torch");
        expect_close(ours.v, t.v, "exp_avg_sq vs torch");
        expect_close(ours.p, ref.p, "parameters vs the scalar reference");
        if (copy.defined()) {  // exactly our fp32 result, or torch's rounding of it
          EXPECT_TRUE(torch::equal(copy, ours.p.to(copy_type))) << "copy";
          EXPECT_TRUE(torch::equal(copy_ref, ref.p.to(copy_type))) << "reference's copy";
        }
      }
    }
  }
}

TEST(CpuAdamW, TheSameBitsWhateverTheSplit) {
  const int64_t n = 10 * CpuAdamW::kAlign + 5;
  const State start = random_state(n, torch::kBFloat16, 7);
  State whole = start.clone(), pieces = start.clone();
  auto copy_whole = torch::empty({n}, torch::kBFloat16), copy_pieces = torch::empty({n}, torch::kBFloat16);
  cpu_adamw(kSettings, n, whole.p.data_ptr<float>(), whole.m.data_ptr<float>(), whole.v.data_ptr<float>(),
            {whole.g.data_ptr(), CpuAdamW::kBF16}, {copy_whole.data_ptr(), CpuAdamW::kBF16});
  for (int64_t a = 0; a < n;) {  // pieces of 1, 3, 1, 3, ... kAlign (the last one shorter)
    const int64_t len = std::min(n - a, (a / CpuAdamW::kAlign % 2 ? 3 : 1) * CpuAdamW::kAlign);
    auto* g = static_cast<uint16_t*>(pieces.g.data_ptr()) + a;
    cpu_adamw(kSettings, len, pieces.p.data_ptr<float>() + a, pieces.m.data_ptr<float>() + a, pieces.v.data_ptr<float>() + a,
              {g, CpuAdamW::kBF16}, {static_cast<uint16_t*>(copy_pieces.data_ptr()) + a, CpuAdamW::kBF16});
    a += len;
  }
  EXPECT_TRUE(torch::equal(whole.p, pieces.p));
  EXPECT_TRUE(torch::equal(whole.m, pieces.m));
  EXPECT_TRUE(torch::equal(whole.v, pieces.v));
  EXPECT_TRUE(torch::equal(copy_whole, copy_pieces));
}

TEST(CpuAdamW, RoundsTheCopyToNearestEvenAndKeepsNaN) {
  // Values at the halfway points of bf16 and fp16 (torch rounds them to even), inf and NaN, with no update (lr 0).
  auto p = torch::tensor({1.00390625f, 1.01171875f, 1.0004883f, 65520.f, std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), -0.0f, 3.0e-8f});
  const int64_t n = p.numel();
  for (auto copy_type : {torch::kBFloat16, torch::kHalf}) {
    auto q = p.clone(), m = torch::zeros({n}), v = torch::zeros({n}), g = torch::zeros({n});
    auto copy = torch::empty({n}, copy_type);
    CpuAdamW::Settings s = kSettings;
    s.lr = 0;
    cpu_adamw(s, n, q.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), {g.data_ptr(), CpuAdamW::kF32},
              {copy.data_ptr(), type_of(copy_type)});
    auto want = p.to(copy_type);
    EXPECT_TRUE(torch::equal(copy.isnan(), want.isnan())) << c10::toString(copy_type);
    EXPECT_TRUE(torch::equal(copy.nan_to_num(0), want.nan_to_num(0))) << c10::toString(copy_type) << " " << copy << want;
  }
}

}  // namespace
}  // namespace zlm::trainer
