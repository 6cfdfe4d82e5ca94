#!/usr/bin/env bash
# The GPU benchmark kit (run_gpu.sh) on CPU with tiny shapes (DRY=1), so that a
# session that gets the GPU machine does not spend its scarce time on a broken
# script: every part runs, every row has a figure, the baseline loop too.
#   dry_test.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
SRC=$1 BIN=$2 PY=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for part in 1 2 3 4; do
  mkdir -p "$out/$part"
  PART=$part DRY=1 BIN=$BIN PY=$PY OUT=$out/$part "$SRC/tests/bench/gpu/run_gpu.sh" > "$out/$part.log" 2>&1 ||
    { echo "FAIL: part $part"; tail -20 "$out/$part.log"; exit 1; }
  table=$out/$part/gpu_bench.md
  cat "$table"
  if grep -q 'failed' "$table"; then echo "FAIL: part $part has a failed row"; tail -n 5 "$out/$part/logs/"*.log; exit 1; fi
done
# Part 1: ours, PyTorch eager and compiled, for both models; parts 2 and 3: one row each;
# part 4: the optimizer step (ours on the device and offloaded, PyTorch's fused AdamW).
[[ $(grep -c '^| GPT-2 ' "$out/1/gpu_bench.md") == 6 ]]
grep -q 'PyTorch torch.compile' "$out/1/gpu_bench.md"
grep -q '1.5B' "$out/2/gpu_bench.md"
grep -q 'ZeRO-3 + CPU offload' "$out/3/gpu_bench.md"
[[ $(grep -c '^| zerolm on cpu\|^| torch.optim.AdamW' "$out/4/gpu_bench.md") == 3 ]]
echo "ok: the GPU kit runs (dry)"
