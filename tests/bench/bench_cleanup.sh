#!/usr/bin/env bash
# cleanup vs a Python baseline of Megatron's cleanup_dataset.py (ftfy + seeded
# langdetect + GPT-2 token count) on the same documents (the 1000 OpenWebText
# fixture texts), one core each. Prints docs/s and the per-core ratio. The
# baseline times its loop only (no start-up); ours runs the texts REPEAT times
# (default 8) in one process so that start-up (vocab load, tables) is amortised.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin} PY=.venv/bin/python DATA=tests/data
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
awk '{sub(/^\{/, "{\"url\": \"u" NR "\", "); print}' $DATA/megatron/openwebtext-1000.decoded.jsonl > "$work/in.jsonl"
docs=$(wc -l < "$work/in.jsonl")
for i in $(seq ${REPEAT:-8}); do cat "$work/in.jsonl"; done > "$work/in_rep.jsonl"
ours_docs=$(wc -l < "$work/in_rep.jsonl")
best=999999
for run in 1 2 3; do
  t0=$(date +%s.%N)
  taskset -c 0 "$BIN/cleanup" "$work/in_rep.jsonl" "$work/out.jsonl" --vocab-file $DATA/gpt2/gpt2-vocab.json \
    --merge-file $DATA/gpt2/gpt2-merges.txt --workers 1 -q
  t1=$(date +%s.%N)
  best=$(echo "t=$t1 - $t0; if (t < $best) t else $best" | bc -l)
done
read -r py_s py_docs py_kept < <(taskset -c 0 $PY tests/bench/baseline_cleanup.py "$work/in.jsonl" $DATA/gpt2/gpt2-vocab.json $DATA/gpt2/gpt2-merges.txt)
echo "| cleanup, 1 core, $docs OpenWebText documents | docs/s | kept |"
echo "|---|---|---|"
printf "| zerolm cleanup (fix_text + CLD2 + GPT-2 count) | %.0f | %d of %d |\n" "$(echo "$ours_docs/$best" | bc -l)" "$(wc -l < "$work/out.jsonl")" "$ours_docs"
printf "| Python (ftfy + langdetect + tiktoken), as cleanup_dataset.py | %.0f | %d of %d |\n" "$(echo "$py_docs/$py_s" | bc -l)" "$py_kept" "$py_docs"
printf "speed-up per core: %.1fx\n" "$(echo "($ours_docs/$best) / ($py_docs/$py_s)" | bc -l)"
