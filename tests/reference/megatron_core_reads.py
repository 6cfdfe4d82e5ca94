"""Reference test: datasets written by our tools load in megatron-core's own
IndexedDataset with the same documents.

  megatron_core_reads.py BIN_DIR DATA_DIR WORK_DIR

Writes a merged dataset with our merge_datasets (from the Megatron-made
ag_news fixtures) and checks every document against megatron-core's reading
of the inputs. Exits 77 (skipped) when megatron-core is not installed.
"""
import os
import shutil
import subprocess
import sys

from reference_env import fresh_dir, missing

try:
    import numpy as np
    from megatron.core.datasets.indexed_dataset import IndexedDataset
except ImportError as e:  # pragma: no cover
    missing(e, "megatron-core")

bin_dir, data_dir, work = sys.argv[1:4]
fresh_dir(work, "in")
names = ["ag_news_prompt_inputs_document", "ag_news_prompt_targets_document"]
for n in names:
    for ext in (".bin", ".idx"):
        shutil.copy(os.path.join(data_dir, "megatron", n + ext), os.path.join(work, "in", n + ext))
out = os.path.join(work, "merged")
subprocess.run([os.path.join(bin_dir, "merge_datasets"), "--input", os.path.join(work, "in"), "--output-prefix", out, "-q"], check=True)

merged = IndexedDataset(out)
expected = []
for n in names:
    ds = IndexedDataset(os.path.join(data_dir, "megatron", n))
    expected += [np.array(ds[i]) for i in range(len(ds))]  # copy: ds unmaps when freed
assert len(merged) == len(expected), (len(merged), len(expected))
for i, want in enumerate(expected):
    got = merged[i]
    assert got.dtype == want.dtype and np.array_equal(got, want), f"sequence {i} differs"
assert list(merged.document_indices) == list(range(len(expected) + 1))
print(f"ok: merge_datasets output: {len(expected)} sequences identical in megatron-core")

# preprocess_data output (full GPT-2 vocab, 2 workers) read back by megatron-core:
# every document equals tiktoken's ids of the text plus EOD.
import json

import tiktoken
from tiktoken_ext.openai_public import r50k_pat_str

sys.path.insert(0, os.path.dirname(__file__))
from make_tokenizer_goldens import load  # noqa: E402

tk, _ = load(os.path.join(data_dir, "gpt2", "gpt2-vocab.json"), os.path.join(data_dir, "gpt2", "gpt2-merges.txt"))
src = os.path.join(data_dir, "megatron", "openwebtext-1000.decoded.jsonl")
pp = os.path.join(work, "owt")
subprocess.run([os.path.join(bin_dir, "preprocess_data"), "--input", src, "--tokenizer-type", "GPT2BPETokenizer",
                "--vocab-file", os.path.join(data_dir, "gpt2", "gpt2-vocab.json"), "--merge-file",
                os.path.join(data_dir, "gpt2", "gpt2-merges.txt"), "--append-eod", "--workers", "2",
                "--output-prefix", pp, "-q"], check=True)
ds = IndexedDataset(pp + "_text_document")
texts = [json.loads(line)["text"] for line in open(src, encoding="utf-8")]
assert len(ds) == len(texts), (len(ds), len(texts))
assert ds.index.dtype == np.uint16
for i, text in enumerate(texts):
    want = tk.encode_ordinary(text) + [50256]
    assert list(map(int, ds[i])) == want, f"document {i} differs from tiktoken"
print(f"ok: preprocess_data output: {len(texts)} documents equal tiktoken's ids in megatron-core's IndexedDataset")
