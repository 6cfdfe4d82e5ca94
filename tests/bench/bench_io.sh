#!/usr/bin/env bash
# JSONL read + .bin/.idx write throughput, ours vs the Python baseline that
# Megatron's preprocess_data.py uses (json.loads per line; megatron-core's
# IndexedDatasetBuilder), on the same input, one core each. Prints the ratio.
#   tests/bench/bench_io.sh      (after `make bench` built build/bin/zlm_bench_io)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin}
export ZLM_BENCH_MB=${ZLM_BENCH_MB:-64}
out=$(taskset -c 0 "$BIN/zlm_bench_io" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
      --benchmark_format=json 2>/dev/null)
ours_extract=$(echo "$out" | .venv/bin/python -c 'import json,sys; d=json.load(sys.stdin); print(max(b["bytes_per_second"] for b in d["benchmarks"] if b["name"].startswith("BM_JsonlReadAndExtractText") and b["aggregate_name"]=="median")/1e6)')
ours_lines=$(echo "$out" | .venv/bin/python -c 'import json,sys; d=json.load(sys.stdin); print(max(b["bytes_per_second"] for b in d["benchmarks"] if b["name"].startswith("BM_JsonlReadLines") and b["aggregate_name"]=="median")/1e6)')
ours_write=$(echo "$out" | .venv/bin/python -c 'import json,sys; d=json.load(sys.stdin); print(max(b["bytes_per_second"] for b in d["benchmarks"] if b["name"].startswith("BM_MegatronWrite") and b["aggregate_name"]=="median")/1e6)')
base=$(taskset -c 0 .venv/bin/python tests/bench/baseline_io.py "$(python3 -c 'import tempfile,os;print(os.path.join(tempfile.gettempdir(),"zlm_bench_corpus.jsonl"))')" tests/data/megatron/meg-gpt2-openwebtext_text_document 2>/dev/null)
base_extract=$(echo "$base" | cut -d' ' -f1)
base_write=$(echo "$base" | cut -d' ' -f2)
printf "| kernel | zerolm MB/s (1 core) | Python baseline MB/s | ratio |\n|---|---|---|---|\n"
printf "| JSONL read lines | %.0f | - | - |\n" "$ours_lines"
printf "| JSONL read + extract \"text\" | %.0f | %.0f (json.loads) | %.1fx |\n" "$ours_extract" "$base_extract" "$(echo "$ours_extract / $base_extract" | bc -l)"
printf "| .bin/.idx write | %.0f | %.0f (megatron-core builder) | %.1fx |\n" "$ours_write" "$base_write" "$(echo "$ours_write / $base_write" | bc -l)"
