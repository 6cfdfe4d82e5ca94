#include "common/io/cli.h"

#include "common/core/error.h"
#include "common/tokenizer/gpt2_files.h"
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

// GPT-2's own files, installed next to the binaries (build/share/zerolm/gpt2 for this test binary).
TEST(Gpt2Files, BundledWhenNoneGivenAndBothOrNeither) {
  const Gpt2Files given = resolve_gpt2_files("v.json", "m.txt");
  EXPECT_EQ(given.vocab_file, "v.json");
  EXPECT_FALSE(given.bundled);
  testing::internal::CaptureStderr();
  const Gpt2Files bundled = resolve_gpt2_files("", "");
  testing::internal::GetCapturedStderr();
  EXPECT_TRUE(bundled.bundled);
  EXPECT_EQ(test::slurp(bundled.vocab_file), test::slurp(test::data_path("gpt2/gpt2-vocab.json")));
  EXPECT_EQ(test::slurp(bundled.merge_file), test::slurp(test::data_path("gpt2/gpt2-merges.txt")));
  EXPECT_ZLM_ERROR(resolve_gpt2_files("v.json", ""), ErrorKind::Usage, "--vocab-file is given without --merge-file");
  EXPECT_ZLM_ERROR(resolve_gpt2_files("", "m.txt"), ErrorKind::Usage, "--merge-file is given without --vocab-file");
  EXPECT_EQ(resolve_gpt2_files("v.json", "", /*need_merges=*/false).vocab_file, "v.json");  // pretrain_gpt reads vocab.json only
}

// argparse's abbreviations (allow_abbrev=True, the default Megatron's data scripts keep).
TEST(Cli, AbbreviationsExpandLikeArgparse) {
  const std::vector<std::string> names = {"--output-prefix", "--vocab", "--vocab-file", "--vocab-size", "--workers"};
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_abbreviations(names, {"--output-pre", "x", "--work=3", "--vocab", "v.json"}),
            (V{"--output-prefix", "x", "--workers=3", "--vocab", "v.json"}));  // an exact name wins over longer ones
  EXPECT_EQ(expand_abbreviations(names, {"--bogus", "--", "--work"}), (V{"--bogus", "--", "--work"}));  // unknown: the parser's; after --: data
  EXPECT_EQ(expand_abbreviations(names, {"-v", "pos"}), (V{"-v", "pos"}));
  EXPECT_ZLM_ERROR(expand_abbreviations(names, {"--voc", "v.json"}), ErrorKind::Usage,
                   "ambiguous option: --voc could match --vocab, --vocab-file, --vocab-size");
  EXPECT_ZLM_ERROR(expand_abbreviations(names, {"--voc=v.json"}), ErrorKind::Usage, "ambiguous option: --voc=v.json could match");
}

TEST(Cli, ToolMainTakesPrefixesOnlyWhenAllowed) {
  auto run = [](bool allow, std::vector<std::string> args, std::string* err) {
    CLI::App app{"test tool"};
    CommonFlags common;
    common.allow_abbrev = allow;
    std::string prefix;
    int workers = 0;
    auto* group = app.add_option_group("output");  // options inside groups are found too
    group->add_option("--output-prefix", prefix, "prefix");
    app.add_option("--workers", workers, "threads");
    add_common_flags(app, common);
    std::vector<char*> argv{const_cast<char*>("tool")};
    for (auto& a : args) argv.push_back(a.data());
    testing::internal::CaptureStderr();
    int rc = tool_main("tool", app, common, static_cast<int>(argv.size()), argv.data(), [&] { return prefix == "p" && workers == 2 ? 0 : 3; });
    *err = testing::internal::GetCapturedStderr();
    return rc;
  };
  std::string err;
  EXPECT_EQ(run(true, {"--output-pre", "p", "--work", "2"}, &err), 0) << err;
  EXPECT_EQ(run(false, {"--output-pre", "p", "--workers", "2"}, &err), 2);
  EXPECT_NE(err.find("--output-pre"), std::string::npos) << err;
  EXPECT_EQ(run(true, {"--output-prefix", "p", "--workers", "2", "--ver"}, &err), 2);
  EXPECT_NE(err.find("ambiguous option: --ver could match --verbose, --version"), std::string::npos) << err;
}

}  // namespace
}  // namespace zlm
