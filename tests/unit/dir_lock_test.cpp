#include "common/core/dir_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "common/core/error.h"
#include "test_util.h"

namespace zlm {
namespace {

TEST(DirLock, ASecondClaimIsRefusedNamingTheHolderUntilTheFirstIsReleased) {
  test::TempDir dir;
  const std::string save = dir.path("ckpt");
  {
    DirLock first(save, "--save");
    EXPECT_TRUE(std::filesystem::is_directory(save));
    EXPECT_TRUE(first.stale_note().empty());
    const std::string me = "pid " + std::to_string(::getpid()) + " on host ";
    EXPECT_ZLM_ERROR(DirLock(save, "--save"), ErrorKind::Usage, "is in use by another run (" + me);
  }
  DirLock again(save, "--save");  // released with the first
  EXPECT_TRUE(again.stale_note().empty());
}

TEST(DirLock, AnotherProcessHoldingItIsRefusedAndItsDeathFreesIt) {
  test::TempDir dir;
  const std::string save = dir.path("ckpt");
  int ready[2], go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    DirLock held(save, "--save");
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    (void)!::read(go[0], &c, 1);
    ::_exit(0);  // no destructor: the kernel drops the lock, the file still names this pid
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_ZLM_ERROR(DirLock(save, "--save"), ErrorKind::Usage, "pid " + std::to_string(child) + " on host");
  (void)!::write(go[1], &c, 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  DirLock taken(save, "--save");
  EXPECT_NE(taken.stale_note().find("pid " + std::to_string(child)), std::string::npos) << taken.stale_note();
}

TEST(DirLock, AFileInPlaceOfTheDirectoryIsAUsageErrorNamingTheFlag) {
  test::TempDir dir;
  test::spit(dir.path("afile"), "x");
  EXPECT_ZLM_ERROR(DirLock(dir.path("afile"), "--save"), ErrorKind::Usage, "--save " + dir.path("afile") + ": exists and is not a directory");
}

}  // namespace
}  // namespace zlm
