#include "formats/tfevents.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/core/error.h"
#include "test_util.h"

namespace zlm::formats {
namespace {

constexpr double kWall = 1700000000.25;  // the goldens' wall time

// Byte for byte what the tensorboard package's own protobuf classes and
// RecordWriter produce (tests/reference/make_tfevents_goldens.py).
TEST(TfEvents, RecordsEqualTensorBoardsOwnBytes) {
  EXPECT_EQ(tfrecord(event_file_version(kWall)), test::slurp(test::data_path("tfevents/version.tfrecord")));
  EXPECT_EQ(tfrecord(event_scalar(kWall, 7, "lm loss", 2.5f)), test::slurp(test::data_path("tfevents/scalar.tfrecord")));
  EXPECT_EQ(tfrecord(event_scalar(kWall, 1234567890123, "lm loss vs samples", 3.25f)) + tfrecord(event_scalar(kWall, 300, "learning-rate", 1.5e-4f)),
            test::slurp(test::data_path("tfevents/scalars.tfrecord")));
}

TEST(TfEvents, DecodeReadsWhatWasEncoded) {
  Event v = decode_event(event_file_version(kWall));
  EXPECT_EQ(v.file_version, "brain.Event:2");
  EXPECT_EQ(v.wall_time, kWall);
  EXPECT_TRUE(v.scalars.empty());
  Event e = decode_event(event_scalar(kWall, 1234567890123, "grad-norm", -0.375f));
  EXPECT_EQ(e.step, 1234567890123);
  ASSERT_EQ(e.scalars.size(), 1u);
  EXPECT_EQ(e.scalars[0].first, "grad-norm");
  EXPECT_EQ(e.scalars[0].second, -0.375f);
  EXPECT_ZLM_ERROR(decode_event(event_scalar(kWall, 1, "x", 1.0f).substr(0, 12)), ErrorKind::Format, "byte");
}

TEST(TfEvents, WriterQueuesFlushesAndNeverReusesAFile) {
  test::TempDir dir;
  std::string first;
  {
    EventFileWriter w(dir.path("tb/run"), 3);
    first = w.path();
    EXPECT_NE(std::filesystem::path(first).filename().string().rfind("events.out.tfevents.", 0), std::string::npos);
    EXPECT_EQ(read_tfrecords(first).payloads.size(), 1u);  // the version record is written at once
    w.add_scalar("a", 1.0f, 1);
    w.add_scalar("a", 2.0f, 2);
    EXPECT_EQ(read_tfrecords(first).payloads.size(), 1u);  // queued
    w.add_scalar("a", 3.0f, 3);
    EXPECT_EQ(read_tfrecords(first).payloads.size(), 4u);  // the queue was full
    w.add_scalar("b", 4.0f, 4);
    w.flush();
    EXPECT_EQ(read_tfrecords(first).payloads.size(), 5u);
    w.add_scalar("b", 5.0f, 5);
  }  // closing flushes
  TfRecordScan scan = read_tfrecords(first);
  EXPECT_TRUE(scan.problem.empty()) << scan.problem;
  ASSERT_EQ(scan.payloads.size(), 6u);
  EXPECT_EQ(decode_event(scan.payloads[0]).file_version, "brain.Event:2");
  Event last = decode_event(scan.payloads[5]);
  EXPECT_EQ(last.step, 5);
  EXPECT_EQ(last.scalars.at(0), std::make_pair(std::string("b"), 5.0f));
  // A second writer in the same directory (same second, same process) gets a new file.
  EventFileWriter again(dir.path("tb/run"), 1);
  EXPECT_NE(again.path(), first);
  EXPECT_EQ(read_tfrecords(first).payloads.size(), 6u);
}

// What a process killed mid-write leaves: the whole records before it are read.
TEST(TfEvents, TruncatedOrDamagedTailStopsReadingThere) {
  test::TempDir dir;
  std::string path;
  {
    EventFileWriter w(dir.path("tb"), 100);
    path = w.path();
    for (int i = 1; i <= 3; ++i) w.add_scalar("lm loss", static_cast<float>(i), i);
  }
  const std::string whole = test::slurp(path);
  const size_t last_start = whole.size() - tfrecord(event_scalar(0, 3, "lm loss", 3.0f)).size();
  for (size_t cut : {1, 4, 12, 20}) {
    test::spit(path, whole.substr(0, whole.size() - cut));
    TfRecordScan scan = read_tfrecords(path);
    EXPECT_EQ(scan.payloads.size(), 3u) << "cut " << cut;
    EXPECT_EQ(scan.valid_bytes, last_start);
    EXPECT_NE(scan.problem.find("byte " + std::to_string(last_start) + ": truncated"), std::string::npos) << scan.problem;
  }
  std::string damaged = whole;
  damaged[last_start + 14] ^= 0x40;
  test::spit(path, damaged);
  TfRecordScan scan = read_tfrecords(path);
  EXPECT_EQ(scan.payloads.size(), 3u);
  EXPECT_NE(scan.problem.find("byte " + std::to_string(last_start) + ": record payload checksum mismatch"), std::string::npos) << scan.problem;
}

TEST(TfEvents, UncreatableDirectoryIsIoError) {
  test::TempDir dir;
  test::spit(dir.path("file"), "x");
  EXPECT_ZLM_ERROR(EventFileWriter(dir.path("file/tb"), 1), ErrorKind::Io, dir.path("file/tb"));
}

}  // namespace
}  // namespace zlm::formats
