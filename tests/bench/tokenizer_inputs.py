"""What the tokenizer baselines share (baseline_tokenizer.py, baseline_gigatoken.py): the
benchmark's input, the 1000 OpenWebText fixture texts (4.7 MB, no repetition), and the
reference encoders built from the GPT-2 files in DATA_DIR (tiktoken and HF tokenizers,
through tests/reference/make_tokenizer_goldens.py)."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
from make_tokenizer_goldens import load  # noqa: E402


def texts_and_bytes(data):
    """The fixture texts and their size in bytes of UTF-8."""
    path = os.path.join(data, "megatron", "openwebtext-1000.decoded.jsonl")
    texts = [json.loads(line)["text"] for line in open(path, encoding="utf-8")]
    return texts, sum(len(t.encode("utf-8")) for t in texts)


def reference_encoders(data):
    """(tiktoken Encoding, HF tokenizers Tokenizer) of GPT-2's vocab and merges."""
    return load(os.path.join(data, "gpt2", "gpt2-vocab.json"), os.path.join(data, "gpt2", "gpt2-merges.txt"))
