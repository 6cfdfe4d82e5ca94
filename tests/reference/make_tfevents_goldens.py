#!/usr/bin/env python3
"""Goldens for tests/unit/tfevents_test.cpp, made by the tensorboard package's
own protobuf classes and TFRecord writer (not by zerolm):

  version.tfrecord  the first record of an event file (file_version "brain.Event:2")
  scalar.tfrecord   one scalar event (tag "lm loss", value 2.5, step 7)
  scalars.tfrecord  "lm loss vs samples" = 3.25 at step 1234567890123 and
                    "learning-rate" = 1.5e-4 at step 300 (multi-byte varints)

  .venv/bin/python tests/reference/make_tfevents_goldens.py tests/data/tfevents
"""
import io
import os
import sys

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.record_writer import RecordWriter

WALL = 1700000000.25


def record(event):
    buf = io.BytesIO()
    RecordWriter(buf).write(event.SerializeToString())
    return buf.getvalue()


def scalar(step, tag, value):
    return Event(wall_time=WALL, step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)]))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    files = {
        "version.tfrecord": record(Event(wall_time=WALL, file_version="brain.Event:2")),
        "scalar.tfrecord": record(scalar(7, "lm loss", 2.5)),
        "scalars.tfrecord": record(scalar(1234567890123, "lm loss vs samples", 3.25)) + record(scalar(300, "learning-rate", 1.5e-4)),
    }
    for name, data in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print(name, len(data), "bytes")


if __name__ == "__main__":
    main()
