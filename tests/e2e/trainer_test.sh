#!/usr/bin/env bash
# pretrain_gpt on CPU, a tiny GPT-2 on the OpenWebText fixture (Megatron-made
# .bin/.idx, tiny vocab):
#  1. it learns: the last validation loss is clearly below the first;
#  2. resuming reproduces the uninterrupted run: stop at iteration 150
#     (--exit-interval, checkpoint), resume with --load, and the logged losses
#     of iterations 200-300 and the final validation equal the uninterrupted
#     run's exactly (fp32, no dropout): every iteration's loss and the final
#     weights and Adam moments bit for bit (compare_runs.py, tolerance 0);
#  3. a corrupt checkpoint is a clear error, also when damaged inside the archive
#     (pretrain_gpt, convert_gpt and generate_gpt name the damaged tensor);
#     a diverging run stops at the first NaN and saves no NaN state;
#  4. Megatron's timers (--timing-log-level) add up to the iteration's time;
#     --profile --use-pytorch-profiler writes a trace of the steps asked for;
#  4. Megatron's tutorial flags are accepted (parsing only: --help path).
#   trainer_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
# Bit-for-bit comparisons (resume, generation) need runs that repeat their own bits: on the CPU
# that takes one BLAS thread (MKL's threaded GEMM can move a process's first logged loss by a few ulps).
export MKL_NUM_THREADS=1
SRC=$1 BIN=$2
DATA=$SRC/tests/data/megatron
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
common=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --micro-batch-size 4 --global-batch-size 8
        --seq-length 64 --max-position-embeddings 64 --train-iters 300 --lr 0.003 --lr-decay-style cosine
        --min-lr 0.0003 --lr-warmup-iters 20 --weight-decay 0.01 --clip-grad 1.0
        --data-path $DATA/meg-gpt2-openwebtext_text_document --vocab-file $DATA/gpt2-tiny-vocab.json
        --merge-file $DATA/gpt2-tiny-merges.txt --split 949,50,1 --log-interval 1 --eval-interval 100
        --eval-iters 5 --hidden-dropout 0 --attention-dropout 0 --seed 1234 --data-cache-path $W/cache)
$BIN/pretrain_gpt "${common[@]}" --save full > full.log 2>&1
first=$(grep -m1 'validation loss at iteration' full.log | sed 's/.*lm loss value: \([^ ]*\).*/\1/')
last=$(grep 'validation loss at the end of training for val' full.log | sed 's/.*lm loss value: \([^ ]*\).*/\1/')
echo "validation loss: first $first, last $last"
python3 -c "import sys; f, l = float('$first'), float('$last'); sys.exit(0 if l < f - 0.2 else 1)" ||
  { echo "FAIL: validation loss did not fall clearly"; cat full.log; exit 1; }
grep -q 'successfully saved checkpoint at iteration     300' full.log && [[ "$(cat full/latest_checkpointed_iteration.txt)" == 300 ]]

$BIN/pretrain_gpt "${common[@]}" --save part --exit-interval 150 > part1.log 2>&1
[[ "$(cat part/latest_checkpointed_iteration.txt)" == 150 ]] && [[ -f part/iter_0000150/mp_rank_00/model_optim_rng.pt ]]
$BIN/pretrain_gpt "${common[@]}" --save part --load part > part2.log 2>&1
grep -q 'loading checkpoint from part at iteration 150' part2.log
grep -q 'loaded train index cache' part2.log && ls $W/cache/meg-gpt2-openwebtext_text_document_train_indexmap_2400ns_64sl_1234s_doc_idx.npy >/dev/null
for it in 200 250 300; do
  a=$(grep " iteration *$it/" full.log | sed 's/.*lm loss: \([^ ]*\).*/\1/')
  b=$(grep " iteration *$it/" part2.log | sed 's/.*lm loss: \([^ ]*\).*/\1/')
  [[ -n "$a" && "$a" == "$b" ]] || { echo "FAIL: iteration $it loss $a (uninterrupted) vs $b (resumed)"; exit 1; }
done
[[ "$(grep 'end of training for val' full.log | sed 's/.*value: //')" == "$(grep 'end of training for val' part2.log | sed 's/.*value: //')" ]] ||
  { echo "FAIL: final validation differs after resume"; exit 1; }
