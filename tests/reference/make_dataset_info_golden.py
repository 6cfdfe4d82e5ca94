"""Golden for the dataset_info --doc e2e case, read by megatron-core itself.

Rerun: .venv/bin/python tests/reference/make_dataset_info_golden.py
"""
import os

from megatron.core.datasets.indexed_dataset import IndexedDataset

here = os.path.dirname(__file__)
ds = IndexedDataset(os.path.join(here, "..", "data", "megatron", "meg-gpt2-openwebtext_text_document"))
with open(os.path.join(here, "..", "e2e", "dataset_info", "doc", "expected", "stdout"), "w") as f:
    f.write(" ".join(str(int(t)) for t in ds[5]) + "\n")
