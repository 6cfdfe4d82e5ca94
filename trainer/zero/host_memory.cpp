#include "trainer/zero/host_memory.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <cstring>

#ifdef ZLM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "common/core/error.h"

namespace zlm::trainer {

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

torch::Tensor zeros_on(int64_t n, const torch::Device& dev, bool pin, torch::ScalarType dtype) {
  if (pin && dev.is_cpu()) return pinned_zeros(n, dtype);
  return torch::zeros({n}, torch::TensorOptions().dtype(dtype).device(dev));
}

CopyStream::CopyStream(const torch::Device& d) {
  if (d.is_cuda()) stream_ = c10::impl::VirtualGuardImpl(d.type()).getStreamFromGlobalPool(d);
}

void CopyStream::copy(torch::Tensor dst, const torch::Tensor& src, std::optional<c10::Event>& done) const {
  if (!stream_) {
    dst.copy_(src);
    return;
  }
  std::optional<c10::Event> queued;
  mark(queued);
  queued->block(*stream_);
  c10::StreamGuard on(*stream_);
  dst.copy_(src, /*non_blocking=*/true);
  for (const torch::Tensor* t : {static_cast<const torch::Tensor*>(&dst), &src})
    if (t->device() == stream_->device()) t->record_stream(*stream_);
  done.emplace(stream_->device_type());
  done->record(*stream_);
}

void CopyStream::wait(std::optional<c10::Event>& e) {
  if (!e) return;
  e->synchronize();
  e.reset();
}

void CopyStream::mark(std::optional<c10::Event>& e) const {
  if (!stream_) return;
  e.emplace(stream_->device_type());
  e->record(c10::impl::VirtualGuardImpl(stream_->device_type()).getStream(stream_->device()));
}

void CopyStream::join(const std::optional<c10::Event>& e) const {
  if (!stream_ || !e) return;
  e->block(c10::impl::VirtualGuardImpl(stream_->device_type()).getStream(stream_->device()));
}

}  // namespace zlm::trainer