# Every iteration's loss (metrics.jsonl, 9 digits) and the final weights and moments, bit for bit.
[[ $(grep -c '"lr"' part/metrics.jsonl) == 300 ]] || { echo "FAIL: the resumed run's metrics.jsonl lacks iterations"; exit 1; }
$SRC/.venv/bin/python $SRC/tests/e2e/zero/compare_runs.py --rtol 0 --atol 0 full part ||
  { echo "FAIL: the resumed run is not bit-identical to the uninterrupted one"; exit 1; }

# generate_gpt: greedy decoding is deterministic and continues the prompt; sampling is seeded.
if [[ -x $BIN/generate_gpt ]]; then
  g=(--load full --vocab-file $DATA/gpt2-tiny-vocab.json --merge-file $DATA/gpt2-tiny-merges.txt --max-new-tokens 12 -q)
  a=$($BIN/generate_gpt "${g[@]}" --prompt "The city" --temperature 0)
  b=$($BIN/generate_gpt "${g[@]}" --prompt "The city" --temperature 0)
  [[ "$a" == "$b" && "$a" == "The city"* && ${#a} -gt 8 ]] || { echo "FAIL: greedy generation '$a' / '$b'"; exit 1; }
  c=$($BIN/generate_gpt "${g[@]}" --prompt "The city" --temperature 0.9 --top-k 20 --top-p 0.9 --seed 7)
  d=$($BIN/generate_gpt "${g[@]}" --prompt "The city" --temperature 0.9 --top-k 20 --top-p 0.9 --seed 7)
  [[ "$c" == "$d" ]] || { echo "FAIL: seeded sampling differs"; exit 1; }
  if $BIN/generate_gpt --load nowhere --vocab-file $DATA/gpt2-tiny-vocab.json --merge-file $DATA/gpt2-tiny-merges.txt --prompt x -q 2> gen.err; then
    echo "FAIL: missing checkpoint accepted"; exit 1
  fi
  grep -q "nowhere: no checkpoint" gen.err
fi

# --load of a directory without a checkpoint: the tutorial's --save X --load X starts fresh (Megatron), elsewhere it is an error.
if $BIN/pretrain_gpt "${common[@]}" --train-iters 1 --load nowhere > noload.log 2>&1; then echo "FAIL: --load nowhere accepted"; exit 1; fi
grep -q -- '--load nowhere: no checkpoint there' noload.log
$BIN/pretrain_gpt "${common[@]}" --train-iters 1 --eval-iters 0 --save fresh --load fresh > fresh.log 2>&1
grep -q 'will not load any checkpoints and will start from random' fresh.log

# 32 bytes damaged inside the archive's largest tensor (the zip CRC no longer matches, which torch's
# reader does not check): every tool that reads the checkpoint refuses it, naming the file and tensor.
cp -r part damaged
$SRC/.venv/bin/python - damaged/iter_0000300/mp_rank_00/model_optim_rng.pt <<'PYEOF'
import struct, sys, zipfile
f = sys.argv[1]
info = max((i for i in zipfile.ZipFile(f).infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
raw = bytearray(open(f, "rb").read())
name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
start = info.header_offset + 30 + name_len + extra_len + 1000
raw[start:start + 32] = bytes(b ^ 0x5A for b in raw[start:start + 32])
open(f, "wb").write(raw)
PYEOF
damaged='damaged/iter_0000300/mp_rank_00/model_optim_rng.pt: tensor model.wte.weight is damaged'
if $BIN/pretrain_gpt "${common[@]}" --train-iters 301 --load damaged > damaged.log 2>&1; then echo "FAIL: damaged checkpoint resumed"; exit 1; fi
grep -q "$damaged" damaged.log || { cat damaged.log; exit 1; }
if $BIN/convert_gpt --load damaged --export-hf hf_damaged --vocab-file $DATA/gpt2-tiny-vocab.json --merge-file $DATA/gpt2-tiny-merges.txt \
    > damaged_convert.log 2>&1; then echo "FAIL: convert_gpt exported a damaged checkpoint"; exit 1; fi
grep -q "$damaged" damaged_convert.log || { cat damaged_convert.log; exit 1; }
if $BIN/generate_gpt --load damaged --prompt "The" --vocab-file $DATA/gpt2-tiny-vocab.json --merge-file $DATA/gpt2-tiny-merges.txt \
    > damaged_generate.log 2>&1; then echo "FAIL: generate_gpt read a damaged checkpoint"; exit 1; fi
grep -q "$damaged" damaged_generate.log || { cat damaged_generate.log; exit 1; }

echo "garbage" > part/iter_0000300/mp_rank_00/model_optim_rng.pt
if $BIN/pretrain_gpt "${common[@]}" --load part > bad.log 2>&1; then echo "FAIL: corrupt checkpoint accepted"; exit 1; fi
grep -q 'cannot load the checkpoint' bad.log

# A diverging run (--lr 1e30) stops at the first NaN/inf loss or gradient norm, before the update,
# saving nothing (Megatron's --check-for-nan-in-loss-and-grad); the run's earlier checkpoint stays.
if $BIN/pretrain_gpt "${common[@]}" --lr 1e30 --lr-warmup-iters 0 --save-interval 1 --save diverge > diverge.log 2>&1; then
  echo "FAIL: a diverging run exited 0"; exit 1
fi
grep -q 'error: iteration [0-9]*: the \(loss\|gradient norm\) is \(NaN\|infinite\); stopping before the update' diverge.log || { cat diverge.log; exit 1; }
$SRC/.venv/bin/python - diverge <<'PYEOF' 2>/dev/null || [[ ! -e diverge/latest_checkpointed_iteration.txt ]]
import math, os, sys, torch
d = sys.argv[1]
it = int(open(os.path.join(d, "latest_checkpointed_iteration.txt")).read())
m = torch.jit.load(os.path.join(d, "iter_%07d" % it, "mp_rank_00", "model_optim_rng.pt"))
assert all(torch.isfinite(p).all() for p in m.model.parameters()), "a NaN checkpoint was saved"
PYEOF
if $BIN/pretrain_gpt "${common[@]}" --lr 1e30 --lr-warmup-iters 0 --train-iters 4 --eval-iters 0 --no-check-for-nan-in-loss-and-grad \
    > diverge_on.log 2>&1; then :; else echo "FAIL: --no-check-for-nan-in-loss-and-grad stopped"; cat diverge_on.log; exit 1; fi
# Megatron's timers (--timing-log-level): the block after each log line, the same phases in
# metrics.jsonl and TensorBoard (<name>-time), adding up to at least 80% and at most 101% of the
# iteration's time.
$BIN/pretrain_gpt "${common[@]}" --train-iters 20 --log-interval 10 --eval-iters 0 --timing-log-level 2 --save timed \
  --tensorboard-dir tb_timed --log-timers-to-tensorboard > timed.log 2>&1 || { echo "FAIL: --timing-log-level"; tail timed.log; exit 1; }
grep -q '^(min, max) time across ranks (ms):$' timed.log && grep -q '^    forward-backward \.*: ([0-9.]*, [0-9.]*)$' timed.log
grep -rqa 'forward-backward-time' tb_timed && grep -rqa 'optimizer-inner-step-time' tb_timed ||
  { echo "FAIL: the phases' <name>-time scalars are not in the TensorBoard events"; exit 1; }
$SRC/.venv/bin/python - timed/metrics.jsonl <<'PYEOF'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "lr" in r]
assert len(rows) == 2, rows
for r in rows:
    t = r["timers_ms"]
    assert list(t) == ["forward-backward", "all-grads-sync", "optimizer", "optimizer-clip-main-grad", "optimizer-inner-step"], t
    parts = t["forward-backward"] + t["all-grads-sync"] + t["optimizer"]
    step = 1000 * r["seconds_per_iteration"]
    assert 0.8 * step <= parts <= 1.01 * step, (parts, step)
    assert t["optimizer-clip-main-grad"] + t["optimizer-inner-step"] <= t["optimizer"] * 1.001, t
PYEOF
# Megatron's --profile --use-pytorch-profiler: LibTorch's profiler records this run's steps 2 and 3
# (torch.profiler's schedule as Megatron sets it: ProfilerStep#2, #3, nothing before or after) into
# one Chrome trace in --tensorboard-dir (no temporary file left), which the GPU kit's
# trace_summary.py reads; a run that ends inside the range writes what it recorded.
$BIN/pretrain_gpt "${common[@]}" --train-iters 6 --eval-iters 0 --profile --use-pytorch-profiler --profile-step-start 2 \
  --profile-step-end 4 --tensorboard-dir tb_prof > prof.log 2>&1 || { echo "FAIL: --profile"; tail prof.log; exit 1; }
traces=(tb_prof/*.pt.trace.json)
[[ ${#traces[@]} == 1 && -s ${traces[0]} ]] && ! ls tb_prof/*.tmp 2>/dev/null || { echo "FAIL: --profile wrote ${traces[*]}"; exit 1; }
grep -q "profile of this run's steps 2-3: ${traces[0]}" prof.log
steps_in() {  # steps_in TRACE: its ProfilerStep ranges; it fails without the model's operators
  $SRC/.venv/bin/python - "$1" <<'PYEOF'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
ops = {e["name"] for e in ev if e.get("cat") == "cpu_op"}
assert {"aten::addmm", "aten::layer_norm"} <= ops or {"aten::mm", "aten::layer_norm"} <= ops, sorted(ops)[:40]
print(" ".join(sorted(e["name"] for e in ev if e.get("name", "").startswith("ProfilerStep#"))))
PYEOF
}
[[ $(steps_in "${traces[0]}") == "ProfilerStep#2 ProfilerStep#3" ]] || { echo "FAIL: profiled $(steps_in "${traces[0]}")"; exit 1; }
$BIN/pretrain_gpt "${common[@]}" --train-iters 3 --eval-iters 0 --profile --use-pytorch-profiler --profile-step-start 2 \
  --profile-step-end 10 --tensorboard-dir tb_prof_end > prof_end.log 2>&1 || { echo "FAIL: --profile past the end"; tail prof_end.log; exit 1; }
[[ $(steps_in tb_prof_end/*.pt.trace.json) == "ProfilerStep#2 ProfilerStep#3" ]] || { echo "FAIL: a run ending inside the range"; exit 1; }
$SRC/.venv/bin/python $SRC/tests/bench/gpu/trace_summary.py "${traces[0]}" > prof.md
grep -q '^| ProfilerStep#3 | [0-9.]* | 0.00 |' prof.md && grep -q '^| matrix products | [0-9.]* | [0-9.]*% |$' prof.md ||
  { echo "FAIL: trace_summary.py"; cat prof.md; exit 1; }
# It needs --tensorboard-dir; without --profile it records nothing (a note), and its step flags are not checked.
if $BIN/pretrain_gpt "${common[@]}" --profile --use-pytorch-profiler > prof_nodir.log 2>&1; then echo "FAIL: no --tensorboard-dir accepted"; exit 1; fi
grep -q -- "--use-pytorch-profiler.*--tensorboard-dir" prof_nodir.log
$BIN/pretrain_gpt "${common[@]}" --train-iters 1 --eval-iters 0 --use-pytorch-profiler --profile-step-start 20 --tensorboard-dir tb_note \
  > prof_note.log 2>&1 || { echo "FAIL: --use-pytorch-profiler without --profile"; tail prof_note.log; exit 1; }
grep -q "use-pytorch-profiler without --profile: nothing is profiled" prof_note.log && ! ls tb_note/*.pt.trace.json 2>/dev/null
if $BIN/pretrain_gpt "${common[@]}" --timing-log-option median > tlo.log 2>&1; then echo "FAIL: --timing-log-option median accepted"; exit 1; fi
grep -q -- '--timing-log-option' tlo.log
# An unknown flag is named; the tutorial's --fp16 on CPU warns and trains in fp32 (checked above by the run itself).
if $BIN/pretrain_gpt "${common[@]}" --no-such-flag > flag.log 2>&1; then echo "FAIL: unknown flag accepted"; exit 1; fi
grep -q "unknown flag '--no-such-flag'" flag.log
echo "trainer ok"
