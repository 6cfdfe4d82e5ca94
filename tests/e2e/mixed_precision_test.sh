#!/usr/bin/env bash
# pretrain_gpt's mixed precision (on the GPU the layout of --bf16/--fp16),
# run on CPU with ZLM_CPU_MIXED_PRECISION=1:
#  0. the layout, from the memory plan in metrics.jsonl: 16-bit parameters
#     (2 bytes each), fp32 master weights and moments (12), gradients in fp32
#     for --bf16 (Megatron's rule, 4 bytes) and in fp16 for --fp16 (2), fp32
#     with --accumulate-allreduce-grads-in-fp32, and bf16 under a DeepSpeed
#     config with communication_data_type "bf16";
#  1. bf16, one process, dropout on: --checkpoint-activations and ZeRO-3 (which
#     recompute every block under the forward's saved RNG state) give bit for
#     bit the losses and weights of the plain run;
#  2. bf16, dropout off: 2 ranks at stages 0-3 give the one-process losses
#     (rtol 1e-4: gradient sums in another order may move the rounding of
#     the 16-bit parameters; measured equal), and stages 2 and 3 are bit for
#     bit equal;
#  3. fp16 with Megatron's dynamic loss scaling from 2^32: the overflowing
#     steps are skipped and counted, the scale halves after the hysteresis;
#     on 2 ranks the overflow is agreed across ranks: ZeRO-0 and ZeRO-1 skip
#     exactly the same steps with the same scale (1 and 2 ranks may not: each
#     rank divides its micro-batch losses by its own micro-batch count, 12 or
#     6, as Megatron does, so near the overflow edge the 2-rank gradients overflow first);
#  3b. fp16 resumed mid-way through its skipped steps (our format and Megatron's)
#     goes on with the saved scale and the learning rate of the updates taken;
#  4. without ZLM_CPU_MIXED_PRECISION, --bf16 on CPU warns and trains in fp32.
#   mixed_precision_test.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
SRC=$1 BIN=$2 PY=$3
DATA=$SRC/tests/data/megatron
CMP="$PY $SRC/tests/e2e/zero/compare_runs.py"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
export OMP_NUM_THREADS=1
common=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --micro-batch-size 1 --global-batch-size 4
        --seq-length 32 --max-position-embeddings 32 --lr 0.003 --lr-warmup-iters 2 --clip-grad 1.0
        --data-path $DATA/meg-gpt2-openwebtext_text_document --vocab-file $DATA/gpt2-tiny-vocab.json --split 949,50,1
        --log-interval 1 --eval-interval 5 --eval-iters 1 --seed 1234 --data-cache-path $W/cache --distributed-backend gloo)
run() {  # run NAME ARGS...
  local name=$1
  shift
  ZLM_CPU_MIXED_PRECISION=1 $BIN/pretrain_gpt "${common[@]}" --save "$name" "$@" > "$name.log" 2>&1 ||
    { echo "FAIL: $name ($*)"; tail -20 "$name.log"; exit 1; }
}

# 1. recomputation in bf16, with dropout.
run bf16 --train-iters 8 --bf16
grep -q -- '--bf16 on CPU: 16-bit parameters' bf16.log
run bf16_ckpt --train-iters 8 --bf16 --checkpoint-activations
run bf16_z3 --train-iters 8 --bf16 --zero-stage 3
$CMP --rtol 0 --atol 0 bf16 bf16_ckpt bf16_z3
run fp32 --train-iters 8
if $CMP --losses-only --rtol 1e-6 --atol 0 fp32 bf16 > /dev/null; then echo "FAIL: bf16 gave the fp32 losses (16-bit parameters not on?)"; exit 1; fi

# 0. bytes per parameter on the device, per kind (stage 0, one rank: no padding here).
run fp16_layout --train-iters 1 --fp16
run fp16_fp32grads --train-iters 1 --fp16 --accumulate-allreduce-grads-in-fp32
echo '{"train_micro_batch_size_per_gpu": 1, "train_batch_size": 4, "bf16": {"enabled": true}, "communication_data_type": "bf16"}' > ds.json
run ds_bf16 --train-iters 1 --deepspeed --deepspeed_config ds.json
$PY - <<'PYEOF'
import json
def plan(run):
    for line in open(run + "/metrics.jsonl"):
        m = json.loads(line)
        if "memory_plan" in m:
            return m["memory_plan"]
for run, want in [("fp32", (4, 4, 8)), ("bf16", (2, 4, 12)), ("fp16_layout", (2, 2, 12)), ("fp16_fp32grads", (2, 4, 12)), ("ds_bf16", (2, 2, 12))]:
    p = plan(run)
    n = p["padded_parameters"]
    got = (p["params_device"] / n, p["grads_device"] / n, p["optim_device"] / n)
    assert got == want, (run, got, want)
    print(f"ok   {run}: {got[0]:g} + {got[1]:g} + {got[2]:g} bytes per parameter (parameters, gradients, master weights and moments)")
