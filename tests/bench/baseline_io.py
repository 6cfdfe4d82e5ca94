"""Python baseline for bench_io.sh: json.loads per line (what Megatron's
preprocess_data.py does) and megatron-core's IndexedDatasetBuilder writing the
OpenWebText fixture's sequences 10 times. Prints "extract_MBps write_MBps"."""
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder

corpus, fixture = sys.argv[1], sys.argv[2]
size = os.path.getsize(corpus)
best = float("inf")
for _ in range(2):
    t = time.perf_counter()
    with open(corpus, "rb") as f:
        for line in f:
            json.loads(line)["text"]
    best = min(best, time.perf_counter() - t)
extract = size / best / 1e6

ds = IndexedDataset(fixture)
docs = [torch.from_numpy(np.array(ds[i]).astype(np.int64)) for i in range(len(ds))]
out = os.path.join(tempfile.gettempdir(), "zlm_bench_baseline")
best = float("inf")
for _ in range(3):
    t = time.perf_counter()
    b = IndexedDatasetBuilder(out + ".bin", dtype=np.uint16)
    for _ in range(10):
        for d in docs:
            b.add_item(d)
            b.end_document()
    b.finalize(out + ".idx")
    best = min(best, time.perf_counter() - t)
write = os.path.getsize(out + ".bin") / best / 1e6
print(f"{extract:.1f} {write:.1f}")
