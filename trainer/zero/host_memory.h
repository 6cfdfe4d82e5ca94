// Host memory for the ZeRO engine's offload and the copies between it and the
// device: exactly-sized pinned buffers, and a copy stream whose copies overlap
// the compute stream's work.
//
//   torch::Tensor h = pinned_zeros(n, torch::kFloat);       // n elements, pinned with CUDA
//   CopyStream d2h(device);
//   d2h.copy(h, device_tensor, done);                        // starts when the compute stream has done what was queued
//   CopyStream::wait(done);                                  // the host waits for that copy only
//
// On a CPU device the same calls are plain copies (the code paths run in the
// CPU tests; the stream and event calls only with CUDA).
#pragma once

#include <torch/torch.h>

#include <c10/core/Event.h>

#include <optional>

namespace zlm::trainer {

// Pinned host memory of exactly n elements (with CUDA; zeros elsewhere):
// LibTorch's caching host allocator rounds every block up to a power of two
// (up to 2x the host memory of an offloaded optimizer). Throws zlm::Error(Io)
// when the memory cannot be pinned.
torch::Tensor pinned_zeros(int64_t n, torch::ScalarType dtype);

// n zeros on `dev` (pinned when `pin` and dev is the CPU).
torch::Tensor zeros_on(int64_t n, const torch::Device& dev, bool pin, torch::ScalarType dtype = torch::kFloat);

// The bytes a tensor holds (0 when undefined).
inline int64_t tensor_bytes(const torch::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

// Copies between the device and pinned host memory on a stream of their own
// (CUDA), so that they overlap the compute stream's work: each starts when the
// compute stream has done what was queued on it so far, and an event marks its
// end. Device memory a copy reads or writes is recorded on the copy stream
// (recordStream), so the caching allocator never reuses it before the copy is
// done, whatever the caller does with its tensors. On the CPU a plain copy
// (nothing to overlap; the same code path runs).
class CopyStream {
 public:
  explicit CopyStream(const torch::Device& d);
  // dst <- src, marked by `done` (untouched on the CPU, where the copy is done on return).
  void copy(torch::Tensor dst, const torch::Tensor& src, std::optional<c10::Event>& done) const;
  // The host waits for the copy (or the work) an event marks, and forgets the event.
  static void wait(std::optional<c10::Event>& e);
  // An event for what the compute stream has queued so far (none on CPU).
  void mark(std::optional<c10::Event>& e) const;
  // The compute stream waits (on the device) for what an event marks; the host does not.
  void join(const std::optional<c10::Event>& e) const;

 private:
  std::optional<c10::Stream> stream_;
};

}  // namespace zlm::trainer
