#!/usr/bin/env bash
# Tensor and pipeline parallelism on CPU processes (Gloo over loopback), the
# tiny GPT-2 of the ZeRO test (fp32, dropout off, clipping active):
#  1. TP2, TP4, PP2, PP4 (1F1B), PP2 and PP4 interleaved, TP2xPP2, TP2xDP2 with
#     ZeRO 1-3 and offload, PP2xDP2 with ZeRO 0-3 and offload (1F1B and
#     interleaved), TP2xPP2xDP2 on 8 ranks at ZeRO 1 and 3: per-iteration
#     losses and the final weights and Adam moments, the checkpoint's parts
#     joined into the whole model, equal one process within rtol 1e-5 + atol
#     1e-5 (as the ZeRO test); sequence parallel equals TP alone; with pipeline
#     parallelism ZeRO-2 and ZeRO-3 are bit-identical (as without);
#  2. dropout: with hidden dropout on and attention dropout off, TP1 = TP2 = TP4
#     (those masks come from the default generator, the same on every TP rank);
#     with both on and sequence parallelism, recomputation replays the tracker
#     (bit for bit); attention dropout across TP sizes and dropout across PP
#     sizes are not invariant (per-rank streams, as Megatron), so not compared;
#  3. the memory plan: each rank holds 1/TP of the split weights plus the
#     replicated ones, its stage's layers only; checkpoints use Megatron's
#     mp_rank_TT / mp_rank_TT_PPP directories;
#  4. a checkpoint saved in one layout resumes in another (TP2xPP2 -> 1 rank,
#     1 rank -> TP4, PP2xDP2 -> TP2xDP2 at another ZeRO stage, TP2xDP2 ->
#     PP2xDP2 at ZeRO-3 with parameter offload) as the uninterrupted run continued;
#     also through Megatron-LM's format (--ckpt-format torch: TP2xPP2 -> 1 rank,
#     PP2xDP2 ZeRO-3 -> TP2xDP2 ZeRO-1; TP2xPP2 with dropout -> the same layout,
#     its dropout streams continued from rng_state) and DeepSpeed's (TP2xDP2 ZeRO-3
#     -> 1 rank, TP2xDP2 ZeRO-1 -> PP2xDP2 ZeRO-2; TP2 with sequence parallelism and
#     dropout in place, from its rng_state);
#  5. the Megatron-DeepSpeed tutorial's TP 4 command with its DeepSpeed JSON (its batch rule
#     counts data-parallel ranks: 12 = 1 x 12 accumulation x DP 1)
#     (ZeRO-3, cpu_offload, fp16: fp32 on CPU) under our launcher and torchrun;
#  6. faults: a stage killed mid-step makes the launcher, or the other stage by
#     itself, exit non-zero with a clear message; a hung stage is given up on
#     after --distributed-timeout-minutes; impossible layouts are refused.
#   parallel_test.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
SRC=$1 BIN=$2 PY=$3
DATA=$SRC/tests/data/megatron
CMP="$PY $SRC/tests/e2e/zero/compare_runs.py"
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$W"' EXIT
cd "$W"
source "$SRC/tests/e2e/zero/common.sh"
one() {  # one NAME ARGS...: one process, no launcher
  local name=$1
  shift
  $BIN/pretrain_gpt "${common[@]}" --save "$name" "$@" > "$name.log" 2>&1 || { echo "FAIL: $name"; tail -20 "$name.log"; exit 1; }
}
TP2=(--tensor-model-parallel-size 2) TP4=(--tensor-model-parallel-size 4) PP2=(--pipeline-model-parallel-size 2)

