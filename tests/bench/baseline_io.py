"""Python baseline for bench_io.sh: json.loads per line (what Megatron's
preprocess_data.py does) and megatron-core's IndexedDatasetBuilder writing the
OpenWebText fixture's sequences 10 times. Checks first (exit 1 on a
difference): one repetition written by the builder equals the fixture's
.bin/.idx; TEXTS_OUT gets json.loads' "text" of every line of FIXTURE_JSONL,
each followed by a NUL byte, for the script to compare with ours.
Prints "extract_MBps write_MBps" (best of RUNS).
  baseline_io.py CORPUS FIXTURE_PREFIX FIXTURE_JSONL TEXTS_OUT [RUNS]"""
import filecmp
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder

corpus, fixture, fixture_jsonl, texts_out = sys.argv[1:5]
runs = int(sys.argv[5]) if len(sys.argv) > 5 else 3
out = os.path.join(tempfile.gettempdir(), "zlm_bench_baseline.%d" % os.getpid())

ds = IndexedDataset(fixture)
docs = [torch.from_numpy(np.array(ds[i]).astype(np.int64)) for i in range(len(ds))]


def write(reps):
    b = IndexedDatasetBuilder(out + ".bin", dtype=np.uint16)
    for _ in range(reps):
        for d in docs:
            b.add_item(d)
            b.end_document()
    b.finalize(out + ".idx")


write(1)
for ext in (".bin", ".idx"):
    if not filecmp.cmp(out + ext, fixture + ext, shallow=False):
        sys.exit(f"baseline_io: the builder's {ext} differs from the fixture's")
with open(texts_out, "wb") as f:
    for line in open(fixture_jsonl, "rb"):
        f.write(json.loads(line)["text"].encode("utf-8") + b"\0")


def best(fn):
    b = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        b = min(b, time.perf_counter() - t)
    return b


def extract():
    with open(corpus, "rb") as f:
        for line in f:
            json.loads(line)["text"]


extract_mbps = os.path.getsize(corpus) / best(extract) / 1e6
write_s = best(lambda: write(10))
write_mbps = os.path.getsize(out + ".bin") / write_s / 1e6
for ext in (".bin", ".idx"):
    os.remove(out + ext)
print(f"{extract_mbps:.1f} {write_mbps:.1f}")
