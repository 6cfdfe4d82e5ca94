#include "common/output_file.h"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "common/error.h"
#include "test_util.h"

namespace zlm {
namespace {

TEST(OutputFile, NothingUnderFinalNameUntilCommit) {
  test::TempDir dir;
  OutputFile out(dir.path("f"), 16);
  out.write("hello world, more than sixteen bytes");
  EXPECT_FALSE(std::filesystem::exists(dir.path("f")));
  EXPECT_TRUE(std::filesystem::exists(out.temp_path()));
  out.commit();
  EXPECT_EQ(test::slurp(dir.path("f")), "hello world, more than sixteen bytes");
  EXPECT_FALSE(std::filesystem::exists(out.temp_path()));
}

TEST(OutputFile, DestructorWithoutCommitKeepsOldFileAndRemovesTemp) {
  test::TempDir dir;
  test::spit(dir.path("f"), "old");
  std::string temp;
  {
    OutputFile out(dir.path("f"));
    out.write("new partial");
    temp = out.temp_path();
  }
  EXPECT_EQ(test::slurp(dir.path("f")), "old");
  EXPECT_FALSE(std::filesystem::exists(temp));
}

TEST(OutputFile, SigtermRemovesTemporaryFiles) {
  test::TempDir dir;
  pid_t pid = fork();
  if (pid == 0) {
    OutputFile out(dir.path("f"));
    out.write("partial");
    kill(getpid(), SIGTERM);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(std::filesystem::is_empty(dir.root()));
}

TEST(OutputFile, UnwritableDirectoryIsIoError) {
  EXPECT_ZLM_ERROR(OutputFile out("/no/such/dir/file"), ErrorKind::Io, "/no/such/dir/file");
}

TEST(ReadFile, MissingFileIsIoError) {
  EXPECT_ZLM_ERROR(read_file("/no/such/file"), ErrorKind::Io, "/no/such/file");
}

}  // namespace
}  // namespace zlm
