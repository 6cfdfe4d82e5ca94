#!/usr/bin/env python3
"""Goldens of the `cleanup --tasks` cases (tests/e2e/cleanup/tasks, filter_tasks):
the per-document rules of Megatron's tools/openwebtext/cleanup_fix_dataset.py,
with the libraries that script uses (ftfy 6 defaults, langdetect, Python's re;
lengths in characters; json.dumps(ensure_ascii=False)). The tasks are the
case's own (its `args` file).

Megatron tests the tasks in a fixed order (remove_512, remove_256_javascript,
remove_512_non_english, ftfy_fix_text, general_cleaning) whatever the order on
the command line, and the first that fires decides: ftfy_fix_text returns the
fixed text, so general_cleaning never runs after it; an exception sends the
document to _filtered.

  make_cleanup_fix_goldens.py CASE_DIR            write CASE_DIR/expected/*, stderr_contains
  make_cleanup_fix_goldens.py --check CASE_DIR... compare with what is there (exit 1 on a difference)
"""
import json
import os
import re
import shlex
import sys

import ftfy
from langdetect import DetectorFactory, detect

DetectorFactory.seed = 0  # langdetect samples; the texts are unambiguous, the seed only makes reruns identical

ORDER = ["remove_512", "remove_256_javascript", "remove_512_non_english", "ftfy_fix_text", "general_cleaning"]
GENERAL = re.compile(r"  +|\b\n+ |\b\n+")


def case_tasks(case):
    args = shlex.split(open(os.path.join(case, "args"), encoding="utf-8").read())
    i = args.index("--tasks") + 1
    tasks = []
    while i < len(args) and not args[i].startswith("--"):
        tasks.append(args[i])
        i += 1
    assert set(tasks) <= set(ORDER), f"{case}: unknown task in {tasks}"
    return tasks


def process(text, tasks, counts):
    """(keep, text) as cleanup_fix_dataset.py's process_doc."""
    try:
        if "remove_512" in tasks and len(text) < 512:
            counts["remove_512"] += 1
            return False, text
        if "remove_256_javascript" in tasks and len(text) < 256 and "javascript" in text.lower():
            counts["remove_256_javascript"] += 1
            return False, text
        if "remove_512_non_english" in tasks and len(text) < 512 and detect(text) != "en":
            counts["remove_512_non_english"] += 1
            return False, text
        if "ftfy_fix_text" in tasks:
            counts["ftfy_fix_text"] += 1
            return True, ftfy.fix_text(text)
        if "general_cleaning" in tasks:
            counts["general_cleaning"] += 1
            return True, GENERAL.sub(" ", text)
    except Exception:  # Megatron prints the error and filters the document
        return False, text
    return True, text


def goldens(case):
    """{relative path: content} for the case."""
    tasks = case_tasks(case)
    counts = {t: 0 for t in ORDER}
    kept, filtered = [], []
    with open(os.path.join(case, "in.jsonl"), encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            keep, doc["text"] = process(doc["text"], tasks, counts)
            (kept if keep else filtered).append(json.dumps(doc, ensure_ascii=False) + "\n")
    # Megatron's final log line, which cleanup prints too.
    total = "  >> total docs: {} ".format(len(kept) + len(filtered)) + " ".join(f"{k} {v}" for k, v in counts.items())
    return {"expected/in_cleaned.jsonl": "".join(kept), "expected/in_filtered.jsonl": "".join(filtered),
            "stderr_contains": total.strip() + "\n"}


def main():
    check = sys.argv[1] == "--check"
    cases = sys.argv[2:] if check else sys.argv[1:]
    bad = 0
    for case in cases:
        for rel, content in goldens(case).items():
            path = os.path.join(case, rel)
            if check:
                have = open(path, encoding="utf-8").read() if os.path.exists(path) else None
                if have != content:
                    bad += 1
                    print(f"DIFFERS: {path}\n  Megatron's rules give:\n{content}\n  the golden has:\n{have}")
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(content)
        print(f"{'checked' if check else 'wrote'} {case}")
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
