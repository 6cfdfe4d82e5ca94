#!/usr/bin/env bash
# ZeRO on CPU with several processes (Gloo over loopback), a tiny GPT-2 on the
# OpenWebText fixture, fp32, gradient accumulation and clipping active:
#  1. world sizes 1-4 (3 forces padding) x stages 0-3, offload on and off: the
#     per-iteration losses and the final weights and Adam moments equal
#     single-process training (rtol 1e-5, atol 1e-5: the elements whose true
#     gradient is 0, such as the attention key biases, carry rounding noise);
#  2. stages 1, 2 and 3 at the same world size: losses agree to 1e-7
#     (relative), stage 2 and 3 weights bit for bit;
#  3. every rank holds 1/W of the optimizer states (from the tensors, plus
#     the padding to W * 64 elements per bucket), and at stage 3 1/W of the
#     parameters, the embeddings included;
#  4. a checkpoint saved by W ranks resumes on W' (2->3, 4->1, 1->2) and the run
#     continues as the uninterrupted one did (tolerance of 1);
#     DeepSpeed's JSON config gives the same run as the flags;
#     the same runs under torchrun, under Open MPI's mpirun, as two
#     "nodes" started separately (--nnodes 2 --node-rank N) and as two
#     Slurm "nodes" (the environment srun sets, by hand: no Slurm here);
#  5. faults: a rank killed mid-run makes the other exit non-zero with a clear
#     message (no hang), under our launcher and under torchrun-style env; a
#     rank that hangs is given up on after --distributed-timeout-minutes;
#     ranks started with different settings refuse to start;
#  6. the delayed parameter update (see below);
#  7. one rank through the process group (ZLM_PROCESS_GROUP_ALONE=1) equals the
#     local run bit for bit.
#   zero_test.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
SRC=$1 BIN=$2 PY=$3
DATA=$SRC/tests/data/megatron
CMP="$PY $SRC/tests/e2e/zero/compare_runs.py"
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$W"' EXIT
cd "$W"
source "$SRC/tests/e2e/zero/common.sh"

# The reference: one process, no launcher.
$BIN/pretrain_gpt "${common[@]}" --save ref > ref.log 2>&1 || { tail ref.log; exit 1; }
grep -q 'memory plan per rank' ref.log
# One rank through the process group all the same (ZLM_PROCESS_GROUP_ALONE=1: how the GPU test runs
# NCCL's code paths on one GPU; Gloo here), at stage 3 and in --deterministic-mode: the reference's bits.
ZLM_PROCESS_GROUP_ALONE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) $BIN/pretrain_gpt "${common[@]}" --zero-stage 3 \
  --deterministic-mode --save alone > alone.log 2>&1 || { echo "FAIL: ZLM_PROCESS_GROUP_ALONE=1"; tail alone.log; exit 1; }
grep -q 'initialized data parallel with size 1 (gloo backend' alone.log
grep -q -- '--deterministic-mode: deterministic kernels' alone.log
$CMP --rtol 0 --atol 0 ref alone
# Megatron's timers on 2 ranks, pipeline 2 (the tied embedding's reduction on both stages), every rank's times.
run timers 2 --pipeline-model-parallel-size 2 --timing-log-level 1 --timing-log-option all --log-interval 5
grep -q '^times across ranks (ms):$' timers.log && grep -q '^  embedding-grads-all-reduce:$' timers.log
[[ $(grep -c '^     rank  1: [0-9.]*$' timers.log) -ge 6 ]] || { echo "FAIL: every rank's times"; cat timers.log; exit 1; }

# 1. every world size and stage, offload off; offload on for 2 and 3 ranks.
runs=()
for world in 1 2 3 4; do
  for stage in 0 1 2 3; do
    run w${world}_z$stage $world --zero-stage $stage
    runs+=(w${world}_z$stage)
  done
done
for world in 2 3; do
  for stage in 0 1 2 3; do
    run w${world}_z${stage}_off $world --zero-stage $stage --cpu-offload
    runs+=(w${world}_z${stage}_off)
  done
done
run w4_z3_offp 4 --zero-stage 3 --cpu-offload --offload-params
runs+=(w4_z3_offp)
grep -q 'initialized data parallel with size 4 (gloo backend' w4_z3_offp.log
# DeepSpeed's JSON selects the same things; a small sub_group_size makes CPU AdamW run in chunks.
cat > ds.json <<'JSON'
{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0.5, "steps_per_print": 1,
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true}, "sub_group_size": 1000,
                       "overlap_comm": true, "reduce_bucket_size": 5e8}}
