#!/usr/bin/env bash
# JSONL read + "text" extraction and .bin/.idx write throughput, ours against
# the Python that Megatron's preprocess_data.py runs (json.loads per line;
# megatron-core's IndexedDatasetBuilder), on the same input, one core each.
# Checks first: both writers reproduce the Megatron fixture's .bin/.idx byte
# for byte (each side checks its own), and our extracted texts of every
# fixture line equal json.loads' (cmp).
#   tests/bench/bench_io.sh     (ZLM_BENCH_MB: corpus size, default 64; RUNS; SMOKE=1: 8 MB, one run)
source "$(dirname "$0")/lib.sh"
export ZLM_BENCH_MB=${ZLM_BENCH_MB:-$([[ $SMOKE == 1 ]] && echo 8 || echo 64)}
min_time=$([[ $SMOKE == 1 ]] && echo 0.01 || echo 2)
ZLM_BENCH_TEXTS_OUT="$work/ours.texts" taskset -c 0 "$BIN/zlm_bench_io" --benchmark_repetitions=$RUNS \
  --benchmark_min_time=$min_time --benchmark_format=json > "$work/ours.json" || fail "zlm_bench_io (checks its writer first)"
mbs() { calc "$(gbench_best "$work/ours.json" "$1" bytes_per_second) / 1e6"; }
ours_lines=$(mbs BM_JsonlReadLines) ours_extract=$(mbs BM_JsonlReadAndExtractText) ours_write=$(mbs BM_MegatronWrite)
corpus=$($PY -c 'import tempfile,os;print(os.path.join(tempfile.gettempdir(),"zlm_bench_corpus.jsonl"))')
result base_extract base_write -- taskset -c 0 $PY tests/bench/baseline_io.py "$corpus" \
  $DATA/megatron/meg-gpt2-openwebtext_text_document $DATA/megatron/openwebtext-1000.decoded.jsonl "$work/py.texts" $RUNS ||
  fail "baseline_io.py (checks its writer first)"
cmp "$work/ours.texts" "$work/py.texts" >&2 || fail "our extracted texts differ from json.loads'"
echo "| kernel, $ZLM_BENCH_MB MB corpus, best of $RUNS | zerolm MB/s (1 core) | Python baseline MB/s | ratio |"
echo "|---|---|---|---|"
printf "| JSONL read lines | %.0f | - | - |\n" "$ours_lines"
printf "| JSONL read + extract \"text\" | %.0f | %.0f (json.loads) | %.1fx |\n" "$ours_extract" "$base_extract" "$(calc "$ours_extract / $base_extract")"
printf "| .bin/.idx write | %.0f | %.0f (megatron-core builder) | %.1fx |\n" "$ours_write" "$base_write" "$(calc "$ours_write / $base_write")"
