"""Reference test: the e2e goldens of blacklist_urls, group_dups and dedup
against Megatron's tools/openwebtext algorithms, run here on each case's input.
Megatron-LM's scripts are not a package, so their logic is transcribed below
(blacklist_urls.py with tldextract and Python's re as it uses them, via
make_url_goldens.py; group_duplicate_url.py; remove_group_duplicates.py).
Their outputs are in Python set order, which is arbitrary, so the comparison
is made up to the differences the README lists ("Where we deliberately differ
from Megatron"):

  blacklist_urls  the accepted set equals Megatron's (with our two fixes to its
                  domain and extension tests), and our order is first-seen order;
                  every rejected URL carries Megatron's reason
  group_dups      the groups (as sets of ids) equal Megatron's; ours are numbered
                  0, 1, ... with ids in order of first appearance
  dedup           the output equals Megatron's when its survivor of a group (the
                  first id of the set-ordered list) is replaced by ours (the first
                  line of the group met in the data, or the longest text with
                  --keep longest); lines compared as parsed JSON (Megatron
                  re-serialises them, ours are byte-identical)

  megatron_openwebtext_goldens.py E2E_DIR
"""
import glob
import json
import os
import shlex
import sys

from reference_env import missing

try:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_url_goldens import DOMAINS, EXTS_ZEROLM, verdict_with
except ImportError as e:  # pragma: no cover
    missing(e, "tldextract")

E2E = sys.argv[1]
checked = 0


def case_args(case):
    return shlex.split(open(os.path.join(case, "args")).read().replace("@CASE@", case))


def blacklist_urls_megatron(files, domains):
    """blacklist_urls.py: (accepted URLs in first-seen order, [(reason, url)] of the rejected)."""
    accepted, seen, rejected = [], set(), []
    for path in files:
        for line in open(path, encoding="utf-8"):
            url = line.strip()
            v = verdict_with(url, domains, EXTS_ZEROLM, lower_domain=True)
            if v == "accepted" and url in seen:
                v = "duplicate"
            if v == "accepted":
                seen.add(url)
                accepted.append(url)
            else:
                rejected.append((v, url))
    return accepted, rejected


for case in sorted(glob.glob(os.path.join(E2E, "blacklist_urls", "*"))):
    args = case_args(case)
    inputs, domains = [], DOMAINS
    i = 1
    while i < len(args):
        if args[i] == "--domain-blacklist":
            domains = {l.strip() for l in open(args[i + 1]) if l.strip()}
            i += 2
        elif args[i].startswith("-"):
            i += 2 if args[i] in ("--rejected-out", "--threads", "--stats-out") else 1
        else:
            inputs.append(args[i])
            i += 1
    inputs = inputs[:-1]  # the last positional is the output
    files = []
    for p in inputs:
        files += sorted(glob.glob(os.path.join(p, "*.txt"))) if os.path.isdir(p) else [p]
    accepted, rejected = blacklist_urls_megatron(files, domains)
    ours = open(os.path.join(case, "expected", "out.txt"), encoding="utf-8").read().splitlines()
    assert set(ours) == set(accepted), f"{case}: accepted set differs from Megatron's: {set(ours) ^ set(accepted)}"
    assert ours == accepted, f"{case}: not in first-seen order"
    rej_path = os.path.join(case, "expected", "rejected.tsv")
    if os.path.exists(rej_path):
        ours_rej = [tuple(l.split("\t", 1)) for l in open(rej_path, encoding="utf-8").read().splitlines()]
        assert sorted(ours_rej) == sorted(rejected), f"{case}: rejected reasons differ: {ours_rej} vs {rejected}"
    print(f"ok: blacklist_urls/{os.path.basename(case)}: {len(accepted)} accepted, {len(rejected)} rejected, as Megatron's")
    checked += 1


