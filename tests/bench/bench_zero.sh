#!/usr/bin/env bash
# pretrain_gpt data parallel with ZeRO on CPU (W processes over Gloo) vs the
# PyTorch equivalent in Python: DistributedDataParallel + ZeroRedundancyOptimizer
# (ZeRO-1) on Hugging Face's GPT2LMHeadModel of the same shape, same batch,
# accumulation and clipping (tests/bench/baseline_zero.py). One core per
# process. Prints seconds per iteration, tokens/s and the ratio, and ours for
# stages 0-3. (The GPU figures need the GPU machine; see docs/benchmarks.md.)
#   WORLD=2 LAYERS=4 HIDDEN=256 tests/bench/bench_zero.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin} PY=.venv/bin/python DATA=tests/data/megatron
WORLD=${WORLD:-2} LAYERS=${LAYERS:-4} HIDDEN=${HIDDEN:-256} HEADS=${HEADS:-4} SEQ=${SEQ:-128} MICRO=${MICRO:-4} GLOBAL=${GLOBAL:-16}
ITERS=${ITERS:-20} WARMUP=5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
ours() {  # ours STAGE -> seconds per iteration over iterations WARMUP+1..ITERS
  $BIN/pretrain_gpt --num-layers $LAYERS --hidden-size $HIDDEN --num-attention-heads $HEADS --seq-length $SEQ \
    --max-position-embeddings $SEQ --micro-batch-size $MICRO --global-batch-size $GLOBAL --train-iters $ITERS --lr 1e-4 \
    --clip-grad 1.0 --data-path $DATA/meg-gpt2-openwebtext_text_document --vocab-file $DATA/gpt2-tiny-vocab.json \
    --split 949,50,1 --log-interval $WARMUP --eval-interval 100000 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 \
    --distributed-backend gloo --data-cache-path "$work/cache" --nproc-per-node $WORLD --zero-stage "$@" > "$work/ours.log" 2>&1
  # The mean of the intervals after the first (warm-up) one.
  grep ' iteration ' "$work/ours.log" | tail -n +2 | sed 's/.*per iteration (s): \([0-9.]*\).*/\1/' | awk '{s+=$1; n++} END {printf "%.4f\n", s/n}'
}
tokens=$((GLOBAL * SEQ))
base=$($PY tests/bench/baseline_zero.py $WORLD $LAYERS $HIDDEN $HEADS $SEQ 5120 $MICRO $GLOBAL $ITERS $WARMUP)
echo "| GPT-2 $LAYERS layers, hidden $HIDDEN, seq $SEQ, global batch $GLOBAL (micro $MICRO), $WORLD CPU processes (Gloo) | s/iteration | tokens/s |"
echo "|---|---|---|"
printf "| PyTorch DDP + ZeroRedundancyOptimizer (Python, HF GPT2LMHeadModel) | %.3f | %.0f |\n" "$base" "$(echo "$tokens/$base" | bc -l)"
for stage in 0 1 2 3; do
  s=$(ours $stage)
  printf "| zerolm pretrain_gpt --zero-stage %d | %.3f | %.0f |\n" $stage "$s" "$(echo "$tokens/$s" | bc -l)"
  [[ $stage == 1 ]] && one=$s
done
printf "speed-up of ZeRO-1 over PyTorch's ZeRO-1: %.2fx\n" "$(echo "$base/$one" | bc -l)"
