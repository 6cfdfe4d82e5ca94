// Megatron's gradient-accumulation fusion (--no-gradient-accumulation-fusion
// turns it off): when 16-bit parameters accumulate their gradients in fp32
// buffers (Megatron's main_grad; ZeRO stages 0 and 1 in mixed precision), a
// linear layer's backward adds its weight and bias gradients straight into
// those buffers instead of handing autograd 16-bit gradients that a hook then
// adds. On CUDA the weight gradient is one GEMM with 16-bit inputs and an fp32
// output that is also its addend (beta = 1: no 16-bit gradient is written or
// read, and the sum keeps fp32's bits), and the bias gradient one with a row of
// ones (the column sums); elsewhere the backward computes what
// autograd's linear backward would, in the parameters' dtype, and adds it, so
// CPU runs take the same path with the same numbers as without the fusion.
//
// The ZeRO engine registers every parameter's fp32 buffer (MainGrads::set) and
// its gradient hook asks take_added() whether the backward already added it:
// autograd still gets gradients for the weight and bias (uninitialised, never read),
// so its accumulator and the hook run as before, on the thread they ran on.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <memory>
#include <unordered_map>

namespace zlm::trainer {

class MainGrads {
 public:
  struct Target {
    torch::Tensor main;               // fp32, the parameter's shape
    std::atomic<bool> added{false};   // set by the fused backward, cleared by take_added
  };
  // The registry belongs to one owner (a ZeRO engine's state) at a time:
  // claim() empties it for a new owner, release() empties it only if that
  // owner still holds it (a second engine on the same model may have claimed it).
  void claim(const void* owner);
  void release(const void* owner);
  void set(const torch::Tensor& param, const torch::Tensor& main);
  Target* find(const torch::Tensor& param) const;  // nullptr: not registered
  // True once after the fused backward added the parameter's gradient.
  bool take_added(const torch::Tensor& param) const;
  void clear() { targets_.clear(); }
  bool empty() const { return targets_.empty(); }

 private:
  std::unordered_map<const c10::TensorImpl*, std::unique_ptr<Target>> targets_;
  const void* owner_ = nullptr;
};

// at::linear(x, w, b) (b may be undefined), whose backward adds w's and b's
// gradients into their MainGrads targets when `main` holds one for w (and grad
// mode is on); plain at::linear otherwise.
torch::Tensor fused_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, const MainGrads* main);

}  // namespace zlm::trainer
