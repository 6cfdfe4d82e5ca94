#!/usr/bin/env bash
# Tensor and pipeline parallelism on 2 CPU processes (Gloo), one core each:
# pretrain_gpt one process, TP 2 and PP 2 against PyTorch's own tensor
# parallelism (DTensor ColwiseParallel/RowwiseParallel) and pipelining
# (Schedule1F1B) on the same GPT-2 (tests/bench/baseline_parallel.py).
# Every side starts from the same weights (iteration 1 runs at LR 0 under a
# 1-iteration warm-up, so our 1-iteration checkpoint is the initial model) and
# reads the same samples; before any time is printed, every run's per-iteration
# losses must equal the one-process run's within rtol 1e-5. Every side runs RUNS
# times, interleaved; prints each side's best seconds per iteration (mean after
# WARMUP), tokens/s and the ratios.
#   LAYERS=4 HIDDEN=256 ITERS=12 tests/bench/bench_parallel.sh    (SMOKE=1: 2 layers, hidden 64, 4 iterations)
source "$(dirname "$0")/lib.sh"
[[ $SMOKE == 1 ]] && { LAYERS=2 HIDDEN=64 ITERS=4 WARMUP=1; }
LAYERS=${LAYERS:-4} HIDDEN=${HIDDEN:-256} HEADS=${HEADS:-4} SEQ=${SEQ:-128} MICRO=${MICRO:-2} GLOBAL=${GLOBAL:-8}
ITERS=${ITERS:-12} WARMUP=${WARMUP:-2} LR=1e-4 CLIP=1.0
export OMP_NUM_THREADS=1
pretrain init 1                       # the initial weights (LR 0)
for ((run = 0; run < RUNS; ++run)); do
  pretrain one $ITERS
  pretrain tp2 $ITERS --nproc-per-node 2 --tensor-model-parallel-size 2
  pretrain pp2 $ITERS --nproc-per-node 2 --pipeline-model-parallel-size 2
  torch_baseline tp "$work/torch_tp.jsonl"
  torch_baseline pp "$work/torch_pp.jsonl"
  # The check before any time, on every run: the same losses.
  same_losses 1e-5 "$work/one/metrics.jsonl" "$work/tp2/metrics.jsonl" "$work/pp2/metrics.jsonl" \
    "$work/torch_tp.jsonl" "$work/torch_pp.jsonl" || fail "the runs' losses differ"
  keep_best one "$work/one/metrics.jsonl"
  keep_best tp2 "$work/tp2/metrics.jsonl"
  keep_best pp2 "$work/pp2/metrics.jsonl"
  keep_best ttp "$work/torch_tp.jsonl"
  keep_best tpp "$work/torch_pp.jsonl"
done
tokens=$((GLOBAL * SEQ))
one=${BEST[one]} tp2=${BEST[tp2]} pp2=${BEST[pp2]} ttp=${BEST[ttp]} tpp=${BEST[tpp]}
echo "| GPT-2 $LAYERS layers, hidden $HIDDEN, seq $SEQ, global batch $GLOBAL (micro $MICRO), CPU, one core per process, best of $RUNS | s/iteration | tokens/s | PyTorch / zerolm |"
echo "|---|---|---|---|"
printf "| zerolm, 1 process | %.3f | %.0f | |\n" "$one" "$(calc "$tokens / $one")"
printf "| zerolm, TP 2 | %.3f | %.0f | %.2fx |\n" "$tp2" "$(calc "$tokens / $tp2")" "$(calc "$ttp / $tp2")"
printf "| PyTorch DTensor TP 2 (blocks split, embedding replicated) | %.3f | %.0f | |\n" "$ttp" "$(calc "$tokens / $ttp")"
printf "| zerolm, PP 2 (1F1B) | %.3f | %.0f | %.2fx |\n" "$pp2" "$(calc "$tokens / $pp2")" "$(calc "$tpp / $pp2")"
printf "| PyTorch pipelining PP 2 (Schedule1F1B) | %.3f | %.0f | |\n" "$tpp" "$(calc "$tokens / $tpp")"
