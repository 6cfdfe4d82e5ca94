"""The check of bench_dedup.sh's find_duplicates run: an input with planted
near-duplicates, and a comparison of the tool's output with exact Jaccard
computed here, independently of zerolm.
  planted_duplicates.py make FIXTURE OUT.jsonl DOCS COPIES
      the first DOCS fixture documents ("url": "o-N"), then COPIES of them
      ("url": "c-N") with their last 3% of characters cut
  planted_duplicates.py check IN.jsonl SIMILAR.jsonl COPIES
      every planted pair is reported; every reported similarity equals the
      exact union Jaccard of the two texts' character 5-gram sets (every window,
      the last included, as zerolm defines them) within 1e-6. Exit 1 otherwise."""
import json
import sys


def shingles(text, n=5):
    return {text[i:i + n] for i in range(len(text) - n + 1)}


if sys.argv[1] == "make":
    fixture, out, docs, copies = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    texts = [json.loads(l)["text"] for l, _ in zip(open(fixture, encoding="utf-8"), range(docs))]
    with open(out, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"url": f"o-{i}", "text": t}, ensure_ascii=False) + "\n")
        for i, t in enumerate(texts[:copies]):
            f.write(json.dumps({"url": f"c-{i}", "text": t[:len(t) - len(t) * 3 // 100]}, ensure_ascii=False) + "\n")
    sys.exit(0)

inp, similar, copies = sys.argv[2], sys.argv[3], int(sys.argv[4])
text = {d["url"]: d["text"] for d in map(json.loads, open(inp, encoding="utf-8"))}
pairs = {}
for line in open(similar, encoding="utf-8"):
    for main, others in json.loads(line).items():
        for o in others:
            for other, sim in o.items():
                pairs[frozenset((main, other))] = sim
missing = [i for i in range(copies) if frozenset((f"o-{i}", f"c-{i}")) not in pairs]
if missing:
    sys.exit(f"planted_duplicates: {len(missing)} planted pairs not reported, e.g. o-{missing[0]}/c-{missing[0]}")
for pair, sim in pairs.items():
    a, b = (shingles(text[u]) for u in pair)
    exact = len(a & b) / len(a | b)
    if abs(exact - sim) > 1e-6:
        sys.exit(f"planted_duplicates: {sorted(pair)}: reported {sim}, exact Jaccard {exact}")
print(f"{len(pairs)} pairs reported, {copies} planted pairs all found, every similarity exact")