# 1. every layout against one process (2 layers; 4 and 8 for the deeper pipelines).
one ref
one ref4 --num-layers 4
one ref8 --num-layers 8
runs=()
run tp2 2 "${TP2[@]}"; run tp4 4 "${TP4[@]}"; run tp2_sp 2 "${TP2[@]}" --sequence-parallel; run tp4_sp 4 "${TP4[@]}" --sequence-parallel
run pp2 2 "${PP2[@]}"; run tp2_pp2 4 "${TP2[@]}" "${PP2[@]}"
runs+=(tp2 tp4 tp2_sp tp4_sp pp2 tp2_pp2)
for z in 1 2 3; do run tp2_dp2_z$z 4 "${TP2[@]}" --zero-stage $z; runs+=(tp2_dp2_z$z); done
run tp2_dp2_z2_off 4 "${TP2[@]}" --zero-stage 2 --cpu-offload
run tp2_dp2_z3_offp 4 "${TP2[@]}" --zero-stage 3 --cpu-offload --offload-params
for z in 0 1 2 3; do run pp2_dp2_z$z 4 "${PP2[@]}" --zero-stage $z; runs+=(pp2_dp2_z$z); done
run pp2_dp2_z1_off 4 "${PP2[@]}" --zero-stage 1 --cpu-offload
run pp2_dp2_z3_offp 4 "${PP2[@]}" --zero-stage 3 --cpu-offload --offload-params
run tp2_pp2_dp2 8 "${TP2[@]}" "${PP2[@]}" --zero-stage 1 --sequence-parallel
run tp2_pp2_dp2_z3 8 "${TP2[@]}" "${PP2[@]}" --zero-stage 3 --sequence-parallel
runs+=(tp2_dp2_z2_off tp2_dp2_z3_offp pp2_dp2_z1_off pp2_dp2_z3_offp tp2_pp2_dp2 tp2_pp2_dp2_z3)
grep -q 'initialized tensor model parallel with size 2' tp2_pp2_dp2.log
grep -q 'initialized pipeline model parallel with size 2' tp2_pp2_dp2.log
grep -q 'initialized data parallel with size 2' tp2_pp2_dp2.log
grep -q 'rank   5: tensor-parallel rank 1, data-parallel rank 0, pipeline stage 1' tp2_pp2_dp2.log  # Megatron's order
$CMP --rtol 1e-5 --atol 1e-5 ref "${runs[@]}"
$CMP --rtol 0 --atol 0 pp2_dp2_z2 pp2_dp2_z3 pp2_dp2_z3_offp
run pp4 4 --num-layers 4 --pipeline-model-parallel-size 4
run pp2_v2 2 --num-layers 4 "${PP2[@]}" --num-layers-per-virtual-pipeline-stage 1
for z in 2 3; do run pp2_v2_dp2_z$z 4 --num-layers 4 "${PP2[@]}" --num-layers-per-virtual-pipeline-stage 1 --zero-stage $z; done
$CMP --rtol 1e-5 --atol 1e-5 ref4 pp4 pp2_v2 pp2_v2_dp2_z2 pp2_v2_dp2_z3
$CMP --rtol 0 --atol 0 pp2_v2_dp2_z2 pp2_v2_dp2_z3
run pp4_v2 4 --num-layers 8 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1
run tp2_pp2_v2 4 --num-layers 8 "${TP2[@]}" "${PP2[@]}" --num-layers-per-virtual-pipeline-stage 2 --zero-stage 1
$CMP --rtol 1e-5 --atol 1e-5 ref8 pp4_v2 tp2_pp2_v2
$CMP --rtol 1e-5 --atol 1e-5 tp2 tp2_sp  # sequence parallel = tensor parallel alone

# 1b. the schedules under NCCL's point-to-point rules (ZLM_P2P_RENDEZVOUS: tags
#     ignored, a send completes only when its receive is posted): 1F1B, the
#     interleaved ring on 2 stages (where the previous stage is the next), all
#     forward passes as warm-up (micro-batches = stages), fewer micro-batches
#     than stages. A schedule that could deadlock on NCCL times out here.
one ref8_b4 --num-layers 8 --global-batch-size 4
one ref4_b2 --num-layers 4 --global-batch-size 2
rv() { ZLM_P2P_RENDEZVOUS=1 run "$@" --distributed-timeout-minutes 0.5; }
rv rv_pp4 4 --num-layers 4 --pipeline-model-parallel-size 4
rv rv_pp2_v2 2 --num-layers 4 "${PP2[@]}" --num-layers-per-virtual-pipeline-stage 1
rv rv_pp4_v2_m4 4 --num-layers 8 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 4
rv rv_pp4_m2 4 --num-layers 4 --pipeline-model-parallel-size 4 --global-batch-size 2
grep -q "ZLM_P2P_RENDEZVOUS=1: point-to-point messages follow NCCL's rules" rv_pp4.log
$CMP --rtol 1e-5 --atol 1e-5 ref4 rv_pp4 rv_pp2_v2
$CMP --rtol 1e-5 --atol 1e-5 ref8_b4 rv_pp4_v2_m4
$CMP --rtol 1e-5 --atol 1e-5 ref4_b2 rv_pp4_m2

# 2. dropout.
one d_ref --hidden-dropout 0.1
run d_tp2 2 "${TP2[@]}" --hidden-dropout 0.1
run d_tp4 4 "${TP4[@]}" --hidden-dropout 0.1
$CMP --rtol 1e-5 --atol 1e-5 d_ref d_tp2 d_tp4
run a_sp 2 "${TP2[@]}" --sequence-parallel --hidden-dropout 0.1 --attention-dropout 0.1
run a_sp_ckpt 2 "${TP2[@]}" --sequence-parallel --hidden-dropout 0.1 --attention-dropout 0.1 --checkpoint-activations
run a_pp_ckpt 4 "${TP2[@]}" "${PP2[@]}" --hidden-dropout 0.1 --attention-dropout 0.1 --checkpoint-activations
run a_pp 4 "${TP2[@]}" "${PP2[@]}" --hidden-dropout 0.1 --attention-dropout 0.1
$CMP --rtol 0 --atol 0 a_sp a_sp_ckpt
$CMP --rtol 0 --atol 0 a_pp a_pp_ckpt

