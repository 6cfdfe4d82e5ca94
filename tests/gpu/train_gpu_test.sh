#!/usr/bin/env bash
# pretrain_gpt on one CUDA device (label gpu; `make test` and CI leave it out).
# A small GPT-2 (4 layers, hidden 256, seq 256, GPT-2's vocabulary padded to
# 50304, so the loss runs the fused kernel's shape; the tiny vocabulary for 1),
# dropout off:
#  1. tracking: the same initial weights (--use-cpu-initialization) and data,
#     100 iterations; fp32 (TF32 matrix products), bf16 and fp16 (static loss
#     scale, so no step is skipped) on the GPU against fp32 on the CPU: every
#     iteration's loss within TRACK_TOL (relative: 1% for fp32, 2% for the
#     16-bit runs);
#  2. ZeRO on one GPU, bf16, 10 iterations, under --deterministic-mode (the
#     same run twice is bit for bit equal; without the mode, whether it is
#     is reported): stages 1, 2 and 3 equal stage 0 bit for bit (losses,
#     weights, Adam moments), as on the CPU (2 and 3 against stage 0 without
#     the gradient-accumulation fusion, which only stages 0 and 1 can use; with
#     and without it, losses within 1e-2); the optimizer offloaded to the
#     CPU at stages 2 and 3, and the parameters too at stage 3, equal each
#     other bit for bit, and stage 0's losses within 1e-2 (relative: the
#     host's AdamW rounds otherwise than the device's, and bf16 weights
#     amplify it);
#  3. NCCL alone (ZLM_PROCESS_GROUP_ALONE=1: every group of one rank goes
#     through ProcessGroupNCCL): stages 0 and 3 equal the local runs bit for bit;
#  4. exact resume on the GPU: --exit-interval 5 then --load, bit for bit the
#     uninterrupted run (stage 0, and stage 3 with both offloads);
#  5. a tiny model trained on the GPU is left in OUT/gpu_ckpt.tar.gz for
#     generate_gpt and convert_gpt (CPU tools) to be run on it.
# Every check runs even when an earlier one fails; the figures go to stdout and
# OUT/train_gpu_test.md. DEVICE=cpu runs the same script on the CPU (16-bit
# runs under ZLM_CPU_MIXED_PRECISION, fewer iterations): the dry run of it.
#   train_gpu_test.sh SOURCE_DIR BIN_DIR PYTHON [OUT]
set -uo pipefail
SRC=$(cd "$1" && pwd) BIN=$(cd "$2" && pwd) PY=$3 OUT=${4:-$(mktemp -d)}
mkdir -p "$OUT"
[[ $PY == */* ]] && PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
DATA=$SRC/tests/data/megatron
CMP="$PY $SRC/tests/e2e/zero/compare_runs.py"
DEVICE=${DEVICE:-cuda}
ITERS=100 SHORT=10 LAYERS=4 HIDDEN=256 SEQ=256
if [[ $DEVICE == cpu ]]; then
  export ZLM_CPU_MIXED_PRECISION=1 OMP_NUM_THREADS=1
  ITERS=6 SHORT=4 LAYERS=2 HIDDEN=64 SEQ=32
fi
report=$OUT/train_gpu_test.md
echo "| check | result |" > "$report"
echo "|---|---|" >> "$report"
failed=0
note() { echo "| $1 | $2 |" | tee -a "$report"; }
common=(--num-layers $LAYERS --hidden-size $HIDDEN --num-attention-heads 8 --seq-length $SEQ --max-position-embeddings $SEQ
        --micro-batch-size 4 --global-batch-size 16 --lr 1e-3 --lr-warmup-iters 5 --min-lr 1e-4 --lr-decay-style cosine
        --weight-decay 0.01 --clip-grad 1.0 --data-path $DATA/meg-gpt2-openwebtext_text_document
        --vocab-file $SRC/tests/data/gpt2/gpt2-vocab.json --split 949,50,1 --log-interval 1 --eval-interval 100000
        --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --seed 1234 --data-cache-path $W/cache)
run() {  # run NAME DEVICE ARGS...: a --save run; its log (LOG, else NAME.log) in OUT/logs
  local name=$1 dev=$2 log=${LOG:-$1.log}
  shift 2
  if ! $BIN/pretrain_gpt "${common[@]}" --device "$dev" --save "$name" "$@" > "$log" 2>&1; then
    note "$name" "FAILED to run: $(grep -m1 -i 'error' "$log" | cut -c1-200)"
    failed=1
  fi
  mkdir -p "$OUT/logs" && cp "$log" "$OUT/logs/"
}
compare() {  # compare TITLE compare_runs-ARGS...: one row with its figures
  local title=$1 res
  shift
  res=$($CMP "$@" 2>&1)
  local rc=$?
  note "$title" "$([[ $rc == 0 ]] && echo ok || echo FAIL): $(echo "$res" | sed "s|$W/||g" | tr '\n' ';' | cut -c1-600)"
  ((rc == 0)) || failed=1
}
# The largest relative loss difference per iteration, against TOL.
track() {  # track TITLE REF RUN TOL
  local res
  res=$($PY - "$2" "$3" "$4" <<'PYEOF'
import json, sys
def losses(d):
    return {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(d + "/metrics.jsonl")) if "lr" in r}
ref, got, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
its = sorted(set(ref) & set(got))
if len(its) < len(ref) or any(got[i] is None for i in its):
    print(f"FAIL: {len(its)} of {len(ref)} iterations, {sum(got[i] is None for i in its)} skipped"); sys.exit(1)
rel = [abs(got[i] - ref[i]) / abs(ref[i]) for i in its]
worst = max(range(len(its)), key=lambda k: rel[k])
last = its[-1]
print(f"{'ok' if rel[worst] <= tol else 'FAIL'}: max relative difference {rel[worst]:.2e} at iteration {its[worst]} (tolerance {tol:g}); "
      f"loss at {its[0]}: {ref[its[0]]:.4f} vs {got[its[0]]:.4f}, at {last}: {ref[last]:.4f} vs {got[last]:.4f}")
sys.exit(0 if rel[worst] <= tol else 1)
PYEOF
)
  local rc=$?
  note "$1" "$res"
  ((rc == 0)) || failed=1
}
# ONLY="track zero pg resume ckpt": the sections to run (all by default).
want() { [[ -z "${ONLY:-}" || " $ONLY " == *" $1 "* ]]; }
start=$SECONDS
# 1. tracking, with the tiny vocabulary (5,000 entries, padded to 5,120): the CPU reference's 100
#    iterations then take about a minute on a GPU machine's cores, beside the GPU runs.
cpu_pid=
if want track; then
  full=("${common[@]}")
  for i in "${!common[@]}"; do [[ ${common[i]} == */gpt2-vocab.json ]] && common[i]=$DATA/gpt2-tiny-vocab.json; done
  tiny=(--use-cpu-initialization)
  run cpu_fp32 cpu --train-iters $ITERS "${tiny[@]}" &
  cpu_pid=$!
  run gpu_fp32 $DEVICE --train-iters $ITERS "${tiny[@]}"
  run gpu_bf16 $DEVICE --train-iters $ITERS "${tiny[@]}" --bf16
  run gpu_fp16 $DEVICE --train-iters $ITERS "${tiny[@]}" --fp16 --loss-scale 1024
  grep -m1 -h 'memory plan per rank' gpu_bf16.log | cut -c1-200
  common=("${full[@]}")
