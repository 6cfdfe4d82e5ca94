#!/usr/bin/env bash
# `make demo`: runs the part of the zerolm pipeline that exists today on the
# sample data bundled in tests/data (Megatron-made fixtures, OpenWebText text;
# provenance in tests/data/megatron/PROVENANCE.md). Outputs go to demo-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin
OUT=demo-out
rm -rf "$OUT" && mkdir -p "$OUT/shards"
say() { printf '\n==> %s\n' "$*" >&2; }
t0=$(date +%s.%N)

if [[ -x $BIN/preprocess_data ]]; then
  say "preprocess_data: GPT-2 BPE tokenization of 1000 OpenWebText documents (tiny vocab), 2 workers"
  $BIN/preprocess_data --input tests/data/megatron/openwebtext-1000.decoded.jsonl --json-keys text \
    --tokenizer-type GPT2BPETokenizer --vocab-file tests/data/megatron/gpt2-tiny-vocab.json \
    --merge-file tests/data/megatron/gpt2-tiny-merges.txt --append-eod --workers 2 \
    --output-prefix "$OUT/owt" --stats-out "$OUT/preprocess_stats.json"
  if cmp -s "$OUT/owt_text_document.bin" tests/data/megatron/meg-gpt2-openwebtext_text_document.bin &&
     cmp -s "$OUT/owt_text_document.idx" tests/data/megatron/meg-gpt2-openwebtext_text_document.idx; then
    echo "byte-identical to Megatron's preprocess_data.py output: yes" >&2
  else
    echo "byte-identical to Megatron's preprocess_data.py output: NO" >&2; exit 1
  fi
  cp "$OUT/owt_text_document".* "$OUT/shards/"
else
  cp tests/data/megatron/meg-gpt2-openwebtext_text_document.* "$OUT/shards/"
fi

say "merge_datasets: merging two Megatron datasets (int32 ag_news inputs + targets)"
mkdir -p "$OUT/agnews"
cp tests/data/megatron/ag_news_prompt_*_document.* "$OUT/agnews/"
$BIN/merge_datasets --input "$OUT/agnews" --output-prefix "$OUT/agnews_merged" --stats-out "$OUT/merge_stats.json"

say "dataset_info: summary and integrity check of the OpenWebText dataset"
$BIN/dataset_info "$OUT/shards/$(ls "$OUT/shards" | head -1 | sed 's/\.[a-z]*$//')" --vocab-size 5000

say "dataset_info: first 20 token ids of document 0"
$BIN/dataset_info "$OUT/shards/$(ls "$OUT/shards" | head -1 | sed 's/\.[a-z]*$//')" --doc 0 | cut -d' ' -f1-20

t1=$(date +%s.%N)
printf '\ndemo finished in %.1f s; outputs in %s/\n' "$(echo "$t1 - $t0" | bc -l)" "$OUT" >&2