PYEOF

# 2. bf16 across ranks (no dropout: each rank draws its own masks).
nodrop=(--train-iters 8 --bf16 --hidden-dropout 0 --attention-dropout 0)
run bf16_w1 "${nodrop[@]}"
for stage in 0 1 2 3; do run bf16_w2_z$stage "${nodrop[@]}" --nproc-per-node 2 --zero-stage $stage; done
$CMP --losses-only --rtol 1e-4 --atol 0 bf16_w1 bf16_w2_z0 bf16_w2_z1 bf16_w2_z2 bf16_w2_z3
$CMP --rtol 0 --atol 0 bf16_w2_z2 bf16_w2_z3

# 3. fp16 and dynamic loss scaling.
fp16=(--train-iters 18 --fp16 --hidden-dropout 0 --attention-dropout 0)
run fp16_w1 "${fp16[@]}"
run fp16_w2 "${fp16[@]}" --nproc-per-node 2 --zero-stage 1
run fp16_w2_z0 "${fp16[@]}" --nproc-per-node 2 --zero-stage 0
schedule() {  # per iteration: loss scale and skipped count, from the log lines
  grep '^ iteration ' "$1" | sed 's/.*loss scale: \([0-9.E+-]*\).*skipped iterations: *\([0-9]*\).*/\1 \2/'
}
schedule fp16_w1.log > s1
schedule fp16_w2.log > s2
schedule fp16_w2_z0.log > s2z0
cmp s2z0 s2 || { echo "FAIL: ZeRO-1 skipped other steps than ZeRO-0 on 2 ranks"; paste s2z0 s2; exit 1; }
for s in s1 s2; do
$PY - $s <<'PYEOF'
import sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
scales = [r[0] for r in rows]
skipped = [int(r[1]) for r in rows]
assert scales[0] == 2.0 ** 32, scales              # Megatron's initial scale; hysteresis 2 keeps it once
assert scales[1] == 2.0 ** 31, scales
assert skipped[0] == 1 and sum(skipped) >= 3, skipped   # 2^32 overflows fp16 gradients
assert 0 in skipped and skipped[-1] == 0, skipped        # and a lower scale trains
assert all(b <= a for a, b in zip(scales, scales[1:])), scales
print(f"ok   fp16 {sys.argv[1]}: {sum(skipped)} of {len(rows)} steps skipped, loss scale 2^32 -> 2^{len(bin(int(scales[-1]))) - 3}")
PYEOF
done
$CMP --losses-only --rtol 1e-4 --atol 0 fp16_w2_z0 fp16_w2

# 3b. fp16 resumed in the middle of its skipped steps, from our format, Megatron's and
#     DeepSpeed's (its FP16_Optimizer without ZeRO, whose hysteresis we keep under a key of
#     ours, and ZeRO-1's loss scaler): the scale and its hysteresis come back from the
#     checkpoint, and the learning rate counts only the updates taken (Megatron's scheduler does
#     not step on a skipped iteration), so iterations 9-18 log the uninterrupted run's learning
#     rate, scale and skips, and end with its losses and weights.
lr_scale() {  # per iteration: number, learning rate, loss scale, skipped count
  grep '^ iteration ' "$1" |
    sed 's/^ iteration *\([0-9]*\)\/.*learning rate: \([0-9.E+-]*\).*loss scale: \([0-9.E+-]*\).*skipped iterations: *\([0-9]*\).*/\1 \2 \3 \4/'
}
lr_scale fp16_w1.log | tail -n 10 > s_whole
grep -q '^16 1.500E-03 262144.0 0$' s_whole || { echo "FAIL: the warm-up did not wait for the first update"; cat s_whole; exit 1; }
for case in zerolm torch deepspeed "deepspeed --zero-stage 1"; do
  set -- $case
  f=$1 name=fp16_re_$1${2:+_z1}
  shift
  run $name "${fp16[@]}" --exit-interval 8 --ckpt-format $f "$@"
  run $name "${fp16[@]}" --load $name "$@"
  grep -q 'loss scale 33554432.0 from the checkpoint' $name.log
  lr_scale $name.log > s_$name
  cmp s_whole s_$name || { echo "FAIL: fp16 resumed from --ckpt-format $case"; paste s_whole s_$name; exit 1; }
done
$CMP --rtol 0 --atol 0 fp16_w1 fp16_re_zerolm fp16_re_torch fp16_re_deepspeed fp16_re_deepspeed_z1

# 4. the default on CPU: fp32, with a warning.
$BIN/pretrain_gpt "${common[@]}" --train-iters 8 --bf16 --save bf16_off > bf16_off.log 2>&1
grep -q -- '--bf16 on CPU: training in fp32' bf16_off.log
$CMP --rtol 0 --atol 0 fp32 bf16_off
echo "ok: mixed precision"
