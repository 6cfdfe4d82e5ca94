"""Golden output for the merge_datasets e2e case, made by Megatron itself.

Merges tests/e2e/merge_datasets/agnews/input/* exactly as Megatron-LM's
tools/merge_datasets.py does (sorted prefixes, IndexedDatasetBuilder.add_index)
with megatron-core from PyPI, and writes the result into the case's expected/.

Rerun: .venv/bin/python tests/reference/make_merge_golden.py
"""
import os
import sys

from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder, get_bin_path, get_idx_path

root = os.path.join(os.path.dirname(__file__), "..", "e2e", "merge_datasets", "agnews")
indir = os.path.join(root, "input")
outprefix = os.path.join(root, "expected", "merged")

prefixes = sorted({os.path.splitext(os.path.join(indir, f))[0] for f in os.listdir(indir)})
builder = None
for prefix in prefixes:
    if builder is None:
        dataset = IndexedDataset(prefix, multimodal=False)
        builder = IndexedDatasetBuilder(get_bin_path(outprefix), dtype=dataset.index.dtype, multimodal=False)
        del dataset
    builder.add_index(prefix)
builder.finalize(get_idx_path(outprefix))
print("wrote", outprefix, file=sys.stderr)
