// TensorBoard event files, as TensorFlow's and PyTorch's summary writers write
// them, so that `tensorboard --logdir` and its EventAccumulator read ours.
//
// File: <dir>/events.out.tfevents.<unix seconds, 10 digits>.<host>.<pid>.<n>,
// a sequence of TFRecord records:
//   u64 LE payload length | u32 LE masked CRC-32C of those 8 bytes |
//   payload | u32 LE masked CRC-32C of the payload
//   masked(c) = ((c >> 15) | (c << 17)) + 0xA282EAD8   (32-bit arithmetic)
// Each payload is one `Event` protobuf message (TensorFlow's event.proto and
// summary.proto; only these fields are used):
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record is the event with file_version "brain.Event:2"; every
// scalar is an event with one value. The messages are encoded here by hand
// (varints, 64- and 32-bit little-endian fields, length-delimited fields)
// instead of with libprotobuf: five fields of three messages do not justify
// a protoc code-generation step in the build (README, "TensorBoard").
//
// An event file is a live log that TensorBoard reads while it grows, so it is
// appended to under its final name (not written to a temporary name and
// renamed, unlike zerolm's other outputs). The writer only ever writes whole
// records, one write(2) per flush: a process killed mid-write leaves at most a
// truncated last record, which TensorBoard (and read_tfrecords) skip.
//
//   zlm::formats::EventFileWriter w("runs/tb", 1000);   // creates the directory and a new file
//   w.add_scalar("lm loss", 2.5f, 10);                  // queued
//   w.flush();                                          // on disk (also at 1000 queued, and on close)
//   auto scan = zlm::formats::read_tfrecords(w.path()); // the records, and where reading stopped
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zlm::formats {

uint32_t tfrecord_masked_crc(const void* data, size_t n);
// One framed record around `payload`.
std::string tfrecord(std::string_view payload);

// Event payloads.
std::string event_file_version(double wall_time);
std::string event_scalar(double wall_time, int64_t step, std::string_view tag, float value);

// A decoded event (the fields above; others are skipped). Throws
// zlm::Error(Format) naming the byte offset inside the payload when it is not a
// well-formed message.
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;  // (tag, simple_value)
};
Event decode_event(std::string_view payload);

// The records of a file, in order, up to the first incomplete or damaged one.
struct TfRecordScan {
  std::vector<std::string> payloads;
  uint64_t valid_bytes = 0;  // bytes of whole, checksum-correct records
  std::string problem;       // empty when the whole file was read; else what stopped reading, with its byte offset
};
TfRecordScan read_tfrecords(const std::string& path);

class EventFileWriter {
 public:
  // Creates `dir` (and parents) and a new event file in it; never reuses or
  // truncates an existing file. queue_size: scalars held before they are
  // written (TensorBoard's max_queue; at least 1). Throws zlm::Error(Io).
  EventFileWriter(const std::string& dir, size_t queue_size);
  ~EventFileWriter();  // flushes and closes; never throws
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Wall time: now. Throws zlm::Error(Io) (disk full) when the queue is written.
  void add_scalar(std::string_view tag, float value, int64_t step);
  void add_scalar(std::string_view tag, float value, int64_t step, double wall_time);
  void flush();
  void close();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::string pending_;
  size_t queued_ = 0, queue_size_;
};

}  // namespace zlm::formats
