#!/usr/bin/env bash
# Colossal-AI's two GPT-2 training configs as README.md translates them (blocks colossalai-hybrid:
# gpt2_pp1d.py, pipeline 2 x 1D tensor parallel 2 on 4 ranks; colossalai-zero3: gpt2_zero3.py, ZeRO-3
# with parameters and optimizer in CPU memory under torchrun), over small data.
# Changes, all sizes and counts: train_data.json is 300 OpenWebText documents; --num-layers
# 12->4 (hybrid: 2 per stage) or 2 (zero3), --hidden-size 768->64, --num-attention-heads 12->4,
# --seq-length and --max-position-embeddings 1024->64, --train-iters 10000->4, --log-interval 10->1,
# --eval-interval 500->4, --eval-iters 10->1.
# Checks: preprocess_data used GPT-2's own files (no flag given); the hybrid run forms the
# 2 x 2 grid and saves its four parts; the ZeRO-3 run offloads parameters and optimizer; both
# start at about ln(50257) (GPT-2's vocabulary) and stay finite.
#   colossalai_training.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
source "$(dirname "$0")/common.sh"
head -300 $DATA/megatron/openwebtext-1000.decoded.jsonl > train_data.json
small=(--flag --num-layers 4 --flag --hidden-size 64 --flag --num-attention-heads 4 --flag --seq-length 64
       --flag --max-position-embeddings 64 --flag --train-iters 4 --flag --log-interval 1 --flag --eval-interval 4
       --flag --eval-iters 1)
first_loss_is_uniform() {  # the first logged loss is within 1.0 of ln(50257) = 10.825 and every loss is finite
  losses "$1" | "$PY" -c 'import math,sys
v = [float(l.split()[1]) for l in sys.stdin]
assert v and all(math.isfinite(x) for x in v), v
assert abs(v[0] - math.log(50257)) < 1.0, v' || fail "$1: unexpected losses: $(losses "$1" | tr '\n' ' ')"
}

tutorial colossalai-hybrid "${small[@]}"
log=colossalai-hybrid.log
grep -q "preprocess_data.*no --vocab-file/--merge-file given: GPT-2's own, .*share/zerolm/gpt2/gpt2-vocab.json" $log || fail "preprocess_data did not use the installed GPT-2 files"
grep -q 'initialized tensor model parallel with size 2' $log && grep -q 'initialized pipeline model parallel with size 2' $log ||
  fail "not a 2 x 2 tensor x pipeline grid"
for part in 00_000 01_000 00_001 01_001; do
  [[ -f checkpoints/gpt2_pp1d/iter_0000004/mp_rank_$part/model_optim_rng.pt ]] || fail "no checkpoint part mp_rank_$part"
done
first_loss_is_uniform checkpoints/gpt2_pp1d/metrics.jsonl

tutorial colossalai-zero3 "${small[@]}" --flag --num-layers 2
log=colossalai-zero3.log
grep -q 'ZeRO stage 3 over 1 data-parallel rank, CPU offload on (parameters too)' $log || fail "not ZeRO-3 with both offloads"
first_loss_is_uniform checkpoints/gpt2_zero3/metrics.jsonl
echo "colossalai-training: ok"
