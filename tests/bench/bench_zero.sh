#!/usr/bin/env bash
# pretrain_gpt data parallel with ZeRO on CPU (W processes over Gloo, one core
# each) against PyTorch's equivalent: DistributedDataParallel +
# ZeroRedundancyOptimizer (PyTorch's ZeRO-1) with fused AdamW, on the same GPT-2
# from the same initial weights and the same samples (tests/bench/baseline_parallel.py dp).
# Before any time is printed, every run's per-iteration losses must equal our
# one-process run's within rtol 1e-5, stages 0 and 1 must equal each other
# exactly, and so must stages 2 and 3. Every side runs RUNS times, interleaved;
# prints each side's best seconds per iteration (mean after WARMUP), tokens/s
# and the ratio, for our stages 0-3. (GPU figures: tests/bench/gpu/.)
#   WORLD=2 LAYERS=4 HIDDEN=256 tests/bench/bench_zero.sh    (SMOKE=1: 2 layers, hidden 64, 4 iterations)
source "$(dirname "$0")/lib.sh"
[[ $SMOKE == 1 ]] && { LAYERS=2 HIDDEN=64 ITERS=4 WARMUP=1; }
export WORLD=${WORLD:-2}
LAYERS=${LAYERS:-4} HIDDEN=${HIDDEN:-256} HEADS=${HEADS:-4} SEQ=${SEQ:-128} MICRO=${MICRO:-4} GLOBAL=${GLOBAL:-16}
ITERS=${ITERS:-20} WARMUP=${WARMUP:-5} LR=1e-4 CLIP=1.0
export OMP_NUM_THREADS=1
pretrain init 1
pretrain one $ITERS
for ((run = 0; run < RUNS; ++run)); do
  for stage in 0 1 2 3; do
    pretrain z$stage $ITERS --nproc-per-node $WORLD --zero-stage $stage
    keep_best z$stage "$work/z$stage/metrics.jsonl"
  done
  torch_baseline dp "$work/torch_dp.jsonl"
  keep_best torch "$work/torch_dp.jsonl"
  # The checks, on every run: the same losses as one process; bit for bit where the sums run
  # in the same order (stages 0 and 1 reduce once per step, stages 2 and 3 once per
  # micro-batch, so with accumulation the two pairs differ by rounding only).
  same_losses 1e-5 "$work/one/metrics.jsonl" "$work"/z{0,1,2,3}/metrics.jsonl "$work/torch_dp.jsonl" ||
    fail "the runs' losses differ"
  same_losses 0 "$work/z0/metrics.jsonl" "$work/z1/metrics.jsonl" || fail "stages 0 and 1 differ"
  same_losses 0 "$work/z2/metrics.jsonl" "$work/z3/metrics.jsonl" || fail "stages 2 and 3 differ"
done
tokens=$((GLOBAL * SEQ))
base=${BEST[torch]}
echo "| GPT-2 $LAYERS layers, hidden $HIDDEN, seq $SEQ, global batch $GLOBAL (micro $MICRO), $WORLD CPU processes (Gloo), best of $RUNS | s/iteration | tokens/s | PyTorch / zerolm |"
echo "|---|---|---|---|"
printf "| PyTorch DDP + ZeroRedundancyOptimizer(AdamW fused) | %.3f | %.0f | |\n" "$base" "$(calc "$tokens / $base")"
for stage in 0 1 2 3; do
  s=${BEST[z$stage]}
  printf "| zerolm pretrain_gpt --zero-stage %d | %.3f | %.0f | %.2fx |\n" $stage "$s" "$(calc "$tokens / $s")" "$(calc "$base / $s")"
done