# 3. parameters per rank: 1/TP of the split weights plus the replicated ones, by stage;
#    Megatron's checkpoint directories.
$PY - tp2 tp4 pp2 tp2_pp2 tp2_pp2_dp2 <<'PYEOF'
import json, sys
V, C, P, L = 5120, 64, 32, 2   # padded vocabulary (5000 entries), hidden, positions, layers
for run in sys.argv[1:]:
    plan = next(json.loads(l)["memory_plan"] for l in open(run + "/metrics.jsonl") if "memory_plan" in l)
    tp, pp, dp = plan["tensor_parallel"], plan["pipeline_parallel"], plan["data_parallel"]
    for r, got in enumerate(plan["parameters_per_rank"]):
        stage = r // (tp * dp)
        layers = L // pp
        split = layers * (3 * C * C + 3 * C + C * C + 4 * C * C + 4 * C + 4 * C * C)
        repl = layers * (2 * C + 2 * C + C + C)
        if stage == 0: split, repl = split + V * C, repl + P * C
        if stage == pp - 1: split, repl = split + (V * C if pp > 1 else 0), repl + 2 * C
        want = split // tp + repl
        assert got == want, (run, r, got, want)
    print(f"ok   {run}: parameters per rank {plan['parameters_per_rank']}")
PYEOF
[[ -f tp2/iter_0000010/mp_rank_01/model_optim_rng.pt && ! -e tp2/iter_0000010/mp_rank_02 ]]
[[ -f tp2_pp2/iter_0000010/mp_rank_01_001/model_optim_rng.pt && -f tp2_pp2/iter_0000010/mp_rank_00_000/model_optim_rng.pt ]]
[[ $(ls tp2_pp2_dp2/iter_0000010 | wc -l) == 4 ]]  # one file per (tp, pp): data-parallel rank 0 writes

# 4. resume in another layout.
reshard() {  # NAME W1 "ARGS1" W2 "ARGS2"
  local name=$1 w1=$2 a1=$3 w2=$4 a2=$5
  run $name $w1 $a1 --exit-interval 5
  run $name $w2 $a2 --load $name
  grep -q "loading checkpoint from $name at iteration 5 (saved by $w1 ranks)" $name.log
}
reshard re_tp2pp2_1 4 "${TP2[*]} ${PP2[*]}" 1 ""
reshard re_1_tp4 1 "" 4 "${TP4[*]}"
reshard re_pp2dp2_tp2dp2 4 "${PP2[*]} --zero-stage 1" 4 "${TP2[*]} --zero-stage 2 --cpu-offload"
reshard re_tp2dp2_pp2dp2z3 4 "${TP2[*]} --zero-stage 2" 4 "${PP2[*]} --zero-stage 3 --cpu-offload --offload-params"
# The same through Megatron-LM's format (--ckpt-format torch: weights, Adam's moments and step kept).
reshard_megatron() {  # NAME W1 "ARGS1" W2 "ARGS2"
  local name=$1 w1=$2 a1=$3 w2=$4 a2=$5
  run $name $w1 $a1 --exit-interval 5 --ckpt-format torch
  run $name $w2 $a2 --load $name
  grep -q "is a Megatron-LM checkpoint .*Adam's moments and step, iteration 5" $name.log
}
reshard_megatron re_mf_tp2pp2_1 4 "${TP2[*]} ${PP2[*]}" 1 ""
reshard_megatron re_mf_pp2dp2z3_tp2dp2 4 "${PP2[*]} --zero-stage 3" 4 "${TP2[*]} --zero-stage 1"
# In the same layout its rng_state carries the dropout streams on: as the uninterrupted run, bit for bit.
DROP="--hidden-dropout 0.1 --attention-dropout 0.1"
reshard_megatron a_pp_mf 4 "${TP2[*]} ${PP2[*]} $DROP" 4 "${TP2[*]} ${PP2[*]} $DROP"
grep -q "the dropout streams continue from its rng_state" a_pp_mf.log
$CMP --rtol 0 --atol 0 a_pp a_pp_mf
# And through DeepSpeed's (--ckpt-format deepspeed: one set of files per tensor-parallel rank, ZeRO partitions per data-parallel rank).
reshard_deepspeed() {  # NAME W1 "ARGS1" W2 "ARGS2"
  local name=$1 w1=$2 a1=$3 w2=$4 a2=$5
  run $name $w1 $a1 --exit-interval 5 --ckpt-format deepspeed
  [[ $(cat $name/latest) == global_step5 ]]
  run $name $w2 $a2 --load $name
  grep -q "is a DeepSpeed checkpoint .*Adam's moments and step, iteration 5" $name.log
}
reshard_deepspeed re_ds_tp2dp2z3_1 4 "${TP2[*]} --zero-stage 3" 1 ""
reshard_deepspeed re_ds_tp2dp2z1_pp2dp2z2 4 "${TP2[*]} --zero-stage 1" 4 "${PP2[*]} --zero-stage 2"
# Its model files carry Megatron-DeepSpeed's rng_state too: TP 2 with sequence parallelism and dropout, resumed in place.
SPDROP="--sequence-parallel $DROP"
reshard_deepspeed a_sp_ds 2 "${TP2[*]} $SPDROP" 2 "${TP2[*]} $SPDROP"
grep -q "the dropout streams continue from its rng_state" a_sp_ds.log
$CMP --rtol 0 --atol 0 a_sp a_sp_ds
$CMP --rtol 1e-5 --atol 1e-5 ref re_tp2pp2_1 re_1_tp4 re_pp2dp2_tp2dp2 re_tp2dp2_pp2dp2z3 re_mf_tp2pp2_1 re_mf_pp2dp2z3_tp2dp2 \
  re_ds_tp2dp2z3_1 re_ds_tp2dp2z1_pp2dp2z2
