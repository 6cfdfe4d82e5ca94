#include "trainer/run/device_memory.h"

#ifdef ZLM_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <cstdlib>

#include "common/core/error.h"

namespace zlm::trainer {

#ifdef ZLM_HAVE_CUDA
namespace {
c10::CachingDeviceAllocator::DeviceStats stats(int device_index) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device_index));
}
constexpr size_t kAll = static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);
}  // namespace

std::string cuda_memory_report(int rank, int64_t iteration, int device_index) {
  auto s = stats(device_index);
  const double mb = 1024.0 * 1024.0;
  return strprintf("[Rank %d] (after %ld iterations) memory (MB) | allocated: %.1f | max allocated: %.1f | reserved: %.1f | max reserved: %.1f",
                   rank, (long)iteration, s.allocated_bytes[kAll].current / mb, s.allocated_bytes[kAll].peak / mb,
                   s.reserved_bytes[kAll].current / mb, s.reserved_bytes[kAll].peak / mb);
}

int64_t cuda_peak_allocated(int device_index) { return stats(device_index).allocated_bytes[kAll].peak; }

CudaMemoryNow cuda_memory_now(int device_index) {
  auto s = stats(device_index);
  return {s.reserved_bytes[kAll].current, s.allocated_bytes[kAll].current, s.allocation[kAll].current};
}
#else
std::string cuda_memory_report(int, int64_t, int) { return ""; }
int64_t cuda_peak_allocated(int) { return 0; }
CudaMemoryNow cuda_memory_now(int) { return {}; }
#endif

bool enable_huge_pages_for_cpu_tensors() {
  if (std::getenv("THP_MEM_ALLOC_ENABLE")) return false;
  return setenv("THP_MEM_ALLOC_ENABLE", "1", /*overwrite=*/0) == 0;
}

}  // namespace zlm::trainer
