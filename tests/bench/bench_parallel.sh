#!/usr/bin/env bash
# Tensor and pipeline parallelism on 2 CPU processes (Gloo), one core each:
# pretrain_gpt one process, TP 2 and PP 2 against PyTorch's own tensor
# parallelism (DTensor ColwiseParallel/RowwiseParallel) and pipelining
# (Schedule1F1B) on the same GPT-2 (tests/bench/baseline_parallel.py).
# Every side starts from the same weights (iteration 1 runs at LR 0 under a
# 1-iteration warm-up, so our 1-iteration checkpoint is the initial model) and
# reads the same samples; before any time is printed, every run's per-iteration
# losses must equal the one-process run's within rtol 1e-5. Prints seconds per
# iteration (mean after WARMUP), tokens/s and the ratios.
#   LAYERS=4 HIDDEN=256 ITERS=12 tests/bench/bench_parallel.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin} PY=.venv/bin/python DATA=tests/data/megatron
LAYERS=${LAYERS:-4} HIDDEN=${HIDDEN:-256} HEADS=${HEADS:-4} SEQ=${SEQ:-128} MICRO=${MICRO:-2} GLOBAL=${GLOBAL:-8}
ITERS=${ITERS:-12} WARMUP=${WARMUP:-2} LR=1e-4 CLIP=1.0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
ours() {  # ours NAME ITERS ARGS...
  local name=$1 iters=$2
  shift 2
  $BIN/pretrain_gpt --num-layers $LAYERS --hidden-size $HIDDEN --num-attention-heads $HEADS --seq-length $SEQ \
    --max-position-embeddings $SEQ --micro-batch-size $MICRO --global-batch-size $GLOBAL --train-iters $iters --lr $LR \
    --lr-warmup-iters 1 --lr-decay-style constant --clip-grad $CLIP --data-path $DATA/meg-gpt2-openwebtext_text_document \
    --vocab-file $DATA/gpt2-tiny-vocab.json --split 949,50,1 --log-interval 1 --eval-interval 100000 --eval-iters 0 \
    --hidden-dropout 0 --attention-dropout 0 --distributed-backend gloo --data-cache-path "$work/cache" \
    --save "$work/$name" "$@" > "$work/$name.log" 2>&1 || { echo "FAIL: $name"; tail "$work/$name.log"; exit 1; }
}
seconds() {  # mean seconds per iteration after WARMUP, from a metrics file
  $PY -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; t=[x.get('seconds_per_iteration', x.get('seconds')) for x in r if x.get('iteration',0)>$WARMUP and ('consumed_samples' in x or 'seconds' in x)]; print('%.4f' % (sum(t)/len(t)))" "$1"
}
ours init 1                       # the initial weights (LR 0)
ours one $ITERS
ours tp2 $ITERS --nproc-per-node 2 --tensor-model-parallel-size 2
ours pp2 $ITERS --nproc-per-node 2 --pipeline-model-parallel-size 2
index=$work/cache/meg-gpt2-openwebtext_text_document_train_indexmap_$((ITERS * GLOBAL))ns_${SEQ}sl_1234s
for mode in tp pp; do
  $PY tests/bench/baseline_parallel.py $mode "$work/init" $DATA/meg-gpt2-openwebtext_text_document "$index" \
    $LAYERS $HIDDEN $HEADS $SEQ $MICRO $GLOBAL $ITERS $LR $CLIP "$work/torch_$mode.jsonl" 2> "$work/torch_$mode.log" ||
    { echo "FAIL: PyTorch $mode"; tail -20 "$work/torch_$mode.log"; exit 1; }
done
# The check before any time: the same losses.
$PY tests/e2e/zero/compare_runs.py --losses-only --rtol 1e-5 --atol 0 "$work/one" "$work/tp2" "$work/pp2" >&2
$PY - "$work/one/metrics.jsonl" "$work/torch_tp.jsonl" "$work/torch_pp.jsonl" >&2 <<'PYEOF'
import json, sys
ref = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(sys.argv[1])) if "consumed_samples" in r}
for f in sys.argv[2:]:
    got = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(f))}
    worst = max(abs(got[i] - ref[i]) / abs(ref[i]) for i in ref)
    print(f"{'ok  ' if worst <= 1e-5 else 'FAIL'} {f}: {len(ref)} losses, worst relative difference {worst:.2e}")
    assert worst <= 1e-5, f
PYEOF
tokens=$((GLOBAL * SEQ))
one=$(seconds "$work/one/metrics.jsonl") tp2=$(seconds "$work/tp2/metrics.jsonl") pp2=$(seconds "$work/pp2/metrics.jsonl")
ttp=$(seconds "$work/torch_tp.jsonl") tpp=$(seconds "$work/torch_pp.jsonl")
echo "| GPT-2 $LAYERS layers, hidden $HIDDEN, seq $SEQ, global batch $GLOBAL (micro $MICRO), CPU, one core per process | s/iteration | tokens/s | PyTorch / zerolm |"
echo "|---|---|---|---|"
printf "| zerolm, 1 process | %.3f | %.0f | |\n" "$one" "$(awk "BEGIN {print $tokens / $one}")"
printf "| zerolm, TP 2 | %.3f | %.0f | %.2fx |\n" "$tp2" "$(awk "BEGIN {print $tokens / $tp2}")" "$(awk "BEGIN {print $ttp / $tp2}")"
printf "| PyTorch DTensor TP 2 (blocks split, embedding replicated) | %.3f | %.0f | |\n" "$ttp" "$(awk "BEGIN {print $tokens / $ttp}")"
printf "| zerolm, PP 2 (1F1B) | %.3f | %.0f | %.2fx |\n" "$pp2" "$(awk "BEGIN {print $tokens / $pp2}")" "$(awk "BEGIN {print $tpp / $pp2}")"
printf "| PyTorch pipelining PP 2 (Schedule1F1B) | %.3f | %.0f | |\n" "$tpp" "$(awk "BEGIN {print $tokens / $tpp}")"
