// Megatron's memory report for a CUDA device:
//   "[Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... | reserved: ... | max reserved: ..."
// from LibTorch's caching allocator. Empty on builds without CUDA.
#pragma once

#include <cstdint>
#include <string>

namespace zlm::trainer {

std::string cuda_memory_report(int rank, int64_t iteration, int device_index);
// Peak bytes allocated on the device so far (0 without CUDA).
int64_t cuda_peak_allocated(int device_index);

}  // namespace zlm::trainer
