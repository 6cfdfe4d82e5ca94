"""Python baseline for bench_cleanup.sh, doing what Megatron's
cleanup_dataset.py does per document: ftfy.fix_text, langdetect (seeded),
and, under 1024 characters, a GPT-2 token count (tiktoken, the fastest Python
option). One process. Prints "seconds docs kept"; KEPT_URLS gets the "url" of
every kept document, in input order (written after timing).
  baseline_cleanup.py INPUT.jsonl VOCAB MERGES KEPT_URLS"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
from make_cleanup_goldens import clean  # noqa: E402  (the rules, shared with the golden check)
from make_tokenizer_goldens import load  # noqa: E402

tk, _ = load(sys.argv[2], sys.argv[3])
t0 = time.perf_counter()
docs = kept = 0
urls = []
for line in open(sys.argv[1], encoding="utf-8"):
    docs += 1
    doc = clean(line, tk)
    if doc is None:
        continue
    json.dumps(doc, ensure_ascii=False)
    kept += 1
    urls.append(doc["url"])
seconds = time.perf_counter() - t0
with open(sys.argv[4], "w", encoding="utf-8") as f:
    f.writelines(u + "\n" for u in urls)
print(f"{seconds:.3f} {docs} {kept}")
