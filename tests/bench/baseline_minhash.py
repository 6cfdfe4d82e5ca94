"""Python MinHash baselines for bench_dedup.sh: datasketch's MinHash
(num_perm=100) over character 5-grams of the OpenWebText fixture texts, one
thread, as text-dedup/datasketch users compute it (MinHash.update_batch on the
UTF-8 encoded shingles), with
  sha1   datasketch's default hash function (sha1_hash32), and
  mmh3   MurmurHash3 32-bit (the hash family of the Cython `lsh` engine that
         Megatron's find_duplicates.py imports), a fast C hash.
Prints "MBps docs_per_sec" for the best of RUNS passes.
  baseline_minhash.py DATA_DIR sha1|mmh3 [RUNS] [DOCS]"""
import json
import os
import sys
import time

import mmh3
from datasketch import MinHash

data, hash_name = sys.argv[1], sys.argv[2]
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
limit = int(sys.argv[4]) if len(sys.argv) > 4 else None
texts = [json.loads(l)["text"] for l in open(os.path.join(data, "megatron", "openwebtext-1000.decoded.jsonl"), encoding="utf-8")]
texts = texts[:limit]
nbytes = sum(len(t.encode("utf-8")) for t in texts)
kwargs = {} if hash_name == "sha1" else {"hashfunc": lambda b: mmh3.hash(b, 0, signed=False)}
best = float("inf")
for _ in range(runs):
    t0 = time.perf_counter()
    for t in texts:
        m = MinHash(num_perm=100, seed=1234, **kwargs)
        m.update_batch([t[i:i + 5].encode("utf-8") for i in range(len(t) - 4)])
    best = min(best, time.perf_counter() - t0)
print(f"{nbytes / best / 1e6:.3f} {len(texts) / best:.1f}")
