"""Reference tokenizers on the same input as bench_tokenizer.cpp: the 1000
OpenWebText fixture texts (4.7 MB, no repetition), one thread. Before any
figure is printed, both tokenizers' ids must agree with each other and with the
token counts of tests/data/tokenizer/owt_hashes.txt (exit 1 otherwise; checked
after the timed passes so that the first one is a cold start).
Prints "tiktoken_first tiktoken_best hf_first hf_best" in MB/s (10^6 bytes of
UTF-8 text): the first pass of a freshly loaded encoder, and the best of RUNS.
  baseline_tokenizer.py DATA_DIR [RUNS]"""
import os
import sys
import time

from tokenizer_inputs import reference_encoders, texts_and_bytes

data = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
texts, nbytes = texts_and_bytes(data)


def passes(fn, n):
    """Seconds of the first pass and of the best of n passes."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times[0], min(times)


tk, hf = reference_encoders(data)
tk_first, tk_best = passes(lambda: [tk.encode_ordinary(t) for t in texts], runs)
hf_first, hf_best = passes(lambda: [hf.encode(t, add_special_tokens=False) for t in texts], max(1, runs // 2))

counts = [int(line.split()[0]) for line in open(os.path.join(data, "tokenizer", "owt_hashes.txt"))]
for i, t in enumerate(texts):
    a, b = tk.encode_ordinary(t), hf.encode(t, add_special_tokens=False).ids
    if a != b or len(a) != counts[i]:
        sys.exit(f"baseline_tokenizer: document {i + 1}: tiktoken, tokenizers and the reference counts disagree")
print(" ".join(f"{nbytes / s / 1e6:.2f}" for s in (tk_first, tk_best, hf_first, hf_best)))
