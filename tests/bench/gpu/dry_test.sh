#!/usr/bin/env bash
# The GPU benchmark kit (run_gpu.sh) on CPU with tiny shapes (DRY=1), so that a
# session that gets the GPU machine does not spend its scarce time on a broken
# script: every part runs within its budget, every row has a figure (or says
# why not), the baseline loop and the llm.c conversion too.
#   dry_test.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
SRC=$1 BIN=$2 PY=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for part in 0 1 2 3 4 5 6 7 8 9; do
  mkdir -p "$out/$part"
  start=$SECONDS
  PART=$part DRY=1 BIN=$BIN PY=$PY OUT=$out/$part "$SRC/tests/bench/gpu/run_gpu.sh" > "$out/$part.log" 2>&1 ||
    { echo "FAIL: part $part"; tail -20 "$out/$part.log"; exit 1; }
  table=$out/$part/gpu_bench.md
  cat "$table"
  echo "(part $part: $((SECONDS - start)) s)"
  if grep -q 'failed' "$table"; then echo "FAIL: part $part has a failed row"; tail -n 5 "$out/$part/logs/"*.log; exit 1; fi
done
grep -q 'label gpu tests | built' "$out/0/gpu_bench.md"
[[ $(grep -c '^| GPT-2 124M' "$out/1/gpu_bench.md") == 5 ]]
grep -q '^| GPT-2 124M.*--no-gradient-accumulation-fusion' "$out/1/gpu_bench.md"
grep -q '^| GPT-2 124M.*torch.compile\|^| GPT-2 124M.*skipped: no Python.h' "$out/1/gpu_bench.md"
grep -q '^| GPT-2 345M.*zerolm' "$out/2/gpu_bench.md"
[[ $(grep -c '^| GPT-2 345M' "$out/3/gpu_bench.md") == 2 ]]
grep -q '1.5B' "$out/4/gpu_bench.md"
grep -q 'ZeRO-3 + CPU offload' "$out/5/gpu_bench.md"
[[ $(grep -c '^| zerolm on cpu\|^| torch.optim.AdamW' "$out/6/gpu_bench.md") == 3 ]]
grep -q 'llm.c.*converted' "$out/7/gpu_bench.md"
[[ $(grep -c 'compute-sanitizer.*not run (dry' "$out/8/gpu_bench.md") == 2 ]]
grep -q '^| ProfilerStep#2 | [0-9.]* |' "$out/9/gpu_bench.md" && grep -q '^| matrix products | [0-9.]* |' "$out/9/gpu_bench.md"
grep -q '^| forward-backward | [0-9.]* |$' "$out/9/gpu_bench.md" && grep -q '^| optimizer | [0-9.]* |$' "$out/9/gpu_bench.md"
echo "ok: the GPU kit runs (dry)"
