#!/usr/bin/env bash
# The optimizer step on the CPU, ours against DeepSpeed's CPU Adam (what its
# ZeRO-Offload runs; its users report this step dominating their iterations,
# see docs/benchmarks.md) and PyTorch's fused AdamW, over the parameters of the
# same GPT-2: seconds per step (gradient norm, clipping, AdamW), parameters per
# second and the ratio. Ours is the ZeRO engine's stage-1 step, on one rank with
# all threads and on W ranks (Gloo, one thread each: the multi-rank path with
# its reduce-scatter and all-gather), with and without --cpu-offload (master
# weights and moments on the CPU apart from the parameters, copied back after
# the step; the headline, as it is what ZeRO-Offload does). DeepSpeed's W-rank
# row is its CPU Adam on one thread over a flat 1/W of the parameters: what each
# rank of its ZeRO-Offload steps, without its communication.
# Checked first, at a small shape (CHECK_LAYERS, CHECK_HIDDEN, full vocabulary):
# for 1 and W ranks, with and without offload, our parameters after one step
# equal those of torch.optim.AdamW (and of DeepSpeed's CPU Adam, offload on one
# rank) from the same parameters and gradients within 1e-6, and our gradient
# norm equals the exact one within 1e-6 relative. DeepSpeed is installed into
# .venv on first use (scripts/requirements.txt pins it).
#   LAYERS=12 HIDDEN=1024 tests/bench/bench_optimizer.sh    (W, ITERS; SMOKE=1: a tiny model)
source "$(dirname "$0")/lib.sh"
if [[ $SMOKE == 1 ]]; then
  LAYERS=1 HIDDEN=64 HEADS=4 VOCAB=512 ITERS=1 CHECK_LAYERS=1 CHECK_HIDDEN=64
fi
LAYERS=${LAYERS:-12} HIDDEN=${HIDDEN:-1024} HEADS=${HEADS:-16} VOCAB=${VOCAB:-50304} ITERS=${ITERS:-5} W=${W:-2}
CHECK_LAYERS=${CHECK_LAYERS:-2} CHECK_HIDDEN=${CHECK_HIDDEN:-128}
THREADS=${OMP_NUM_THREADS:-$(nproc)}
export THP_MEM_ALLOC_ENABLE=1  # what pretrain_gpt sets for itself; the Python side gets it too
[[ -x $BIN/zlm_bench_optimizer ]] || fail "no $BIN/zlm_bench_optimizer (it is built with the trainer)"
$PY -c 'import deepspeed' 2> /dev/null || $PY -m pip install -q deepspeed==0.19.8 >&2
export DS_ACCELERATOR=cpu

# ours RANKS ARGS...: zlm_bench_optimizer on RANKS processes (one thread each when
# several), rank 0's JSON line on stdout.
ours() {
  local ranks=$1 port=$((20000 + RANDOM % 20000)) r
  shift
  if ((ranks == 1)); then
    OMP_NUM_THREADS=$THREADS $BIN/zlm_bench_optimizer --heads $HEADS "$@" || fail "zlm_bench_optimizer $*"
    return
  fi
  for ((r = 1; r < ranks; ++r)); do
    RANK=$r WORLD_SIZE=$ranks LOCAL_RANK=$r LOCAL_WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      OMP_NUM_THREADS=1 $BIN/zlm_bench_optimizer --heads $HEADS "$@" > /dev/null &
  done
  RANK=0 WORLD_SIZE=$ranks LOCAL_RANK=0 LOCAL_WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    OMP_NUM_THREADS=1 $BIN/zlm_bench_optimizer --heads $HEADS "$@" || fail "zlm_bench_optimizer rank 0 $*"
  wait || fail "zlm_bench_optimizer, a rank > 0: $*"
}
field() { $PY -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])[sys.argv[1]])' "$1"; }
# best_step CMD...: the smallest seconds_per_step of RUNS runs of CMD (each the mean of ITERS steps).
best_step() {
  local best="" s
  for ((run = 0; run < RUNS; ++run)); do
    s=$("$@" | field seconds_per_step) || exit 1
    best=$(min_of "$best" "$s")
  done
  echo "$best"
}

# 1. The check.
for ranks in 1 $W; do
  for off in "" --offload; do
    dir=$work/dump_${ranks}${off}
    ours $ranks --layers $CHECK_LAYERS --hidden $CHECK_HIDDEN --vocab $VOCAB $off --dump "$dir" > /dev/null
    impls=torch
    [[ $ranks == 1 && -n $off ]] && impls="torch deepspeed"
    for impl in $impls; do
      $PY tests/bench/baseline_optimizer.py check $impl "$dir" > "$work/check.log" 2>&1 ||
        { tail -n 3 "$work/check.log" >&2; fail "after one step on $ranks rank(s) ${off:-without offload}, ours differs from $impl"; }
    done
    echo "check ok: $ranks rank(s) ${off:-(no offload)} vs $impls" >&2
  done
done

# 2. The times.
shape="--layers $LAYERS --hidden $HIDDEN --vocab $VOCAB --iters $ITERS"
baseline() { OMP_NUM_THREADS=$1 $PY tests/bench/baseline_optimizer.py time "${@:2}" 2> "$work/baseline.err" || { tail -n 5 "$work/baseline.err" >&2; exit 1; }; }
s_off=$(best_step ours 1 $shape --offload)
s_one=$(best_step ours 1 $shape)
s_offw=$(best_step ours $W $shape --offload)
s_w=$(best_step ours $W $shape)
n=$(ours 1 --layers $LAYERS --hidden $HIDDEN --vocab $VOCAB --iters 1 | field params)
ds=$(best_step baseline $THREADS deepspeed $LAYERS $HIDDEN $VOCAB $ITERS)
dsw=$(best_step baseline 1 deepspeed $LAYERS $HIDDEN $VOCAB $ITERS $W)
pt=$(best_step baseline $THREADS torch $LAYERS $HIDDEN $VOCAB $ITERS)
echo "| optimizer step, GPT-2 $LAYERS layers, hidden $HIDDEN ($n parameters), best of $RUNS runs of $ITERS steps | s/step | M params/s | DeepSpeed CPU Adam / this |"
echo "|---|---|---|---|"
row() { printf "| %s | %.3f | %.0f | %s |\n" "$1" "$2" "$(calc "$n / $2 / 1000000")" "$3"; }
row "**zerolm --cpu-offload, 1 rank, $THREADS threads**" "$s_off" "$(printf %.2fx "$(calc "$ds / $s_off")")"
row "zerolm (parameters and optimizer together), 1 rank, $THREADS threads" "$s_one" "$(printf %.2fx "$(calc "$ds / $s_one")")"
row "DeepSpeedCPUAdam (ZeRO-Offload's step), $THREADS threads" "$ds" "1.00x"
row "torch.optim.AdamW(fused=True), $THREADS threads" "$pt" "$(printf %.2fx "$(calc "$ds / $pt")")"
row "**zerolm --cpu-offload, $W ranks x 1 thread (with the Gloo reduce-scatter and all-gather)**" "$s_offw" \
  "$(printf %.2fx "$(calc "$dsw / $s_offw")")"
row "zerolm (parameters and optimizer together), $W ranks x 1 thread" "$s_w" "$(printf %.2fx "$(calc "$dsw / $s_w")")"
row "DeepSpeedCPUAdam, 1 thread over 1/$W of the parameters (each rank's step, no communication)" "$dsw" "1.00x"
