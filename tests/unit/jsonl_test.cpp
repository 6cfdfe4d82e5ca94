#include "common/io/jsonl.h"

#include "test_util.h"

namespace zlm {
namespace {

struct Parsed {
  RecordStatus status;
  std::vector<std::string> values;
  std::string detail;
};

Parsed parse(const std::string& line, std::vector<std::string> keys = {"text"}) {
  std::string padded = line + std::string(64, '\0');
  JsonFieldExtractor ex;
  Parsed p;
  p.status = ex.extract(std::string_view(padded.data(), line.size()), padded.size(), keys, p.values, &p.detail);
  return p;
}

TEST(JsonFieldExtractor, ExtractsAndUnescapes) {
  auto p = parse(R"({"url": "u", "text": "a\"b\n\u00e9\ud83d\ude00", "n": [1, {"x": null}]})", {"text", "url"});
  ASSERT_EQ(p.status, RecordStatus::Ok) << p.detail;
  EXPECT_EQ(p.values[0], "a\"b\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(p.values[1], "u");
}

TEST(JsonFieldExtractor, ClassifiesBadRecords) {
  EXPECT_EQ(parse(R"({"text": "abc")").status, RecordStatus::MalformedJson);
  EXPECT_EQ(parse(R"({"text": "abc"} trailing)").status, RecordStatus::MalformedJson);
  EXPECT_EQ(parse(R"({"text": "a", "x": [1, 2})").status, RecordStatus::MalformedJson);
  EXPECT_EQ(parse(R"(["text"])").status, RecordStatus::NotAnObject);
  EXPECT_EQ(parse(R"({"body": "abc"})").status, RecordStatus::MissingKey);
  EXPECT_EQ(parse(R"({"text": 12})").status, RecordStatus::NotAString);
  EXPECT_EQ(parse("{\"text\": \"a\xff\"}").status, RecordStatus::InvalidUtf8);
  EXPECT_EQ(parse(R"({"text": "a\ud800b"})").status, RecordStatus::BadEscape);
  EXPECT_EQ(parse(R"({"text": "a\udc00b"})").status, RecordStatus::BadEscape);
  auto p = parse(R"({"body": "abc"})");
  EXPECT_NE(p.detail.find("missing key 'text'"), std::string::npos) << p.detail;
}

// Python's json.loads keeps the last of repeated keys, and Megatron tokenizes what it gives.
TEST(JsonFieldExtractor, ARepeatedKeyGivesItsLastValueAsPythonDoes) {
  auto p = parse(R"({"text": "first", "url": "u", "text": "second"})", {"text", "url"});
  ASSERT_EQ(p.status, RecordStatus::Ok) << p.detail;
  EXPECT_EQ(p.values[0], "second");
  EXPECT_EQ(p.values[1], "u");
  // The last value decides the record's status too.
  EXPECT_EQ(parse(R"({"text": "ok", "text": 12})").status, RecordStatus::NotAString);
  EXPECT_EQ(parse(R"({"text": 12, "text": "ok"})").status, RecordStatus::Ok);
}

TEST(JsonlBatchReader, BatchesCarryFileAndLineNumbersAcrossFiles) {
  test::TempDir dir;
  test::spit(dir.path("a.jsonl"), "{\"text\": \"1\"}\n{\"text\": \"2\"}\n");
  test::spit(dir.path("b.jsonl"), "{\"text\": \"3\"}\n");
  JsonlBatchReader reader({dir.path("a.jsonl"), dir.path("b.jsonl")}, 16);
  LineBatch batch;
  std::vector<std::string> seen;
  uint64_t expected_first = 0;
  while (reader.next_batch(batch)) {
    EXPECT_EQ(batch.first_record, expected_first);
    expected_first += batch.lines.size();
    for (const auto& ref : batch.lines)
      seen.push_back(reader.file_name(ref.file_index).substr(dir.root().string().size() + 1) + ":" +
                     std::to_string(ref.line_number) + ":" + std::string(batch.line(ref)));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"a.jsonl:1:{\"text\": \"1\"}", "a.jsonl:2:{\"text\": \"2\"}",
                                            "b.jsonl:1:{\"text\": \"3\"}"}));
  EXPECT_EQ(reader.file_bytes_done(), reader.total_file_bytes());
}

}  // namespace
}  // namespace zlm
