#include "common/io/line_reader.h"

#include <cstdlib>

#include "common/core/error.h"
#include "test_util.h"

namespace zlm {
namespace {

std::vector<std::string> read_all(const std::string& path, size_t buffer = 4 << 20) {
  LineReader r(path, buffer);
  std::vector<std::string> out;
  std::string_view line;
  while (r.next(line)) out.emplace_back(line);
  return out;
}

TEST(LineReader, SplitsLinesKeepsLastLineWithoutNewline) {
  test::TempDir dir;
  test::spit(dir.path("a.txt"), "one\ntwo\r\n\nlast");
  EXPECT_EQ(read_all(dir.path("a.txt")), (std::vector<std::string>{"one", "two", "", "last"}));
}

// Python's universal newlines: "\n", "\r\n" and a lone "\r" each end a line
// (a file saved with old Mac line ends is 3 lines, not 1), with every buffer
// boundary, the one between "\r" and "\n" included.
TEST(LineReader, UniversalNewlinesAtEveryBufferBoundary) {
  test::TempDir dir;
  const std::string text = "a\rbb\r\nccc\n\r\rdddd\r";
  test::spit(dir.path("a.txt"), text);
  const std::vector<std::string> want{"a", "bb", "ccc", "", "", "dddd"};
  for (size_t buffer = 1; buffer <= text.size() + 1; ++buffer) EXPECT_EQ(read_all(dir.path("a.txt"), buffer), want) << "buffer " << buffer;
  LineReader r(dir.path("a.txt"), 2);
  std::string_view line;
  while (r.next(line)) {}
  EXPECT_EQ(r.bytes_read(), text.size());  // every terminator byte counted once
}

TEST(LineReader, SkipsAUtf8ByteOrderMarkAtTheStartOnly) {
  test::TempDir dir;
  test::spit(dir.path("bom.txt"), "\xEF\xBB\xBF" "first\n\xEF\xBB\xBF" "second\n");
  LineReader r(dir.path("bom.txt"));
  std::string_view line;
  ASSERT_TRUE(r.next(line));
  EXPECT_EQ(line, "first");
  EXPECT_TRUE(r.had_bom());
  ASSERT_TRUE(r.next(line));
  EXPECT_EQ(line, "\xEF\xBB\xBF" "second");  // inside the text it is a character (U+FEFF), as in Python
  test::spit(dir.path("plain.txt"), "x\n");
  LineReader p(dir.path("plain.txt"));
  ASSERT_TRUE(p.next(line));
  EXPECT_FALSE(p.had_bom());
}

TEST(LineReader, LinesLongerThanTheBuffer) {
  test::TempDir dir;
  std::string big(100000, 'x');
  test::spit(dir.path("a.txt"), "s\n" + big + "\nt\n");
  auto lines = read_all(dir.path("a.txt"), 1024);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], big);
  EXPECT_EQ(lines[2], "t");
}

// Compressed files made by the system tools, detected by magic bytes.
TEST(LineReader, ReadsGzipXzZstdAsTheSystemToolsWriteThem) {
  test::TempDir dir;
  std::string content;
  for (int i = 0; i < 20000; ++i) content += "{\"text\": \"line " + std::to_string(i) + "\"}\n";
  test::spit(dir.path("d.jsonl"), content);
  std::vector<std::string> want = read_all(dir.path("d.jsonl"));
  ASSERT_EQ(want.size(), 20000u);
  struct Case { const char* cmd; const char* ext; Compression c; };
  for (Case c : {Case{"gzip -c", ".gz", Compression::Gzip}, Case{"xz -c", ".xz", Compression::Xz},
                 Case{"zstd -q -c", ".zst", Compression::Zstd}}) {
    std::string out = dir.path("d.jsonl") + c.ext;
    std::string cmd = std::string(c.cmd) + " " + dir.path("d.jsonl") + " > " + out;
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "compressor not installed: " << c.cmd;
    LineReader r(out);
    EXPECT_EQ(r.compression(), c.c);
    EXPECT_EQ(read_all(out), want) << c.ext;
  }
  // Concatenated gzip members read as one stream.
  std::string cat = "gzip -c " + dir.path("d.jsonl") + " > " + dir.path("two.gz") + " && gzip -c " + dir.path("d.jsonl") +
                    " >> " + dir.path("two.gz");
  ASSERT_EQ(std::system(cat.c_str()), 0);
  EXPECT_EQ(read_all(dir.path("two.gz")).size(), 40000u);
}

TEST(LineReader, CorruptCompressedDataNamesFileAndOffset) {
  test::TempDir dir;
  std::string content(200000, 'a');
  test::spit(dir.path("d.txt"), content);
  ASSERT_EQ(std::system(("gzip -c " + dir.path("d.txt") + " > " + dir.path("d.gz")).c_str()), 0);
  std::string gz = test::slurp(dir.path("d.gz"));
  test::spit(dir.path("t.gz"), gz.substr(0, gz.size() / 2));
  EXPECT_ZLM_ERROR(read_all(dir.path("t.gz")), ErrorKind::Format, "t.gz: corrupt compressed data near byte");
}

TEST(LineReader, MissingFileIsIoError) {
  EXPECT_ZLM_ERROR(LineReader r("/no/such.jsonl"), ErrorKind::Io, "/no/such.jsonl");
}

}  // namespace
}  // namespace zlm
