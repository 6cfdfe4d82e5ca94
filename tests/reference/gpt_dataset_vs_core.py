"""Reference test: our GPT sample indexing against megatron-core's GPTDataset and
BlendedDataset (PyPI megatron-core, CPU).

  gpt_dataset_vs_core.py BIN_DIR DATA_DIR WORK_DIR            the checks below
  gpt_dataset_vs_core.py --write-golden DATA_DIR              regenerate tests/data/megatron/gpt_index_golden.json

1. One dataset: core's document/sample/shuffle indices over the Megatron-made
   fixture meg-gpt2-openwebtext_text_document (split 949,50,1, 1024 tokens,
   seed 1234, 800 samples per split) equal gpt_index_golden.json, which the
   unit tests hold our C++ to (this script is that golden's generator).
2. A blend, --data-path 0.3 A 0.7 B, of two datasets our preprocess_data wrote
   (the 1000 OpenWebText documents, cut 600 / 400), 256 tokens, split 90,5,5,
   several epochs per dataset: for every split, each dataset's three index
   arrays as pretrain_gpt caches them equal core's, and the token windows of
   every requested sample (`dataset_info --sample`, the code pretrain_gpt
   reads its batches with) equal core's BlendedDataset samples.

Where the rules differ (docs/compatibility.md): core sizes a blend to the sum of
ceil(N * w) samples, legacy Megatron (and zerolm) to the sum of the datasets'
sizes; only samples past the N requested ones depend on it, and the test
compares the N requested. Core's per-dataset target ceil(ceil(N * w) * 1.005)
can exceed the legacy ceil(N * w * 1.005) by one; the sizes below are ones
where both agree (asserted).
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

from reference_env import fresh_dir, missing

try:
    import numpy as np
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
except ImportError as e:  # pragma: no cover
    missing(e, "megatron-core")

SPLITS = ("train", "valid", "test")


class Gpt2Ids:
    """What GPTDatasetConfig needs of a tokenizer: the vocabulary size and the special ids."""
    vocab_size = 50257
    eod = 50256
    pad = 50256  # core asks for a pad id; no sample here is padded
    unique_identifiers = {"class": "zerolm-test-gpt2-ids"}  # part of core's cache key


def core_datasets(blend, sizes, seq_length, split, cache):
    """Core's three split datasets (cache None: core's default, a cache/ directory beside the data)."""
    config = GPTDatasetConfig(random_seed=1234, sequence_length=seq_length, blend=blend, split=split, path_to_cache=cache,
                              tokenizer=Gpt2Ids(), reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)
    return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()


def separate_last_epoch(tokens_per_epoch, num_epochs, num_samples, seq_length):
    """GPTDataset's decision (add_extra_token_to_sequence = True)."""
    if num_epochs == 1:
        return False
    before_last = ((num_epochs - 1) * tokens_per_epoch - 1) // seq_length
    per_epoch = (tokens_per_epoch - 1) // seq_length
    return num_samples - before_last < int(0.80 * per_epoch)


def golden_from_core(data_dir, work):
    # A copy: core writes its index cache into PREFIX/cache/ (a directory named as the prefix) when
    # not given one, and it needs a process group to be given one.
    prefix = os.path.join(work, "fixture", "meg-gpt2-openwebtext_text_document")
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    for ext in (".bin", ".idx"):
        shutil.copy(os.path.join(data_dir, "megatron", "meg-gpt2-openwebtext_text_document" + ext), prefix + ext)
    sizes = [800, 800, 800]
    datasets = core_datasets(([prefix], None), sizes, 1024, "949,50,1", None)
    indexed = IndexedDataset(prefix)  # kept alive: its arrays are views of a mapping it unmaps when freed
    seq_sizes = indexed.sequence_lengths
    splits, bounds = {}, [0]
    for name, ds, n in zip(SPLITS, datasets, sizes):
        docs = ds.indices
        bounds.append(int(docs[-1]) + 1)
        tokens = int(seq_sizes[docs].sum())
        epochs = len(ds.document_index) // len(docs)
        splits[name] = {"tokens_per_epoch": tokens, "num_epochs": epochs,
                        "separate_last_epoch": separate_last_epoch(tokens, epochs, n, 1024),
                        "doc_idx": ds.document_index.tolist(), "sample_idx": ds.sample_index.tolist(),
                        "shuffle_idx": ds.shuffle_index.tolist()}
    return {"source_dataset": "bigscience-megatron-deepspeed/meg-gpt2-openwebtext_text_document",
            "split_string": "949,50,1", "split_boundaries": bounds, "seq_length": 1024, "seed": 1234,
            "num_samples": dict(zip(SPLITS, sizes)),
            "note": "train=train_iters(100)*global_batch(8); valid=(100//1000+1)*eval_iters(100)*8; test=eval_iters(100)*8. "
                    "Arrays from megatron-core's GPTDataset (tests/reference/gpt_dataset_vs_core.py --write-golden), equal "
                    "to legacy Megatron-LM's megatron/data/gpt_dataset.py functions with numpy's RandomState.",
            "splits": splits}


