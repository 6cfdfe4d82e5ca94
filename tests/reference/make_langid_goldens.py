"""langdetect's predictions (seeded, DetectorFactory.seed = 0) on the labelled
multilingual set tests/data/langid/labelled.tsv (hand-written sentences),
written to tests/data/langid/langdetect.tsv, so that tests/unit/lang_id_test.cpp
can report CLD2's agreement with the detector Megatron's cleanup uses.
Rerun: .venv/bin/python tests/reference/make_langid_goldens.py
"""
import os

from langdetect import DetectorFactory, detect

DetectorFactory.seed = 0
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "langid")
rows = [l.rstrip("\n").split("\t", 1) for l in open(os.path.join(here, "labelled.tsv"), encoding="utf-8")]
with open(os.path.join(here, "langdetect.tsv"), "w", encoding="utf-8") as f:
    correct = 0
    for label, text in rows:
        guess = detect(text)
        guess = {"zh-cn": "zh", "zh-tw": "zh"}.get(guess, guess)
        correct += guess == label
        f.write(f"{guess}\n")
print(f"langdetect accuracy {correct}/{len(rows)}")
