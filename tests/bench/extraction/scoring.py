"""The ScrapingHub article-extraction benchmark's scoring, written from its description
(tests/data/article-extraction-benchmark/PROVENANCE.md): texts become runs of word
characters (regex \\w+, case kept); units are overlapping 4-token shingles counted as a
multiset (a text of 1-3 tokens is one shorter shingle); per page TP = shared shingles,
FP = extra predicted, FN = missing gold; precision is averaged over pages with TP+FP > 0
(an empty prediction counts only against recall), recall over pages with TP+FN > 0;
F1 = 2PR/(P+R)."""
import collections
import re

WORD = re.compile(r"\w+")


def shingles(text):
    tokens = WORD.findall(text or "")
    if len(tokens) < 4:
        return collections.Counter([tuple(tokens)]) if tokens else collections.Counter()
    return collections.Counter(tuple(tokens[i:i + 4]) for i in range(len(tokens) - 3))


def score(gold, predicted):
    """gold, predicted: {page id: text}. Returns (precision, recall, f1)."""
    precisions, recalls = [], []
    for key, gold_text in gold.items():
        g, p = shingles(gold_text), shingles(predicted.get(key, ""))
        tp = sum((g & p).values())
        fp = sum(p.values()) - tp
        fn = sum(g.values()) - tp
        if fp == 0 and fn == 0:
            precisions.append(1.0)
            recalls.append(1.0)
            continue
        if tp + fp > 0:
            precisions.append(tp / (tp + fp))
        if tp + fn > 0:
            recalls.append(tp / (tp + fn))
    p = sum(precisions) / len(precisions)
    r = sum(recalls) / len(recalls)
    return p, r, 2 * p * r / (p + r)
