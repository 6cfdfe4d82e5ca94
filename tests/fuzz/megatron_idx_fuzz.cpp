// libFuzzer target for the Megatron .idx validation (formats/megatron_mmap.h).
// Input: 8 bytes of .bin size (little-endian, reduced modulo 2^32) followed by
// the .idx image. The validator must either accept or throw zlm::Error; any
// crash, sanitizer report or other exception is a bug.
#include <cstdint>
#include <cstring>

#include "common/core/error.h"
#include "formats/megatron_mmap.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t bin_size = 0;
  std::memcpy(&bin_size, data, 8);
  bin_size &= 0xffffffffULL;
  try {
    zlm::formats::validate_idx_bytes(data + 8, size - 8, bin_size, "fuzz.idx");
  } catch (const zlm::Error&) {
  }
  return 0;
}