def group_duplicate_url_megatron(path, threshold):
    """group_duplicate_url.py: the surviving groups with >= 2 ids, as sets."""
    groups, index_of = [], {}
    for line in open(path, encoding="utf-8"):
        for main, others in json.loads(line).items():
            urls = [main] + [o for d in others for o, s in d.items() if s >= threshold]
            target = next((index_of[u] for u in urls if u in index_of), None)
            if target is None:
                target = len(groups)
                groups.append(set())
            for u in urls:
                old = index_of.get(u)
                if old is not None and old != target and groups[old] is not None:
                    for v in groups[old]:
                        index_of[v] = target
                    groups[target] |= groups[old]
                    groups[old] = None
                groups[target].add(u)
                index_of[u] = target
    return [g for g in groups if g is not None and len(g) >= 2]


for case in sorted(glob.glob(os.path.join(E2E, "group_dups", "*"))):
    golden = os.path.join(case, "expected", "groups.jsonl")
    if not os.path.exists(golden):
        continue  # error cases: no output to compare
    args = case_args(case)  # group_dups INPUT OUTPUT [THRESHOLD] [flags]
    threshold = float(args[3]) if len(args) > 3 and not args[3].startswith("-") else 0.7
    megatron = group_duplicate_url_megatron(args[1], threshold)
    ours = [next(iter(json.loads(l).items())) for l in open(golden, encoding="utf-8")]
    assert [k for k, _ in ours] == [str(i) for i in range(len(ours))], f"{case}: groups not numbered 0, 1, ..."
    assert sorted(map(sorted, (v for _, v in ours))) == sorted(map(sorted, megatron)), f"{case}: groups differ from Megatron's"
    print(f"ok: group_dups/{os.path.basename(case)}: {len(ours)} groups, as Megatron's (threshold {threshold})")
    checked += 1


def remove_group_duplicates(groups_path, data_path, survivor):
    """remove_group_duplicates.py, with survivor(group ids, data lines) choosing the id kept."""
    lines = open(data_path, encoding="utf-8").read().splitlines()
    remove = set()
    for line in open(groups_path, encoding="utf-8"):
        for ids in json.loads(line).values():
            keep = survivor(ids, lines)
            remove |= {u for u in ids if u != keep}
    out = []
    for line in lines:
        try:
            doc = json.loads(line)
            url = doc["url"]
        except Exception:  # Megatron: [SKIPPING]
            continue
        if url in remove:
            continue
        out.append(doc)
    return out


def first_in_data(ids, lines, key=None):
    members = set(ids)
    best = None
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if doc.get("url") in members and (best is None or (key and key(doc) > key(best))):
            best = doc
    return best["url"] if best else None


for case in sorted(glob.glob(os.path.join(E2E, "dedup", "*"))):
    args = case_args(case)  # dedup GROUPS DATA OUTPUT [flags]
    groups_path, data_path = args[1], args[2]
    longest = "--keep" in args and args[args.index("--keep") + 1] == "longest"
    survivor = (lambda ids, lines: first_in_data(ids, lines, key=lambda d: len(d["text"]))) if longest else first_in_data
    megatron = remove_group_duplicates(groups_path, data_path, survivor)
    ours = [json.loads(l) for l in open(os.path.join(case, "expected", "out.jsonl"), encoding="utf-8")]
    # A repeated id: Megatron keeps every line of a kept id; ours keeps the group's first line only.
    urls_seen, megatron_once = set(), []
    for doc in megatron:
        if doc["url"] in urls_seen and any(doc["url"] in ids for l in open(groups_path)
                                           for ids in json.loads(l).values()):
            continue
        urls_seen.add(doc["url"])
        megatron_once.append(doc)
    assert ours == megatron_once, f"{case}: output differs from Megatron's with our survivor rule:\n{ours}\n{megatron_once}"
    print(f"ok: dedup/{os.path.basename(case)}: {len(ours)} documents kept, as Megatron's with the documented survivor")
    checked += 1

assert checked >= 6, f"only {checked} cases found under {E2E}"
print(f"ok: {checked} e2e cases agree with Megatron's algorithms")
