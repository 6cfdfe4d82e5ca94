#include "common/core/error.h"

#include <cerrno>

#include "test_util.h"

namespace zlm {
namespace {

TEST(Error, CarriesKindAndFormattedMessage) {
  Error e(ErrorKind::Format, "%s: byte %d: bad", "f.idx", 17);
  EXPECT_EQ(e.kind(), ErrorKind::Format);
  EXPECT_STREQ(e.what(), "f.idx: byte 17: bad");
  EXPECT_STREQ(error_kind_name(ErrorKind::Usage), "usage");
}

TEST(Error, ThrowErrnoNamesPathAndHint) {
  errno = ENOENT;
  EXPECT_ZLM_ERROR(throw_errno("cannot open", "/no/such"), ErrorKind::Io, "'/no/such'");
  errno = ENOSPC;
  EXPECT_ZLM_ERROR(throw_errno("cannot write", "x"), ErrorKind::Io, "disk is full");
}

TEST(Error, StrPrintfHandlesLongStrings) {
  std::string big(10000, 'a');
  EXPECT_EQ(strprintf("<%s>", big.c_str()).size(), 10002u);
}

TEST(CheckDeathTest, CheckAbortsWithLocation) {
  EXPECT_DEATH(ZLM_CHECK(1 == 2, "n=%d", 5), "error_test.cpp:.*1 == 2.*n=5");
}

}  // namespace
}  // namespace zlm
