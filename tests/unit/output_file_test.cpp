#include "common/core/files.h"
#include "common/core/output_file.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "common/core/error.h"
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

namespace zlm {
namespace {

TEST(OutputFile, DirectoryAsOutputIsRefusedBeforeWriting) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.path("out.json"));
  EXPECT_ZLM_ERROR(OutputFile out(dir.path("out.json")), ErrorKind::Io, "is a directory");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.root()), {}), 1);  // no temporary
}

// finish() + publish(): nothing under the final name until publish; a failed
// publish removes the temporary.
TEST(OutputFile, FinishThenPublish) {
  test::TempDir dir;
  OutputFile out(dir.path("f"));
  out.write("data");
  out.finish();
  EXPECT_FALSE(std::filesystem::exists(dir.path("f")));
  EXPECT_TRUE(std::filesystem::exists(out.temp_path()));
  out.publish();
  EXPECT_EQ(test::slurp(dir.path("f")), "data");
  std::string temp;
  {
    OutputFile abandoned(dir.path("g"));
    abandoned.write("x");
    abandoned.finish();
    temp = abandoned.temp_path();
  }  // finished but never published: removed
  EXPECT_FALSE(std::filesystem::exists(temp));
  EXPECT_FALSE(std::filesystem::exists(dir.path("g")));
  OutputFile late(dir.path("h"));
  late.write("y");
  late.finish();
  std::filesystem::create_directories(dir.path("h/inside"));  // the final name became a non-empty directory meanwhile
  EXPECT_ZLM_ERROR(late.publish(), ErrorKind::Io, dir.path("h"));
  EXPECT_FALSE(std::filesystem::exists(late.temp_path()));
}

TEST(CheckDistinctPaths, ClashingOutputsAndOutputsOnInputs) {
  test::TempDir dir;
  test::spit(dir.path("in.json"), "x");
  std::filesystem::create_hard_link(dir.path("in.json"), dir.path("link.json"));
  const std::string out = dir.path("out.json");
  EXPECT_NO_THROW(check_distinct_paths({{"<output>", out}, {"--removed-out", dir.path("removed.json")}, {"--stats-out", ""}, {"-o", "-"}},
                                       {{"<input>", dir.path("in.json")}}));
  EXPECT_ZLM_ERROR(check_distinct_paths({{"<output>", out}, {"--removed-out", dir.path("sub/../out.json")}}), ErrorKind::Usage,
                   "<output> and --removed-out both write");
  EXPECT_ZLM_ERROR(check_distinct_paths({{"<output>", out}, {"--stats-out", dir.path("in.json")}}, {{"<input>", dir.path("in.json")}}),
                   ErrorKind::Usage, "--stats-out '" + dir.path("in.json") + "' is also read as <input>");
  EXPECT_ZLM_ERROR(check_distinct_paths({{"<output>", dir.path("link.json")}}, {{"<input>", dir.path("in.json")}}), ErrorKind::Usage,
                   "is also read as <input>");  // the same file under another name
}

}  // namespace
}  // namespace zlm

namespace zlm {
namespace {

// "-" is standard output: no file of that name, no temporary.
TEST(OutputFile, DashIsStandardOutput) {
  test::TempDir dir;
  const std::string captured = dir.path("stdout.txt");
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(captured.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    if (::chdir(dir.root().c_str()) != 0) _exit(3);
    try {
      OutputFile out("-", 4);
      out.write("streamed to stdout");
      out.commit();
    } catch (...) {
      _exit(2);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(test::slurp(captured), "streamed to stdout");
  EXPECT_FALSE(std::filesystem::exists(dir.path("-")));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.root()), {}), 1);
  EXPECT_ZLM_ERROR(check_distinct_paths({{"<output>", "-"}, {"--rejected-out", "-"}}), ErrorKind::Usage, "both write '-'");
  EXPECT_NO_THROW(check_distinct_paths({{"<output>", "-"}}, {{"<input>", "-"}}));
}

}  // namespace
}  // namespace zlm
