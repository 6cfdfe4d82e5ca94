#include "common/core/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace zlm {
namespace {

// Published check values: the CRC catalogue's "123456789", and RFC 3720 appendix B.4.
TEST(Crc32c, PublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::vector<unsigned char> b(32, 0);
  EXPECT_EQ(crc32c(b.data(), 32), 0x8A9136AAu);
  b.assign(32, 0xFF);
  EXPECT_EQ(crc32c(b.data(), 32), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c(b.data(), 32), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(crc32c(b.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c("", 0), 0u);
}

// Every path equals the bitwise reference at every length and alignment, and
// a checksum continued over two pieces equals the one over the whole.
TEST(Crc32c, PathsAgreeWithBitwiseReference) {
  std::mt19937 rng(7);
  std::vector<unsigned char> buf(1100);
  for (auto& c : buf) c = static_cast<unsigned char>(rng());
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n : {0, 1, 7, 8, 9, 15, 16, 63, 64, 65, 255, 1024, 1091}) {
      const unsigned char* p = buf.data() + offset;
      const uint32_t want = crc32c_bitwise(p, n);
      EXPECT_EQ(crc32c_table(p, n), want) << "n=" << n << " offset=" << offset;
      if (crc32c_have_sse42()) {
        EXPECT_EQ(crc32c_sse42(p, n), want) << "n=" << n << " offset=" << offset;
      }
      EXPECT_EQ(crc32c(p, n), want);
      const size_t half = n / 3;
      EXPECT_EQ(crc32c(p + half, n - half, crc32c(p, half)), want);
      EXPECT_EQ(crc32c_table(p + half, n - half, crc32c_bitwise(p, half)), want);
    }
  }
}

}  // namespace
}  // namespace zlm
