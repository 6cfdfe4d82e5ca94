#!/usr/bin/env python3
"""The floors of the source tree, checked on every #include (docs/design.md, "Architecture").

  layering.py SOURCE_DIR

A file may include headers of its own folder and of the folders below it in this order, never
one above:
  common/core < common/{io,text,tokenizer} < formats < tools/<name> (each its own) or trainer/...
and inside trainer/:
  config < report < parallel < model < zero < checkpoint < run < bin
common/, formats/, tools/ and trainer/{config,report}/ are torch-free: no LibTorch header
(<torch/...>, <ATen/...>, <c10/...>) directly or through a trainer header that has one.
Exits 1 listing every include that breaks a rule.
"""
import os
import re
import sys

TRAINER = ["config", "report", "parallel", "model", "zero", "checkpoint", "run", "bin"]
TORCH_FREE = ("common/", "formats/", "tools/", "trainer/config/", "trainer/report/")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def level(path):
    """(floor, detail) of a repository path; higher floors may include lower ones."""
    parts = path.split("/")
    if parts[0] == "common":
        return (0, "") if parts[1] == "core" else (1, "")
    if parts[0] == "formats":
        return (2, "")
    if parts[0] == "tools":
        return (3, parts[1])
    if parts[0] == "trainer":
        return (4 + TRAINER.index(parts[1]), "")
    return None


def main():
    root = sys.argv[1]
    files = []
    for top in ("common", "formats", "tools", "trainer"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            files += [os.path.relpath(os.path.join(dirpath, n), root) for n in names if n.endswith((".h", ".cpp", ".inc"))]
    includes = {f: INCLUDE.findall(open(os.path.join(root, f), encoding="utf-8").read()) for f in files}
    direct_torch = {f for f, inc in includes.items() if any(q == "<" and re.match(r"(torch|ATen|c10)/", h) for q, h in inc)}
    # Headers that bring LibTorch in, directly or through another of ours.
    torchy = set(direct_torch)
    changed = True
    while changed:
        changed = False
        for f, inc in includes.items():
            if f not in torchy and any(q == '"' and h in torchy for q, h in inc):
                torchy.add(f)
                changed = True
    problems = []
    for f, inc in sorted(includes.items()):
        mine = level(f)
        for q, h in inc:
            if q != '"':
                continue
            theirs = level(h) if os.path.exists(os.path.join(root, h)) else None
            if theirs is None:
                continue
            upward = theirs[0] > mine[0] or (theirs[0] == mine[0] == 3 and theirs[1] != mine[1])
            sideways = f.startswith("trainer/") and h.startswith("tools/")  # a tool's code is that tool's alone
            if upward or sideways:
                problems.append(f"{f}: includes {h}, " + ("a tool's own code" if sideways else "a floor above it"))
        if f.startswith(TORCH_FREE) and f in torchy:
            problems.append(f"{f}: must be torch-free but includes LibTorch (directly or through a trainer header)")
    for p in problems:
        print(p)
    print(f"layering: {len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
