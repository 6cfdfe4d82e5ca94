#!/usr/bin/env bash
# GPT-2 tokenizer (one thread) and preprocess_data end to end, ours against
# tiktoken, Hugging Face tokenizers and a Megatron-style Python preprocess, on
# the same input: the 1000 OpenWebText fixture documents, 4.7 MB of distinct
# text (no repetition, so no side profits from a cache warmed by repeats).
# gigatoken (the fastest GPT-2 tokenizer published, Rust) is the bar: one Python
# call per document on one core, cold (a fresh tokenizer each pass) and warm.
# Checks first: our ids of every document against tiktoken's (in the kernel
# binary), tiktoken against tokenizers, gigatoken against tiktoken, and the
# .bin/.idx of both preprocess runs byte for byte.
#   tests/bench/bench_tokenizer.sh     (RUNS: best of, default 3; SMOKE=1: one run each)
source "$(dirname "$0")/lib.sh"
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false

# 1. Tokenizer, one thread: the cold first pass (a fresh piece cache; best of
#    repetitions) is the headline; the warm-cache pass is shown for context.
min_time=$([[ $SMOKE == 1 ]] && echo 0.01 || echo 2)
reps=$([[ $SMOKE == 1 ]] && echo 1 || echo 5)
taskset -c 0 "$BIN/zlm_bench_tokenizer" --benchmark_filter='BM_Gpt2Encode' --benchmark_min_time=$min_time \
  --benchmark_repetitions=$reps --benchmark_format=json > "$work/ours.json" 2> "$work/ours.err" ||
  { cat "$work/ours.err" >&2; fail "zlm_bench_tokenizer (its check against tiktoken's ids runs first)"; }
ours=$(calc "$(gbench_best "$work/ours.json" BM_Gpt2Encode bytes_per_second) / 1e6")
ours_warm=$(calc "$(gbench_best "$work/ours.json" BM_Gpt2EncodeWarmCache bytes_per_second) / 1e6")
result tk_first tk hf_first hf -- taskset -c 0 $PY tests/bench/baseline_tokenizer.py $DATA $((RUNS + 2)) ||
  fail "baseline_tokenizer.py"
result gt_cold gt_warm -- taskset -c 0 $PY tests/bench/baseline_gigatoken.py $DATA $reps || fail "baseline_gigatoken.py"
echo "### GPT-2 BPE encode, 1 thread, 1000 OpenWebText documents (4.7 MB, distinct text)"
echo "| tokenizer | MB/s (best of $reps) | first pass MB/s | zerolm speed-up |"
echo "|---|---|---|---|"
printf "| zerolm (fresh piece cache every pass) | %.1f | - | 1.0x |\n" "$ours"
printf "| tiktoken %s \`encode_ordinary\` | %.1f | %.1f | %.1fx |\n" "$($PY -c 'import tiktoken;print(tiktoken.__version__)')" \
  "$tk" "$tk_first" "$(calc "$ours / $tk")"
printf "| HF tokenizers %s | %.1f | %.1f | %.1fx |\n" "$($PY -c 'import tokenizers;print(tokenizers.__version__)')" \
  "$hf" "$hf_first" "$(calc "$ours / $hf")"
printf "| gigatoken %s \`Tokenizer.encode\` per document (a fresh tokenizer every pass) | %.1f | - | %.2fx |\n" \
  "$($PY -c 'import importlib.metadata as m;print(m.version("gigatoken"))')" "$gt_cold" "$(calc "$ours / $gt_cold")"
printf "| (zerolm, piece cache warm from an earlier pass over the same text) | %.1f | - | - |\n" "$ours_warm"
printf "| (gigatoken, warm from an earlier pass over the same text) | %.1f | - | %.2fx |\n" "$gt_warm" "$(calc "$ours_warm / $gt_warm")"

# 2. preprocess_data end to end (same JSONL, full GPT-2 vocab, --append-eod); each
#    process starts cold, so its start-up (vocab load) is inside the time on both sides.
#    Input and outputs on tmpfs where there is one (/dev/shm), for both sides: the tools' own
#    cost, not the disk's (ours fsyncs its outputs before renaming them; on this machine's disk
#    that alone moved a run by tens of milliseconds).
io=$work
if [[ -d /dev/shm && -w /dev/shm ]] && shm=$(mktemp -d -p /dev/shm); then
  io=$shm
  trap 'rm -rf "$work" "$io"' EXIT
