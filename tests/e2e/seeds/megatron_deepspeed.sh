#!/usr/bin/env bash
# Megatron-DeepSpeed's GPT-2 tutorial as README.md writes it (blocks megatron-deepspeed-data,
# megatron-deepspeed-345m, megatron-deepspeed-tp4), over small data.
# Changes, all sizes and counts:
#   data: oscar-1GB.jsonl is tests/data's 1000 OpenWebText documents and gpt2-vocab.json /
#     gpt2-merges.txt are BigScience's tiny GPT-2 files: the inputs Megatron-DeepSpeed's own
#     preprocess_data.py turned into tests/data/megatron/meg-gpt2-openwebtext_text_document;
#   345m and tp4: --num-layers 24->2, --hidden-size 1024->64, --num-attention-heads 16->4,
#     --seq-length and --max-position-embeddings 1024->64, --micro-batch-size 8->2 (tp4: 4->1),
#     --global-batch-size 64->4 (tp4: 16->4, and ds.json's batch sizes alike), --train-iters,
#     --lr-decay-iters and the log/save/eval intervals and --eval-iters to a few iterations,
#     MASTER_PORT 6000 -> a free port; build/bin/pretrain_gpt.py -> its path in the build tree.
# Checks: the dataset is byte-identical to Megatron-DeepSpeed's; the legacy launcher's run trains,
# saves, and its second invocation (same --save/--load) resumes at the saved iteration with the
# losses of an uninterrupted run; the TP 4 run applies ds.json (ZeRO-3, CPU offload, fp16, its
# batch sizes) with one warning about the missing --deepspeed, and saves 4 tensor-parallel parts;
# DeepSpeed's own launcher (from .venv) starts build/bin/pretrain_gpt.py on 2 CPU ranks.
#   megatron_deepspeed.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
source "$(dirname "$0")/common.sh"
cp $DATA/megatron/openwebtext-1000.decoded.jsonl oscar-1GB.jsonl
cp $DATA/megatron/gpt2-tiny-vocab.json gpt2-vocab.json
cp $DATA/megatron/gpt2-tiny-merges.txt gpt2-merges.txt

tutorial megatron-deepspeed-data
for ext in bin idx; do
  cmp meg-gpt2_text_document.$ext $DATA/megatron/meg-gpt2-openwebtext_text_document.$ext ||
    fail "meg-gpt2_text_document.$ext differs from Megatron-DeepSpeed's"
done

# Bit-for-bit comparisons need a run that repeats its own bits. On CPU, MKL's multi-threaded sgemm
# does not: a process's first forward logged a loss 1-8 float32 ulps off in 19 of 370 runs with
# 2 threads (MKL_DYNAMIC=FALSE and MKL_CBWR=AUTO[,STRICT] too), 0 of 230 with MKL_NUM_THREADS=1;
# the weights stayed equal (Adam's first step follows the gradient's sign). So one BLAS thread.
export MKL_NUM_THREADS=1
small=(--flag --num-layers 2 --flag --hidden-size 64 --flag --num-attention-heads 4 --flag --seq-length 64
       --flag --max-position-embeddings 64 --flag --global-batch-size 4 --flag --eval-iters 2)
# 10 iterations saved at 10, then the same command with --train-iters 20 resumes; and 20 in one go elsewhere.
run345m() {  # run345m TRAIN_ITERS CHECKPOINT_PATH
  tutorial megatron-deepspeed-345m "${small[@]}" --flag --micro-batch-size 2 --flag --train-iters $1 --flag --lr-decay-iters 20 \
    --flag --log-interval 5 --flag --save-interval 10 --flag --eval-interval 10 \
    --sub "build/bin/pretrain_gpt.py" "$BIN/pretrain_gpt.py" --sub "MASTER_PORT=6000" "MASTER_PORT=$(free_port)" --sub "CHECKPOINT_PATH=checkpoints/gpt2_345m" "CHECKPOINT_PATH=$2"
  mv megatron-deepspeed-345m.log "345m_$1_$(basename $2).log"
}
run345m 10 checkpoints/gpt2_345m
[[ $(cat checkpoints/gpt2_345m/latest_checkpointed_iteration.txt) == 10 ]] || fail "no checkpoint at iteration 10"
grep -q -- '--local-rank=0 from the launcher' 345m_10_gpt2_345m.log || fail "the launcher's --local-rank was not seen"
run345m 20 checkpoints/gpt2_345m
grep -q 'loading checkpoint from .* at iteration 10' 345m_20_gpt2_345m.log || fail "the second run did not resume at iteration 10"
run345m 20 checkpoints/uninterrupted
[[ "$(losses checkpoints/gpt2_345m/metrics.jsonl)" == "$(losses checkpoints/uninterrupted/metrics.jsonl)" ]] ||
  fail "resumed losses differ from the uninterrupted run's: $(losses checkpoints/gpt2_345m/metrics.jsonl) vs $(losses checkpoints/uninterrupted/metrics.jsonl)"

tutorial megatron-deepspeed-tp4 "${small[@]}" --flag --micro-batch-size 1 --flag --train-iters 6 --flag --lr-decay-iters 6 \
  --flag --log-interval 2 --flag --save-interval 6 --flag --eval-interval 6 \
  --sub '"train_batch_size": 16' '"train_batch_size": 4' --sub '"train_micro_batch_size_per_gpu": 4' '"train_micro_batch_size_per_gpu": 1'
log=megatron-deepspeed-tp4.log
[[ $(grep -c 'although --deepspeed is missing' $log) == 1 ]] || fail "expected one warning about the missing --deepspeed"
grep -q 'DeepSpeed config ds.json: ZeRO stage 3, CPU offload optimizer, micro batch 1, global batch 4, fp16' $log || fail "ds.json was not applied"
grep -q 'initialized tensor model parallel with size 4' $log || fail "not tensor parallel over 4 ranks"
for tp in 00 01 02 03; do [[ -f checkpoints/gpt2_tp4/iter_0000006/mp_rank_$tp/model_optim_rng.pt ]] || fail "no part mp_rank_$tp"; done
[[ $(losses checkpoints/gpt2_tp4/metrics.jsonl | wc -l) == 3 ]] || fail "expected losses at iterations 2, 4, 6"

# The tutorial's own launcher: DeepSpeed's `deepspeed --num_gpus 2 pretrain_gpt.py ...` (from .venv, on
# its CPU accelerator) starts build/bin/pretrain_gpt.py, which runs the binary; it passes --local_rank=N.
DS_ACCELERATOR=cpu deepspeed --num_gpus 2 --master_port "$(free_port)" "$BIN/pretrain_gpt.py" --num-layers 2 --hidden-size 64 \
  --num-attention-heads 4 --seq-length 64 --micro-batch-size 1 --global-batch-size 4 --train-iters 2 --lr 0.00015 \
  --data-path meg-gpt2_text_document --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt --eval-iters 1 --log-interval 1 \
  --save checkpoints/ds_launcher > ds_launcher.log 2>&1 || { tail -n 30 ds_launcher.log; fail "deepspeed's launcher did not run pretrain_gpt.py"; }
grep -q 'initialized data parallel with size 2' ds_launcher.log && grep -q -- '--local-rank=0 from the launcher' ds_launcher.log ||
  { tail -n 30 ds_launcher.log; fail "deepspeed's launcher: not 2 ranks, or no --local_rank"; }
[[ $(losses checkpoints/ds_launcher/metrics.jsonl | wc -l) == 2 ]] || fail "deepspeed's launcher: expected 2 logged iterations"
echo "megatron-deepspeed: ok"
