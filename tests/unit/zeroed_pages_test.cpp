#include "common/core/zeroed_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

namespace zlm {
namespace {

bool all_zero(const ZeroedPages& m) {
  const auto* p = static_cast<const uint8_t*>(m.data());
  for (size_t i = 0; i < m.size(); ++i)
    if (p[i] != 0) return false;
  return true;
}

// Small (plain pages) and large (a huge-page range, aligned to 2 MiB) tables read as zeroes,
// keep what is written to every byte, read as zeroes again after clear(), and move.
TEST(ZeroedPages, ZeroWritableClearedAndMoved) {
  for (size_t bytes : {size_t{1}, size_t{4096}, size_t{100000}, size_t{2} << 20, (size_t{5} << 20) + 12345}) {
    ZeroedPages m(bytes);
    ASSERT_NE(m.data(), nullptr) << bytes;
    EXPECT_EQ(m.size(), bytes);
    EXPECT_TRUE(all_zero(m)) << bytes;
    if (bytes >= (size_t{2} << 20)) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data()) % (size_t{2} << 20), 0u) << bytes;
    }
    auto* p = static_cast<uint8_t*>(m.data());
    for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(i * 7 + 1);
    ZeroedPages moved(std::move(m));
    EXPECT_EQ(m.data(), nullptr);
    EXPECT_EQ(m.size(), 0u);
    ASSERT_EQ(moved.data(), p);
    for (size_t i = 0; i < bytes; i += 997) ASSERT_EQ(p[i], static_cast<uint8_t>(i * 7 + 1)) << bytes << " " << i;
    EXPECT_EQ(p[bytes - 1], static_cast<uint8_t>((bytes - 1) * 7 + 1));
    moved.clear();
    EXPECT_TRUE(all_zero(moved)) << bytes;
    ZeroedPages assigned;
    assigned = std::move(moved);
    EXPECT_EQ(assigned.data(), p);
    EXPECT_EQ(assigned.size(), bytes);
  }
  ZeroedPages none(0);
  EXPECT_EQ(none.data(), nullptr);
  none.clear();
}

}  // namespace
}  // namespace zlm
