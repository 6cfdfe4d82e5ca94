"""gigatoken (Rust; PyPI `gigatoken`, pinned) on the same input as bench_tokenizer.cpp: the
1000 OpenWebText fixture texts, one thread (the caller pins the process to one core with
taskset), one Python call per document (`Tokenizer.encode`, faster than `encode_batch` on one
thread here). Before any figure is printed its ids must equal tiktoken's on every document.
Prints "cold warm" in MB/s (10^6 bytes of UTF-8 text): cold is the best of RUNS first passes,
each of a tokenizer built just before (outside the timing) from the same vocab and merges, so
its internal caches start empty, like ours in the cold row; warm is the best of RUNS passes
after one pass over the same text.
  baseline_gigatoken.py DATA_DIR [RUNS]"""
import sys
import time

import gigatoken

from tokenizer_inputs import reference_encoders, texts_and_bytes

data = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
texts, nbytes = texts_and_bytes(data)
tk, hf = reference_encoders(data)


def one_pass(g):
    t = time.perf_counter()
    for text in texts:
        g.encode(text)
    return time.perf_counter() - t


cold = min(one_pass(gigatoken.Tokenizer(hf)) for _ in range(runs))
warm_tok = gigatoken.Tokenizer(hf)
one_pass(warm_tok)
warm = min(one_pass(warm_tok) for _ in range(runs))
for i, t in enumerate(texts):
    if list(warm_tok.encode(t)) != tk.encode_ordinary(t):
        sys.exit(f"baseline_gigatoken: document {i + 1}: gigatoken's ids differ from tiktoken's")
print(f"{nbytes / cold / 1e6:.2f} {nbytes / warm / 1e6:.2f}")
