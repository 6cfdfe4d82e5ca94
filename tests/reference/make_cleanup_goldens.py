#!/usr/bin/env python3
"""Golden of tests/e2e/cleanup/megatron_mode (cleanup without --tasks): the rules
of Megatron's tools/openwebtext/cleanup_dataset.py with the libraries it uses:
ftfy.fix_text (6.3.1 defaults), langdetect != "en" -> dropped, and a text of
fewer than 1024 characters dropped when its GPT-2 tokens plus the end-of-document
token number fewer than 128 (tiktoken over tests/data/gpt2's vocab and merges);
kept documents as json.dumps(ensure_ascii=False); a line that raises (bad JSON,
text langdetect cannot classify) is skipped.

cleanup identifies the language with CLD2, not langdetect (README, "Where we
deliberately differ"); the case's texts are ones both classify alike, so the
kept documents must be these byte for byte.

  make_cleanup_goldens.py CASE_DIR DATA_DIR            write CASE_DIR/expected/out.jsonl
  make_cleanup_goldens.py --check CASE_DIR DATA_DIR    compare with it (exit 1 on a difference)
"""
import json
import os
import sys

import ftfy
from langdetect import DetectorFactory, detect

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_goldens import load  # noqa: E402

DetectorFactory.seed = 0  # langdetect samples; the seed only makes reruns identical (also for the bench baseline)
EOD = 50256


def clean(line, tk):
    """The document cleanup_dataset.py writes for one input line, or None (dropped or skipped)."""
    try:
        doc = json.loads(line)
        text = ftfy.fix_text(doc["text"])
        doc["text"] = text
        if detect(text) != "en":
            return None
        if len(text) < 8 * 128 and len(tk.encode_ordinary(text)) + 1 < 128:  # + the EOD token
            return None
        return doc
    except Exception:  # cleanup_dataset.py prints "skipping" and goes on
        return None


def kept_lines(path, tk):
    docs = (clean(line, tk) for line in open(path, encoding="utf-8"))
    return "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs if d is not None)


def main():
    check = sys.argv[1] == "--check"
    case, data = sys.argv[2:4] if check else sys.argv[1:3]
    tk, _ = load(os.path.join(data, "gpt2", "gpt2-vocab.json"), os.path.join(data, "gpt2", "gpt2-merges.txt"))
    golden = kept_lines(os.path.join(case, "in.jsonl"), tk)
    path = os.path.join(case, "expected", "out.jsonl")
    if check:
        have = open(path, encoding="utf-8").read()
        if have != golden:
            sys.exit(f"DIFFERS: {path}\n  cleanup_dataset.py's rules give:\n{golden}\n  the golden has:\n{have}")
        print(f"checked {case}: {golden.count(chr(10))} documents kept, as cleanup_dataset.py's rules")
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(golden)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
