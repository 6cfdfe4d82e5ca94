"""datatrove's MinHash deduplication (its four stages with LocalPipelineExecutor,
as its examples/minhash_deduplication.py runs them) over bench_near_dedup.sh's
shards: signatures (a task per shard), buckets (a task per band), clustering
(one task), filtering (a task per shard), with WORKERS processes at a time.
Settings next to zerolm's: 20 bands of 5 hashes (100 in all), 64-bit xxhash
and n_grams=5 (datatrove's shingles are 5-word n-grams of its normalised
text; it does not verify candidates). Prints the wall seconds of the four stages.
  baseline_near_dedup.py SHARDS_DIR WORK_DIR WORKERS"""
import os
import sys
import time

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter,
                                              MinhashDedupSignature)
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.hashing import HashConfig

if __name__ == "__main__":
    shards, work, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tasks = len([f for f in os.listdir(shards) if f.endswith(".jsonl")])
    cfg = MinhashConfig(n_grams=5, num_buckets=20, hashes_per_bucket=5, hash_config=HashConfig(precision=64))
    w = lambda d: os.path.join(work, d)
    t0 = time.time()
    LocalPipelineExecutor(pipeline=[JsonlReader(shards, id_key="url"), MinhashDedupSignature(output_folder=w("sigs"), config=cfg)],
                          tasks=tasks, workers=workers, logging_dir=w("logs/sigs")).run()
    LocalPipelineExecutor(pipeline=[MinhashDedupBuckets(input_folder=w("sigs"), output_folder=w("buckets"), config=cfg)],
                          tasks=cfg.num_buckets, workers=workers, logging_dir=w("logs/buckets")).run()
    LocalPipelineExecutor(pipeline=[MinhashDedupCluster(input_folder=w("buckets"), output_folder=w("remove"), config=cfg)],
                          tasks=1, logging_dir=w("logs/cluster")).run()
    LocalPipelineExecutor(pipeline=[JsonlReader(shards, id_key="url"), MinhashDedupFilter(input_folder=w("remove")),
                                    JsonlWriter(w("kept"), compression=None)],
                          tasks=tasks, workers=workers, logging_dir=w("logs/filter")).run()
    print(f"{time.time() - t0:.3f}")
