#!/usr/bin/env python3
"""Goldens of tests/e2e/cleanup/filter_tasks/: the per-document rules of
Megatron's tools/openwebtext/cleanup_fix_dataset.py for the tasks
remove_256_javascript and remove_512_non_english, with the libraries that
script uses (langdetect; lengths in characters; json.dumps(ensure_ascii=False)).

The tasks are tested in Megatron's fixed order (remove_512, remove_256_javascript,
remove_512_non_english, ftfy_fix_text, general_cleaning) whatever the order on
the command line, and the first that fires decides; an exception sends the
document to _filtered.

  .venv/bin/python tests/reference/make_cleanup_fix_goldens.py tests/e2e/cleanup/filter_tasks
"""
import json
import os
import sys

from langdetect import DetectorFactory, detect

DetectorFactory.seed = 0  # langdetect samples; the texts below are unambiguous, the seed only makes reruns identical

TASKS = ["remove_256_javascript", "remove_512_non_english"]  # as the case's args give them


COUNTS = {t: 0 for t in ["remove_512", "remove_256_javascript", "remove_512_non_english", "ftfy_fix_text", "general_cleaning"]}


def process(doc, tasks):
    text = doc["text"]
    try:
        if "remove_512" in tasks and len(text) < 512:
            COUNTS["remove_512"] += 1
            return False, text
        if "remove_256_javascript" in tasks and len(text) < 256 and "javascript" in text.lower():
            COUNTS["remove_256_javascript"] += 1
            return False, text
        if "remove_512_non_english" in tasks and len(text) < 512 and detect(text) != "en":
            COUNTS["remove_512_non_english"] += 1
            return False, text
    except Exception:  # Megatron prints the error and filters the document
        return False, text
    return True, text


def main():
    case = sys.argv[1]
    kept, filtered = [], []
    with open(os.path.join(case, "in.jsonl"), encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            keep, text = process(doc, TASKS)
            doc["text"] = text
            (kept if keep else filtered).append(json.dumps(doc, ensure_ascii=False) + "\n")
    out = os.path.join(case, "expected")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "in_cleaned.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(kept)
    with open(os.path.join(out, "in_filtered.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(filtered)
    # Megatron's final log line, which cleanup prints too.
    total = "  >> total docs: {} ".format(len(kept) + len(filtered)) + " ".join(f"{k} {v}" for k, v in COUNTS.items())
    with open(os.path.join(case, "stderr_contains"), "w", encoding="utf-8") as f:
        f.write(total.strip() + "\n")
    print(f"{len(kept)} kept, {len(filtered)} filtered")


if __name__ == "__main__":
    main()