fi
cp $DATA/megatron/openwebtext-1000.decoded.jsonl "$io/in.jsonl"
mb=$(calc "$(stat -c %s "$io/in.jsonl") / 1000000")
docs=$(wc -l < "$io/in.jsonl")
text_mb=$($PY -c 'import json,sys; print(sum(len(json.loads(l)["text"].encode()) for l in open(sys.argv[1])) / 1e6)' "$io/in.jsonl")
echo
echo "### preprocess_data end to end, $docs documents, $(printf %.1f "$mb") MB (best of $RUNS; files on $([[ $io == /dev/shm/* ]] && echo tmpfs || echo disk))"
echo "| workers | zerolm docs/s | zerolm MB/s | Python (Megatron-style) docs/s | Python MB/s | speed-up |"
echo "|---|---|---|---|---|---|"
for w in 1 2; do
  cpus=0; [[ $w == 2 ]] && cpus=0,1
  py_s=""
  for ((run = 0; run < RUNS; ++run)); do
    result s _ -- taskset -c $cpus $PY tests/bench/baseline_preprocess.py "$io/in.jsonl" $DATA/gpt2/gpt2-vocab.json \
                    $DATA/gpt2/gpt2-merges.txt "$io/py" $w || fail "baseline_preprocess.py"
    py_s=$(min_of "$py_s" "$s")
    sleep 1  # let the baseline's worker processes exit
  done
  ours_s=$(best_of taskset -c $cpus "$BIN/preprocess_data" --input "$io/in.jsonl" --tokenizer-type GPT2BPETokenizer \
      --vocab-file $DATA/gpt2/gpt2-vocab.json --merge-file $DATA/gpt2/gpt2-merges.txt --append-eod \
      --workers $w --output-prefix "$io/ours" -q)
  cmp -s "$io/ours_text_document.bin" "$io/py.bin" && cmp -s "$io/ours_text_document.idx" "$io/py.idx" ||
    fail "preprocess_data's .bin/.idx differ from the Python baseline's"
  printf "| %d | %.0f | %.1f | %.0f | %.1f | %.1fx |\n" $w "$(calc "$docs / $ours_s")" "$(calc "$mb / $ours_s")" \
    "$(calc "$docs / $py_s")" "$(calc "$mb / $py_s")" "$(calc "$py_s / $ours_s")"
done
# The issue's bar: preprocess_data with one worker within 20% of the tokenizer alone, i.e. the
# tokenizer's time for the same text (its best cold pass above) at least 0.8 of the whole run's.
# Its start-up (a run over the first document alone: loading the libraries and the saved model,
# opening and renaming the outputs) is shown apart, and the ratio without it: what a long input
# sees, where the start-up is spent once. The tokenizer's figure is the best of its benchmark
# repetitions, each a mean over seconds; one run here is 50-90 ms, and this machine's speed
# switches between two modes for seconds at a time, so these runs are more (10, alternating the
# whole input and the one document) for their best to come from the same mode as often.
head -n 1 "$io/in.jsonl" > "$io/one.jsonl"
ratio_runs=$([[ $SMOKE == 1 ]] && echo 1 || echo $((RUNS > 10 ? RUNS : 10)))
pp_run() {
  taskset -c 0 "$BIN/preprocess_data" --input "$1" --tokenizer-type GPT2BPETokenizer --vocab-file $DATA/gpt2/gpt2-vocab.json \
    --merge-file $DATA/gpt2/gpt2-merges.txt --append-eod --workers 1 --output-prefix "$2" -q
}
ours1_s="" start_s=""
for ((run = 0; run < ratio_runs; ++run)); do
  ours1_s=$(min_of "$ours1_s" "$(RUNS=1 best_of pp_run "$io/in.jsonl" "$io/ours")")
  start_s=$(min_of "$start_s" "$(RUNS=1 best_of pp_run "$io/one.jsonl" "$io/one")")
done
tok_s=$(calc "$text_mb / $ours")
printf "\npreprocess_data, 1 worker, end to end (start-up included; best of %d): %.1f ms; the tokenizer alone on its %.2f MB of text: %.1f ms; ratio %.2f (bar: 0.80)\n" \
  "$ratio_runs" "$(calc "$ours1_s * 1000")" "$text_mb" "$(calc "$tok_s * 1000")" "$(calc "$tok_s / $ours1_s")"
printf "its start-up (one document): %.1f ms; without it: %.1f ms, ratio %.2f\n" "$(calc "$start_s * 1000")" \
  "$(calc "($ours1_s - $start_s) * 1000")" "$(calc "$tok_s / ($ours1_s - $start_s)")"
