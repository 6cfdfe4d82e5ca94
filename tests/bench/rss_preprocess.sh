#!/usr/bin/env bash
# Peak memory of preprocess_data does not grow with the input: RSS on a 100 MB
# and a 1 GB JSONL (the OpenWebText fixture repeated), 2 workers.
#   tests/bench/rss_preprocess.sh    (needs ~3 GB of free space in $TMPDIR)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin} DATA=tests/data
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| input | peak RSS | wall time |"
echo "|---|---|---|"
for mb in 100 1000; do
  reps=$(( mb * 1000000 / $(stat -c %s $DATA/megatron/openwebtext-1000.decoded.jsonl) + 1 ))
  for i in $(seq $reps); do cat $DATA/megatron/openwebtext-1000.decoded.jsonl; done > "$work/in.jsonl"
  /usr/bin/time -f "%M %e" -o "$work/time" "$BIN/preprocess_data" --input "$work/in.jsonl" --tokenizer-type GPT2BPETokenizer \
    --vocab-file $DATA/gpt2/gpt2-vocab.json --merge-file $DATA/gpt2/gpt2-merges.txt --append-eod --workers 2 \
    --output-prefix "$work/out" -q
  read -r kb secs < "$work/time"
  printf "| %d MB (%d docs) | %.0f MiB | %.1f s |\n" "$(( $(stat -c %s "$work/in.jsonl") / 1000000 ))" "$(wc -l < "$work/in.jsonl")" "$(echo "$kb/1024" | bc -l)" "$secs"
  rm -f "$work"/out_*
done
