#include "common/io/cli.h"

#include "common/core/error.h"
#include "test_util.h"

namespace zlm {
namespace {

int run_cli(std::vector<std::string> args, int* value, std::string* err_out, std::function<int()> body = [] { return 0; }) {
  CLI::App app{"test tool"};
  CommonFlags common;
  app.add_option("--count", *value, "a number");
  add_common_flags(app, common);
  std::vector<char*> argv;
  std::string name = "tool";
  argv.push_back(name.data());
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  int rc = tool_main("tool", app, common, static_cast<int>(argv.size()), argv.data(), body);
  *err_out = testing::internal::GetCapturedStderr() + testing::internal::GetCapturedStdout();
  return rc;
}

TEST(Cli, StrictNumbersUnknownFlagsAndMissingValues) {
  int v = 0;
  std::string err;
  EXPECT_EQ(run_cli({"--count", "12"}, &v, &err), 0);
  EXPECT_EQ(v, 12);
  EXPECT_EQ(run_cli({"--count", "12x"}, &v, &err), 2);
  EXPECT_NE(err.find("12x"), std::string::npos) << err;
  EXPECT_EQ(run_cli({"--bogus"}, &v, &err), 2);
  EXPECT_NE(err.find("--bogus"), std::string::npos) << err;
  EXPECT_EQ(run_cli({"--count"}, &v, &err), 2);
}

TEST(Cli, HelpAndVersionExitZero) {
  int v = 0;
  std::string out;
  EXPECT_EQ(run_cli({"--help"}, &v, &out), 0);
  EXPECT_NE(out.find("--stats-out"), std::string::npos) << out;
  EXPECT_EQ(run_cli({"--version"}, &v, &out), 0);
  EXPECT_NE(out.find("zerolm"), std::string::npos) << out;
}

TEST(Cli, ErrorsMapToExitCodes) {
  int v = 0;
  std::string err;
  EXPECT_EQ(run_cli({}, &v, &err, [] () -> int { throw Error(ErrorKind::Usage, "bad flag combination"); }), 2);
  EXPECT_NE(err.find("error: bad flag combination"), std::string::npos) << err;
  EXPECT_EQ(run_cli({}, &v, &err, [] () -> int { throw Error(ErrorKind::Io, "disk"); }), 1);
  EXPECT_EQ(run_cli({}, &v, &err, [] () -> int { throw std::runtime_error("other"); }), 1);
}

}  // namespace
}  // namespace zlm