fi
if want zero; then
# 2. ZeRO stages and offload, bf16, under --deterministic-mode (whether a plain run repeats its own
#    bits on the GPU is reported too: SDPA's and cuBLAS's defaults need not).
run nd_a $DEVICE --train-iters $SHORT --bf16
run nd_b $DEVICE --train-iters $SHORT --bf16
common+=(--deterministic-mode)
run z0 $DEVICE --train-iters $SHORT --bf16 --zero-stage 0
run z0_again $DEVICE --train-iters $SHORT --bf16 --zero-stage 0
# Stages 0 and 1 add the linear layers' weight gradients in fp32 inside the GEMM (Megatron's
# gradient-accumulation fusion, on by default); stages 2 and 3, which shard the gradients, have no
# fp32 buffer to add into. So 2 and 3 are compared with stage 0 without the fusion.
for z in 1 2 3; do run z$z $DEVICE --train-iters $SHORT --bf16 --zero-stage $z; done
run z0_unfused $DEVICE --train-iters $SHORT --bf16 --zero-stage 0 --no-gradient-accumulation-fusion
run z2_off $DEVICE --train-iters $SHORT --bf16 --zero-stage 2 --cpu-offload
run z3_off $DEVICE --train-iters $SHORT --bf16 --zero-stage 3 --cpu-offload
run z3_offp $DEVICE --train-iters $SHORT --bf16 --zero-stage 3 --cpu-offload --offload-params
res=$($CMP --rtol 0 --atol 0 nd_a nd_b 2>&1)
note "without --deterministic-mode: the same run twice (a report, not a check)" "$(echo "$res" | tr '\n' ';' | cut -c1-300)"
compare "--deterministic-mode: the same run twice, bit for bit" --rtol 0 --atol 0 z0 z0_again
compare "ZeRO 1 vs 0, bf16, bit for bit" --rtol 0 --atol 0 z0 z1
compare "ZeRO 2, 3 vs 0 without the gradient-accumulation fusion, bf16, bit for bit" --rtol 0 --atol 0 z0_unfused z2 z3
compare "ZeRO 0 with the gradient-accumulation fusion vs without, losses within 1e-2" --losses-only --rtol 1e-2 --atol 0 z0_unfused z0
compare "offload: ZeRO-3 (optimizer; optimizer and parameters) vs ZeRO-2 offload, bit for bit" --rtol 0 --atol 0 z2_off z3_off z3_offp
compare "offload vs ZeRO 0, losses within 1e-2" --losses-only --rtol 1e-2 --atol 0 z0 z2_off z3_offp
fi
if want pg; then
# 3. NCCL alone: the same runs through the process group.
backend=()
[[ $DEVICE == cpu ]] && backend=(--distributed-backend gloo)
for z in 0 3; do
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29600 + z)) ZLM_PROCESS_GROUP_ALONE=1 run pg_z$z $DEVICE --train-iters $SHORT --bf16 --zero-stage $z "${backend[@]}"
done
compare "NCCL alone vs local, ZeRO 0" --rtol 0 --atol 0 z0 pg_z0
compare "NCCL alone vs local, ZeRO 3" --rtol 0 --atol 0 z3 pg_z3
want=nccl
[[ $DEVICE == cpu ]] && want=gloo
for z in 0 3; do
  line=$(grep -m1 -o 'initialized data parallel with size [0-9]* ([a-z]* backend' pg_z$z.log)
  [[ $line == *"($want backend" ]] || failed=1
  note "pg_z$z: a process group of one rank" "$([[ $line == *"($want backend" ]] && echo ok || echo FAIL): ${line:-no process group line}"
done
fi
if want resume; then
# 4. resume.
for v in "z0 --zero-stage 0" "z3_offp --zero-stage 3 --cpu-offload --offload-params"; do
  read -r name flags <<< "$v"
  LOG=part1_$name.log run part_$name $DEVICE --train-iters $SHORT --bf16 $flags --exit-interval $((SHORT / 2))
  LOG=part2_$name.log run part_$name $DEVICE --train-iters $SHORT --bf16 $flags --load part_$name
done
compare "resume vs uninterrupted, ZeRO 0, bit for bit" --rtol 0 --atol 0 z0 part_z0
compare "resume vs uninterrupted, ZeRO 3 + offload, bit for bit" --rtol 0 --atol 0 z3_offp part_z3_offp
fi
if want ckpt; then
# 5. a tiny GPU-trained model for the CPU tools.
$BIN/pretrain_gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 \
  --micro-batch-size 4 --global-batch-size 8 --train-iters 20 --lr 3e-3 --data-path $DATA/meg-gpt2-openwebtext_text_document \
  --vocab-file $DATA/gpt2-tiny-vocab.json --split 949,50,1 --log-interval 5 --eval-interval 100000 --eval-iters 0 \
  --seed 1234 --data-cache-path $W/cache --device $DEVICE --bf16 --save gpu_ckpt > gpu_ckpt.log 2>&1 &&
  tar czf "$OUT/gpu_ckpt.tar.gz" gpu_ckpt || { note "tiny model for generate_gpt/convert_gpt" "FAILED (logs/gpu_ckpt.log)"; failed=1; }
cp gpu_ckpt.log "$OUT/logs/"
fi

if want track; then
  wait $cpu_pid
  echo "(runs: $((SECONDS - start)) s)"
  tol32=1e-2 tol16=2e-2
  [[ $DEVICE == cpu ]] && tol32=1e-6  # the dry run: the CPU against itself
  track "fp32 on $DEVICE vs fp32 on the CPU, $ITERS iterations" cpu_fp32 gpu_fp32 $tol32
  track "bf16 on $DEVICE vs fp32 on the CPU, $ITERS iterations" cpu_fp32 gpu_bf16 $tol16
  track "fp16 (loss scale 1024) on $DEVICE vs fp32 on the CPU, $ITERS iterations" cpu_fp32 gpu_fp16 $tol16
fi
for r in gpu_fp32 gpu_bf16 z0 z3 z3_offp; do
  [[ -f $r/metrics.jsonl ]] || continue
  $PY -c "import json,sys; m=[json.loads(l) for l in open('$r/metrics.jsonl')]; p=[x.get('peak_device_bytes') for x in m if 'peak_device_bytes' in x]; print(f'$r: peak device memory {p[-1]/2**20:.0f} MiB' if p else '$r: no peak_device_bytes')" 2>&1
done | tee -a "$OUT/train_gpu_test.md"
exit $failed
