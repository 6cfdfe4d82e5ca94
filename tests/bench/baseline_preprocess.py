"""A Python baseline built like Megatron's tools/preprocess_data.py: a
multiprocessing Pool whose workers json.loads each line and encode it with a
GPT-2 encoder (tiktoken, loaded from the same vocab/merges files), imap with
chunk size 32, EOD appended, megatron-core's IndexedDatasetBuilder writing
.bin/.idx. Prints "seconds docs".
  baseline_preprocess.py INPUT VOCAB MERGES OUTPUT_PREFIX WORKERS"""
import json
import multiprocessing
import os
import sys
import time

import numpy as np
import torch
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
from make_tokenizer_goldens import load  # noqa: E402

ENC = None


def init(vocab, merges):
    global ENC
    ENC, _ = load(vocab, merges)


def encode(line):
    text = json.loads(line)["text"]
    ids = ENC.encode_ordinary(text)
    if ids:
        ids.append(50256)
    return ids, len(line)


def main():
    inp, vocab, merges, prefix, workers = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    t = time.perf_counter()
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    docs = 0
    with open(inp, encoding="utf-8") as fin, multiprocessing.Pool(workers, initializer=init, initargs=(vocab, merges)) as pool:
        for ids, _ in pool.imap(encode, fin, 32):
            if ids:
                builder.add_document(torch.IntTensor(ids), [len(ids)])
            docs += 1
    builder.finalize(prefix + ".idx")
    print(f"{time.perf_counter() - t:.3f} {docs}")


if __name__ == "__main__":
    main()
