"""Reference tokenizers on the same input as bench_tokenizer.cpp: the
OpenWebText fixture texts repeated REPEAT times, one thread.
Prints "tiktoken_MBps hf_MBps" (MB = 10^6 bytes of UTF-8 text).
  baseline_tokenizer.py DATA_DIR REPEAT"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
from make_tokenizer_goldens import load  # noqa: E402

data, repeat = sys.argv[1], int(sys.argv[2])
tk, hf = load(os.path.join(data, "gpt2", "gpt2-vocab.json"), os.path.join(data, "gpt2", "gpt2-merges.txt"))
texts = [json.loads(l)["text"] for l in open(os.path.join(data, "megatron", "openwebtext-1000.decoded.jsonl"), encoding="utf-8")] * repeat
nbytes = sum(len(t.encode("utf-8")) for t in texts)


def best(fn, runs):
    b = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        b = min(b, time.perf_counter() - t)
    return b


tk.encode_ordinary(texts[0])
t_tk = best(lambda: [tk.encode_ordinary(t) for t in texts], 3)
t_hf = best(lambda: [hf.encode(t, add_special_tokens=False) for t in texts], 1)
print(f"{nbytes / t_tk / 1e6:.1f} {nbytes / t_hf / 1e6:.1f}")
