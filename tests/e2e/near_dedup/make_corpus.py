"""A corpus with planted near-duplicates for the near_dedup tests, written as
one JSONL file (the one-machine input) and as shards (its lines cut into
consecutive pieces, some compressed).

  make_corpus.py SOURCE.jsonl OUT_DIR SHARDS [SEED]

Planted: exact copies, copies with a few words changed (high Jaccard),
copies with a quarter cut (middle Jaccard), chains (a copy of a copy),
two documents sharing an id with different texts, a copy sharing its
original's id, short documents (no shingles), and two malformed lines."""
import gzip
import json
import os
import random
import sys

src, out, shards = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 7)
docs = [json.loads(l)["text"] for l in open(src, encoding="utf-8")][:600]
lines = []
for i, t in enumerate(docs):
    lines.append({"url": f"o-{i}", "text": t})
    r = rng.random()
    words = t.split(" ")
    if r < 0.06:
        lines.append({"url": f"exact-{i}", "text": t})
    elif r < 0.14:
        w = list(words)
        for _ in range(3):
            k = rng.randrange(len(w))
            w[k] = w[k].upper()
        lines.append({"url": f"edit-{i}", "text": " ".join(w)})
        if r < 0.10:
            w2 = list(w)
            k = rng.randrange(len(w2))
            w2[k] = "zz" + w2[k]
            lines.append({"url": f"chain-{i}", "text": " ".join(w2)})
    elif r < 0.18:
        cut = len(words) // 4
        lines.append({"url": f"cut-{i}", "text": " ".join(words[cut:])})
    elif r < 0.19:
        lines.append({"url": f"o-{i}", "text": t})  # a copy under its original's id
    elif r < 0.20:
        lines.append({"url": f"o-{i}", "text": "another text entirely, " + str(i) * 40})  # a repeated id, other text
rng.shuffle(lines)
lines.insert(len(lines) // 3, {"url": "short-1", "text": "abc"})
lines.insert(len(lines) // 2, {"url": "short-2", "text": "abc"})
raw = [json.dumps(l, ensure_ascii=False) for l in lines]
raw.insert(len(raw) // 4, '{"url": "broken", "text": ')
raw.insert(3 * len(raw) // 4, '{"text": "no url key here"}')
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "all.jsonl"), "w", encoding="utf-8") as f:
    f.write("\n".join(raw) + "\n")
os.makedirs(os.path.join(out, "shards"), exist_ok=True)
bounds = sorted(rng.sample(range(1, len(raw)), shards - 1)) if shards > 1 else []
pieces = [raw[a:b] for a, b in zip([0] + bounds, bounds + [len(raw)])]
for k, piece in enumerate(pieces):
    body = ("\n".join(piece) + "\n").encode()
    name = os.path.join(out, "shards", f"shard-{k:03d}.jsonl")
    if k % 3 == 1:
        with gzip.open(name + ".gz", "wb") as f:
            f.write(body)
    else:
        with open(name, "wb") as f:
            f.write(body)
print(len(raw), "lines in", len(pieces), "shards")
