#!/usr/bin/env bash
# The optimizer step on the CPU, ours against DeepSpeed's CPU Adam (what
# ZeRO-Offload runs; its users report this step dominating their iterations,
# see docs/benchmarks.md) and PyTorch's fused AdamW, over the parameters of the same
# GPT-2: seconds per step (gradient norm, clipping, AdamW), parameters per
# second and the ratio. Ours is the ZeRO engine's step on one rank (stage 1),
# with and without --offload (master weights apart from the parameters, copied
# back after the step). DeepSpeed is installed into .venv on first use.
#   LAYERS=12 HIDDEN=1024 tests/bench/bench_optimizer.sh   (after `make bench`)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin} PY=.venv/bin/python
LAYERS=${LAYERS:-12} HIDDEN=${HIDDEN:-1024} HEADS=${HEADS:-16} VOCAB=${VOCAB:-50304} ITERS=${ITERS:-5}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
export THP_MEM_ALLOC_ENABLE=1  # what pretrain_gpt sets for itself; the Python side gets it too
[[ -x $BIN/zlm_bench_optimizer ]] || { echo "no $BIN/zlm_bench_optimizer: run \`make bench\` (it needs the trainer's torch)" >&2; exit 1; }
$PY -c 'import deepspeed' 2> /dev/null || $PY -m pip install -q deepspeed==0.19.8 >&2
secs() { sed -n 's/.*"seconds_per_step": \([0-9.e-]*\).*/\1/p'; }
ours=$($BIN/zlm_bench_optimizer --layers $LAYERS --hidden $HIDDEN --heads $HEADS --vocab $VOCAB --iters $ITERS | secs)
ours_off=$($BIN/zlm_bench_optimizer --layers $LAYERS --hidden $HIDDEN --heads $HEADS --vocab $VOCAB --iters $ITERS --offload | secs)
ds=$(DS_ACCELERATOR=cpu $PY tests/bench/baseline_optimizer.py deepspeed $LAYERS $HIDDEN $VOCAB $ITERS 2> /dev/null | secs)
pt=$($PY tests/bench/baseline_optimizer.py torch $LAYERS $HIDDEN $VOCAB $ITERS | secs)
n=$($BIN/zlm_bench_optimizer --layers $LAYERS --hidden $HIDDEN --heads $HEADS --vocab $VOCAB --iters 1 | sed 's/.*"params": \([0-9]*\).*/\1/')
echo "| optimizer step, GPT-2 $LAYERS layers, hidden $HIDDEN ($n parameters), $OMP_NUM_THREADS threads | s/step | M params/s | DeepSpeed CPU Adam / this |"
echo "|---|---|---|---|"
for row in "zerolm (stage 1, one rank):$ours" "zerolm with --cpu-offload:$ours_off" "DeepSpeedCPUAdam:$ds" "torch.optim.AdamW(fused=True):$pt"; do
  name=${row%:*} s=${row##*:}
  printf "| %s | %.3f | %.0f | %.2fx |\n" "$name" "$s" "$(echo "$n / $s / 1000000" | bc -l)" "$(echo "$ds / $s" | bc -l)"
done
