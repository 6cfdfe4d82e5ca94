"""datasketch MinHash (num_perm=100) over character 5-grams of the OpenWebText
fixture texts, one thread, as text-dedup/datasketch users compute it
(MinHash.update_batch on the UTF-8 encoded shingles). Prints "MBps docs_per_sec".
  baseline_minhash.py DATA_DIR"""
import json
import os
import sys
import time

from datasketch import MinHash

data = sys.argv[1]
texts = [json.loads(l)["text"] for l in open(os.path.join(data, "megatron", "openwebtext-1000.decoded.jsonl"), encoding="utf-8")]
nbytes = sum(len(t.encode("utf-8")) for t in texts)
best = float("inf")
for _ in range(2):
    t0 = time.perf_counter()
    for t in texts:
        m = MinHash(num_perm=100, seed=1234)
        m.update_batch([t[i:i + 5].encode("utf-8") for i in range(len(t) - 4)])
    best = min(best, time.perf_counter() - t0)
print(f"{nbytes / best / 1e6:.2f} {len(texts) / best:.1f}")