def check_golden(data_dir, work):
    path = os.path.join(data_dir, "megatron", "gpt_index_golden.json")
    want = golden_from_core(data_dir, work)
    have = json.load(open(path))
    for key in ("split_boundaries", "seq_length", "seed", "num_samples"):
        assert have[key] == want[key], f"{path}: {key} {have[key]} != core's {want[key]}"
    for name in SPLITS:
        for key, value in want["splits"][name].items():
            assert have["splits"][name][key] == value, f"{path}: {name} {key} differs from megatron-core's"
    print("ok: gpt_index_golden.json equals megatron-core's GPTDataset indices on the Megatron-made fixture")


def write_dataset(bin_dir, data_dir, lines, prefix):
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    with open(prefix + ".jsonl", "w", encoding="utf-8") as f:
        f.writelines(lines)
    subprocess.run([os.path.join(bin_dir, "preprocess_data"), "--input", prefix + ".jsonl", "--tokenizer-type", "GPT2BPETokenizer",
                    "--vocab-file", os.path.join(data_dir, "gpt2", "gpt2-vocab.json"), "--merge-file",
                    os.path.join(data_dir, "gpt2", "gpt2-merges.txt"), "--append-eod", "--workers", "2",
                    "--output-prefix", prefix, "-q"], check=True)
    return prefix + "_text_document"


def check_blend(bin_dir, data_dir, work):
    lines = open(os.path.join(data_dir, "megatron", "openwebtext-1000.decoded.jsonl"), encoding="utf-8").readlines()
    a = write_dataset(bin_dir, data_dir, lines[:600], os.path.join(work, "data", "a"))
    b = write_dataset(bin_dir, data_dir, lines[600:], os.path.join(work, "data", "b"))
    seq, split, weights = 256, "90,5,5", [0.3, 0.7]
    sizes = [12000, 1200, 300]  # A's train split holds ~2,700 samples of 256 tokens an epoch: several epochs each
    datasets = core_datasets(([a, b], weights), sizes, seq, split, None)
    ours_cache = os.path.join(work, "our_cache")
    for name, blended, n in zip(SPLITS, datasets, sizes):
        # Each dataset's arrays, as pretrain_gpt caches them (dataset_info --sample builds the same caches).
        out = subprocess.run([os.path.join(bin_dir, "dataset_info"), "0.3", a, "0.7", b, "--sample", "0", "--sample-count", str(n),
                              "--num-samples", str(n), "--seq-length", str(seq), "--split", split, "--split-name", name,
                              "--data-cache-path", ours_cache, "-q"], check=True, capture_output=True, text=True).stdout.splitlines()
        for k, (prefix, ds) in enumerate(zip((a, b), blended.datasets)):
            target = math.ceil(n * weights[k] * 1.005)
            assert target == math.ceil(math.ceil(n * weights[k]) * 1.005), f"{name}: pick sizes where the targets agree"
            stem = os.path.join(ours_cache, f"{os.path.basename(prefix)}_{name}_indexmap_{target}ns_{seq}sl_1234s")
            for ours, core in (("doc", ds.document_index), ("sample", ds.sample_index), ("shuffle", ds.shuffle_index)):
                got = np.load(f"{stem}_{ours}_idx.npy")
                assert got.shape == core.shape and np.array_equal(got, core), f"{name} split, dataset {k}: {ours}_idx differs from core's"
        assert len(out) == n, f"{name}: dataset_info printed {len(out)} samples, not {n}"
        for i in range(n):
            item = blended[i]
            core_ids = item["tokens"].tolist() + [int(item["labels"][-1])]
            if list(map(int, out[i].split())) != core_ids:
                raise AssertionError(f"{name} sample {i} differs from megatron-core's BlendedDataset")
        shape = []
        for k, ds in enumerate(blended.datasets):
            epochs = len(ds.document_index) // len(ds.indices)
            tokens = int(ds.dataset.sequence_lengths[ds.indices].sum())
            sep = separate_last_epoch(tokens, epochs, math.ceil(n * weights[k] * 1.005), seq)
            shape.append(f"{epochs} epoch{'s' if epochs > 1 else ''}{', last one separate' if sep else ''}")
        print(f"ok: blend 0.3/0.7, {name} split: indices of both datasets ({'; '.join(shape)}) and all {n} samples equal megatron-core's")


def main():
    if sys.argv[1] == "--write-golden":
        data_dir = sys.argv[2]
        work = tempfile.mkdtemp()
        golden = golden_from_core(data_dir, work)
        shutil.rmtree(work)
        with open(os.path.join(data_dir, "megatron", "gpt_index_golden.json"), "w") as f:
            json.dump(golden, f)
        print("wrote gpt_index_golden.json")
        return
    bin_dir, data_dir, work = sys.argv[1:4]
    fresh_dir(work)
    check_golden(data_dir, work)
    check_blend(bin_dir, data_dir, work)


if __name__ == "__main__":
    main()