JSON
run ds_z3 3 --deepspeed --deepspeed_config ds.json
grep -q 'DeepSpeed config ds.json: ZeRO stage 3, CPU offload optimizer' ds_z3.log
grep -q 'note: zero_optimization.overlap_comm' ds_z3.log
runs+=(ds_z3)
# Under torchrun (its agent serves the rendezvous store): the same run.
TORCHRUN=$(dirname "$PY")/torchrun
if [[ -x $TORCHRUN ]]; then
  $TORCHRUN --standalone --nproc-per-node 2 --no-python $BIN/pretrain_gpt "${common[@]}" --zero-stage 2 --save torchrun_z2 > torchrun_z2.log 2>&1 ||
    { echo "FAIL: under torchrun"; tail -20 torchrun_z2.log; exit 1; }
  grep -q 'launched by torchrun' torchrun_z2.log
  runs+=(torchrun_z2)
elif [[ -n "${CI:-}" ]]; then
  echo "FAIL: torchrun ($TORCHRUN) is missing; scripts/setup.sh installs it"; exit 1
fi
# Two "nodes" on this host, each started by its own launcher (--nnodes 2 --node-rank N).
port=$(free_port) nodes=()
for node in 0 1; do
  $BIN/pretrain_gpt "${common[@]}" --nnodes 2 --node-rank $node --nproc-per-node 1 --master-addr 127.0.0.1 --master-port $port \
    --zero-stage 3 --save nodes_z3 > nodes_z3.$node.log 2>&1 &
  nodes+=($!)
done
wait ${nodes[0]} && wait ${nodes[1]} || { echo "FAIL: two nodes"; tail -n 20 nodes_z3.*.log; exit 1; }
grep -q 'initialized data parallel with size 2' nodes_z3.0.log
runs+=(nodes_z3)
# Two Slurm "nodes": each rank gets the environment srun -N 2 -n 2 sets (no MASTER_ADDR:
# rank 0's host is the first of SLURM_JOB_NODELIST; the tasks on a node come from
# SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID, so the ranks leave loopback as on a cluster).
port=$(free_port) nodes=()
for node in 0 1; do
  env -u MASTER_ADDR SLURM_PROCID=$node SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NODEID=$node SLURM_STEP_NUM_NODES=2 \
    SLURM_STEP_TASKS_PER_NODE='1(x2)' SLURM_TASKS_PER_NODE='1(x2)' SLURM_JOB_NODELIST=localhost,worker2 MASTER_PORT=$port \
    $BIN/pretrain_gpt "${common[@]}" --zero-stage 1 --save slurm_z1 > slurm_z1.$node.log 2>&1 &
  nodes+=($!)
done
wait ${nodes[0]} && wait ${nodes[1]} || { echo "FAIL: Slurm environment"; tail -n 20 slurm_z1.*.log; exit 1; }
grep -q 'initialized data parallel with size 2 (gloo backend, launched by slurm, rendezvous localhost:' slurm_z1.0.log
runs+=(slurm_z1)
# Under Open MPI's mpirun (Debian's openmpi-bin; scripts/setup.sh installs it).
if command -v mpirun > /dev/null; then
  mpirun --allow-run-as-root --oversubscribe -np 3 -x MASTER_PORT=$(free_port) -x OMP_NUM_THREADS \
    $BIN/pretrain_gpt "${common[@]}" --zero-stage 2 --cpu-offload --save mpirun_z2 > mpirun_z2.log 2>&1 ||
    { echo "FAIL: under mpirun"; tail -20 mpirun_z2.log; exit 1; }
  grep -q 'launched by openmpi' mpirun_z2.log
  runs+=(mpirun_z2)
elif [[ -n "${CI:-}" ]]; then
  echo "FAIL: mpirun is missing; scripts/setup.sh installs openmpi-bin"; exit 1
fi
$CMP --rtol 1e-5 --atol 1e-5 ref "${runs[@]}"

# 2. stages agree with each other at the same world size.
$CMP --losses-only --rtol 1e-7 --atol 0 w3_z1 w3_z2 w3_z3
$CMP --rtol 0 --atol 0 w3_z2 w3_z3

# 3. optimizer-state bytes per rank are 1/W of the total (plus padding), counted from the tensors;
#    so are the parameters a rank keeps between uses at stage 3 (all of them at stages 0-2).
$PY - "${runs[@]}" <<'PYEOF'
import json, sys
for run in sys.argv[1:]:
    plan = next(json.loads(l)["memory_plan"] for l in open(run + "/metrics.jsonl") if "memory_plan" in l)
    W, stage = plan["world_size"], plan["zero_stage"]
    per = plan["optimizer_state_bytes_per_rank"]
    unsharded = plan["optimizer_state_bytes_unsharded"]   # 8 B (Adam m, v) or 12 (+ master) per parameter
    padded = plan["optimizer_state_bytes_padded"]         # the same over the padded buckets
    buckets = 3                                           # outer + 2 blocks
    width = 12
    assert len(per) == W, (run, per)
    if stage == 0:
        assert all(p == padded for p in per), (run, per, padded)
    else:
        assert all(p * W == padded for p in per), (run, per, padded)
        assert 0 <= padded - unsharded < buckets * W * 64 * width, (run, padded, unsharded)
    params = plan["resident_parameter_bytes_per_rank"]
    full = plan["padded_parameters"] * 4
    assert all(p * (W if stage == 3 else 1) == full for p in params), (run, params, full)
    print(f"ok   {run}: optimizer states {per[0]} B per rank of {unsharded} B unsharded, parameters {params[0]} B of {full} B (stage {stage}, {W} ranks)")
