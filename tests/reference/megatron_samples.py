"""Megatron GPTDataset samples in Python, for the tests and benchmarks that
train a PyTorch model on the same data as pretrain_gpt: the index arrays
pretrain_gpt cached (doc/sample/shuffle, checked against Megatron's by other
tests) over documents read by megatron.core's IndexedDataset.

  get = sample_reader(data_prefix, index_prefix)  # index_prefix: ..._train_indexmap_<n>ns_<seq>sl_<seed>s
  get(i)  # sample i: seq + 1 token ids (numpy)
"""
import numpy as np
from megatron.core.datasets.indexed_dataset import IndexedDataset


def sample_reader(data_prefix, index_prefix):
    ds = IndexedDataset(data_prefix)
    doc_idx, sample_idx, shuffle_idx = (np.load(index_prefix + s + "_idx.npy") for s in ("_doc", "_sample", "_shuffle"))

    def sample(i):  # shuffle_idx -> sample_idx -> (doc_idx position, offset) pairs
        j = shuffle_idx[i]
        (d0, o0), (d1, o1) = sample_idx[j], sample_idx[j + 1]
        if d0 == d1:
            return ds.get(doc_idx[d0], offset=o0, length=o1 - o0 + 1)
        parts = [ds.get(doc_idx[d0], offset=o0)] + [ds.get(doc_idx[d]) for d in range(d0 + 1, d1)] + [ds.get(doc_idx[d1], length=o1 + 1)]
        return np.concatenate(parts)

    return sample