$BIN/convert_gpt --load tp2_pp2 --export-hf hf_from_tp2pp2 --vocab-file $DATA/gpt2-tiny-vocab.json --merge-file $DATA/gpt2-tiny-merges.txt > convert.log 2>&1 ||
  { cat convert.log; exit 1; }
[[ -f hf_from_tp2pp2/model.safetensors ]]

# 5. the Megatron-DeepSpeed tutorial's TP 4 run: its flags and DeepSpeed JSON (ZeRO-3, cpu_offload, fp16).
cat > ds_config.json <<'JSON'
{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 12, "steps_per_print": 1, "gradient_clipping": 0.5,
 "zero_optimization": {"stage": 3, "cpu_offload": true, "contiguous_gradients": true, "overlap_comm": true,
                       "reduce_bucket_size": 50000000, "stage3_prefetch_bucket_size": 50000000},
 "fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1, "initial_scale_power": 16},
 "wall_clock_breakdown": false}
JSON
tutorial=(--tensor-model-parallel-size 4 --pipeline-model-parallel-size 1 --checkpoint-activations --deepspeed-activation-checkpointing
          --partition-activations --contigious-checkpointing --deepspeed --deepspeed_config ds_config.json --zero-stage 3 --fp16)
run tutorial_tp4 4 "${tutorial[@]}"
grep -q 'note: --partition-activations' tutorial_tp4.log
grep -q 'DeepSpeed config ds_config.json: ZeRO stage 3, CPU offload optimizer' tutorial_tp4.log
runs=(tutorial_tp4)
TORCHRUN=$(dirname "$PY")/torchrun
[[ -x $TORCHRUN ]] || { echo "FAIL: no torchrun at $TORCHRUN"; exit 1; }
$TORCHRUN --standalone --nproc-per-node 4 --no-python $BIN/pretrain_gpt "${common[@]}" "${tutorial[@]}" --save tutorial_torchrun \
  > tutorial_torchrun.log 2>&1 || { echo "FAIL: tutorial under torchrun"; tail -20 tutorial_torchrun.log; exit 1; }
runs+=(tutorial_torchrun)
$CMP --rtol 1e-5 --atol 1e-5 ref "${runs[@]}"  # fp16 falls back to fp32 on CPU: the fp32 run

# 6. faults (common.sh), with the two ranks as two pipeline stages.
long=("${common[@]}" --train-iters 100000 --eval-interval 100000 "${PP2[@]}")
fault_killed_under_launcher "${long[@]}"
fault_killed_separately "${long[@]}"
fault_hung "${long[@]}"
# Impossible layouts: refused before any work, naming the numbers (exit 2).
refuse() {  # refuse WORLD MESSAGE ARGS...
  local world=$1 msg=$2
  shift 2
  if $BIN/pretrain_gpt "${common[@]}" --nproc-per-node "$world" "$@" > refused.log 2>&1; then echo "FAIL: accepted $*"; exit 1; fi
  grep -qF -- "$msg" refused.log || { echo "FAIL: no '$msg' for $*"; cat refused.log; exit 1; }
}
refuse 3 "3 ranks cannot form --tensor-model-parallel-size 2 x --pipeline-model-parallel-size 1" "${TP2[@]}"
refuse 2 "--num-layers 3 is not divisible by --pipeline-model-parallel-size 2" "${PP2[@]}" --num-layers 3
refuse 2 "--num-attention-heads 1 is not divisible by --tensor-model-parallel-size 2" "${TP2[@]}" --num-attention-heads 1
echo "parallel ok"