PYEOF

# 4. resharding: stop at iteration 5 on W ranks, resume on W' ranks.
reshard() {  # NAME W STAGE W2 STAGE2 [extra for the second part]
  local name=$1 w1=$2 z1=$3 w2=$4 z2=$5
  shift 5
  run $name $w1 --zero-stage $z1 --exit-interval 5
  [[ "$(cat $name/latest_checkpointed_iteration.txt)" == 5 ]]
  run $name $w2 --zero-stage $z2 --load $name "$@"
  grep -q "loading checkpoint from $name at iteration 5 (saved by $w1 ranks)" $name.log
}
reshard re_2_3 2 2 3 2
reshard re_4_1 4 3 1 0
reshard re_1_2 1 0 2 1 --cpu-offload
$CMP --rtol 1e-5 --atol 1e-5 ref re_2_3 re_4_1 re_1_2

# 5a-c. a rank killed under the launcher, killed with ranks started separately, hung (common.sh).
long=("${common[@]}" --train-iters 100000 --eval-interval 100000)
fault_killed_under_launcher "${long[@]}"
fault_killed_separately "${long[@]}"
fault_hung "${long[@]}"

# 5d. different settings on different ranks: both refuse, naming the difference.
port=$(free_port)
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $BIN/pretrain_gpt "${common[@]}" --zero-stage 2 > m0.log 2>&1 &
m0=$!
if RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $BIN/pretrain_gpt "${common[@]}" --zero-stage 3 > m1.log 2>&1; then
  echo "FAIL: rank 1 with another ZeRO stage started"; exit 1
fi
if wait $m0; then echo "FAIL: rank 0 accepted a rank with another ZeRO stage"; exit 1; fi
grep -q 'rank 1 was started with different model or parallel settings than rank 0: zero-stage=3 (rank 0: 2)' m0.log || { cat m0.log; exit 1; }

# 6. the delayed parameter update (offload; 2 ranks, after 3 synchronous steps):
#    iterations 1-4 equal the synchronous run's bit for bit (iteration 4's
#    forward still sees step 3's weights), iteration 5 differs (its forward sees
#    step 3's, one update late); stages 2 and 3 agree bit for bit; a checkpoint
#    (and an evaluation) waits for the update in flight, so a run stopped at 5
#    and resumed is the uninterrupted one bit for bit; without offload it is refused.
dpu=(--cpu-offload --delayed-param-update --delayed-param-update-warmup 3)
run dpu_z2 2 --zero-stage 2 "${dpu[@]}" --save-interval 5
grep -q 'delayed parameter update after 3 synchronous steps' dpu_z2.log
run dpu_z3 2 --zero-stage 3 "${dpu[@]}" --save-interval 5
$CMP --rtol 0 --atol 0 dpu_z2 dpu_z3
$PY - w2_z2_off dpu_z2 <<'PYEOF'
import json, sys
def losses(run):
    return {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(run + "/metrics.jsonl")) if "lr" in r}
s, d = losses(sys.argv[1]), losses(sys.argv[2])
assert all(s[i] == d[i] for i in range(1, 5)), ("iterations 1-4 differ", s, d)
assert s[5] != d[5], ("iteration 5 is not one update late", s[5], d[5])
print(f"ok   delayed update: iterations 1-4 synchronous, iteration 5 loss {d[5]:.6f} vs {s[5]:.6f}, iteration 10 {d[10]:.6f} vs {s[10]:.6f}")
PYEOF
run dpu_part 2 --zero-stage 2 "${dpu[@]}" --exit-interval 5
run dpu_part 2 --zero-stage 2 "${dpu[@]}" --load dpu_part --save-interval 5
$CMP --rtol 0 --atol 0 dpu_z2 dpu_part
if $BIN/pretrain_gpt "${common[@]}" --delayed-param-update > dpu_refused.log 2>&1; then echo "FAIL: --delayed-param-update without offload ran"; exit 1; fi
grep -q -- '--delayed-param-update: needs --cpu-offload' dpu_refused.log || { cat dpu_refused.log; exit 1; }

echo "zero ok"
