// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and final
// XOR 0xFFFFFFFF), the checksum of TFRecord framing (formats/tfevents.h), iSCSI
// and ext4. Debian packages no CRC32C library, so it is here:
//
//   uint32_t c = zlm::crc32c(data, n);            // fastest available path
//   uint32_t c2 = zlm::crc32c(more, m, c);        // continues a running checksum
//
// The SSE4.2 `crc32` instruction (8 bytes per step) where the CPU has it, a
// byte table elsewhere; crc32c_bitwise is the slow obvious reference both are
// tested against (tests/unit/crc32c_test.cpp), as are published check values.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zlm {

uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// The individual paths (for tests): the result equals crc32c's.
uint32_t crc32c_bitwise(const void* data, size_t n, uint32_t crc = 0);
uint32_t crc32c_table(const void* data, size_t n, uint32_t crc = 0);
uint32_t crc32c_sse42(const void* data, size_t n, uint32_t crc = 0);  // requires crc32c_have_sse42()
bool crc32c_have_sse42();

}  // namespace zlm
