"""The corpus of bench_near_dedup.sh, and its scoring against exact Jaccard.

  near_dedup_corpus.py make OUT_DIR DOCS SHARDS
      DOCS original documents of pseudo-English (Zipf-distributed words from a
      20,000-word vocabulary, sentences of 8-30 words, 150-900 words a
      document), then one copy of every fifth original with a fraction of its
      words replaced (0 to 40%), each copy placed at a random point after its
      original. Written as SHARDS JSONL shards ({"url", "text"}) under
      OUT_DIR/shards, and OUT_DIR/truth.json: every copy's id with the exact
      union Jaccard of its and its original's character 5-gram sets (every
      window; the definition find_duplicates and near_dedup verify with).
  near_dedup_corpus.py score OUT_DIR KEPT_DIR THRESHOLD
      Reads the kept documents (every .jsonl under KEPT_DIR) and prints
      "removed R true_positives P recall X precision Y": a copy is a duplicate
      when its Jaccard with its original is >= THRESHOLD; recall is the share of
      those removed, precision the share of removed documents that are such copies
      (an original never is: the first document of a group is the one kept)."""
import json
import os
import random
import sys


def shingles(text, n=5):
    return {text[i:i + n] for i in range(len(text) - n + 1)}


def make(out, docs, shards):
    rng = random.Random(20261125)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    vocab = sorted({"".join(rng.choice(letters[:20 if k % 3 else 26]) for _ in range(rng.randint(2, 10))) for k in range(24000)})[:20000]
    cum, total = [], 0.0
    for r in range(len(vocab)):
        total += 1.0 / (r + 1)
        cum.append(total)

    def document():
        words, n = [], rng.randint(150, 900)
        while len(words) < n:
            sentence = rng.choices(vocab, cum_weights=cum, k=rng.randint(8, 30))
            sentence[0] = sentence[0].capitalize()
            words += sentence[:-1] + [sentence[-1] + rng.choice(".....?!;")]
        return words

    originals = [document() for _ in range(docs)]
    items = [(float(i), f"o-{i}", " ".join(w)) for i, w in enumerate(originals)]
    truth = {}
    for i in range(0, docs, 5):
        words = list(originals[i])
        frac = rng.choice([0.0, 0.01, 0.03, 0.06, 0.1, 0.15, 0.2, 0.3, 0.4])
        for k in rng.sample(range(len(words)), int(frac * len(words))):
            words[k] = rng.choice(vocab)
        text = " ".join(words)
        a, b = shingles(items[i][2]), shingles(text)
        truth[f"c-{i}"] = len(a & b) / len(a | b)
        items.append((rng.uniform(i + 0.5, docs), f"c-{i}", text))
    items.sort()
    os.makedirs(os.path.join(out, "shards"), exist_ok=True)
    per = (len(items) + shards - 1) // shards
    for s in range(shards):
        with open(os.path.join(out, "shards", f"shard-{s:03d}.jsonl"), "w") as f:
            for _, url, text in items[s * per:(s + 1) * per]:
                f.write(json.dumps({"url": url, "text": text}) + "\n")
    json.dump(truth, open(os.path.join(out, "truth.json"), "w"))
    size = sum(os.path.getsize(os.path.join(out, "shards", f)) for f in os.listdir(os.path.join(out, "shards")))
    print(f"{len(items)} documents ({len(truth)} copies), {size / 1e6:.1f} MB in {shards} shards")


def score(out, kept_dir, threshold):
    truth = json.load(open(os.path.join(out, "truth.json")))
    every = set()
    for f in os.listdir(os.path.join(out, "shards")):
        every |= {json.loads(l)["url"] for l in open(os.path.join(out, "shards", f))}
    kept = set()
    for root, _, files in os.walk(kept_dir):
        for f in files:
            if f.endswith(".jsonl"):
                kept |= {json.loads(l).get("url") or json.loads(l).get("id") for l in open(os.path.join(root, f))}
    removed = every - kept
    dups = {u for u, j in truth.items() if j >= threshold}
    tp = len(removed & dups)
    recall = tp / len(dups) if dups else 1.0
    precision = tp / len(removed) if removed else 1.0
    print(f"removed {len(removed)} true_positives {tp} duplicates {len(dups)} recall {recall:.4f} precision {precision:.4f}")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        score(sys.argv[2], sys.argv[3], float(sys.argv[4]))
