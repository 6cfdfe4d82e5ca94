#!/usr/bin/env bash
# Everything the issues ask to measure on the GPU machine, in one command (the
# device tool gives 10 minutes per command): build the trainer alone, then
#  1. GPT-2 124M and 345M, bf16, seq 1024: pretrain_gpt vs the plain PyTorch loop
#     (tests/bench/gpu/baseline_train.py) eager and with torch.compile;
#  2. GPT-2 1.5B without offload (one GPU, activation checkpointing);
#  3. ZeRO-3 + CPU offload (optimizer and parameters): the largest of a list of
#     GPT-2-shaped models that trains, with tokens/s and TFLOPs;
#  4. the optimizer step of a 1.2B GPT-2 on the GPU and offloaded to the CPU,
#     against PyTorch's fused AdamW on the host.
# Results: $OUT/gpu_bench.md (a table for docs/benchmarks.md) and $OUT/logs/.
# MFU uses PaLM's 6N + 12 L h T FLOPs per token (N without position embeddings)
# against a dense bf16 peak of 989.4 TFLOPS (H100/H200 SXM; PEAK_TFLOPS to change).
#   tests/bench/gpu/run_gpu.sh                 # on the GPU machine (PART=1: build, 124M, 345M;
#                                              #  PART=2: 1.5B; PART=3: offload; PART=4: optimizer
#                                              #  step; default all)
#   DRY=1 BIN=build/bin tests/bench/gpu/run_gpu.sh   # tiny shapes on CPU, to test the script
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT/logs"
# The project's .venv where there is one (here); the GPU machine's python3 has torch.
if [[ -z "${PY:-}" ]]; then PY=python3; [[ -x .venv/bin/python ]] && PY=.venv/bin/python; fi
PEAK=${PEAK_TFLOPS:-989.4}
DATA=tests/data/megatron/meg-gpt2-openwebtext_text_document
VOCAB=tests/data/gpt2/gpt2-vocab.json
if [[ -z "${BIN:-}" ]]; then
  PREFIX=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DZLM_BUILD_DATA_TOOLS=OFF -DZLM_BUILD_TESTS=OFF \
    -DZLM_BUILD_TRAINER=ON -DCMAKE_PREFIX_PATH="$PREFIX" > "$OUT/logs/cmake.log" 2>&1 &&
    cmake --build build-gpu -j "$(nproc)" >> "$OUT/logs/cmake.log" 2>&1 || { tail -30 "$OUT/logs/cmake.log"; exit 1; }
  BIN=build-gpu/bin
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/logs/gpu.txt" 2>/dev/null || echo "no GPU" > "$OUT/logs/gpu.txt"
DEVICE=cuda EXTRA=(--bf16) SEQ=1024 ITERS=30 LOGI=10
if [[ -n "${DRY:-}" ]]; then DEVICE=cpu EXTRA=() SEQ=64 ITERS=4 LOGI=2; fi

PART=${PART:-all}
table="$OUT/gpu_bench.md"
echo "GPU: $(cat "$OUT/logs/gpu.txt"); seq $SEQ; MFU = tokens/s * (6N + 12*L*h*T) / ${PEAK}e12" > "$table"
echo "| model | implementation | tokens/s | MFU | peak memory (GiB) | s/iteration |" >> "$table"
echo "|---|---|---|---|---|---|" >> "$table"

row() {  # row MODEL IMPL JSON-FILE LAYERS HIDDEN
  $PY - "$@" "$SEQ" "$PEAK" >> "$table" <<'PYEOF'
import json, sys
model, impl, path, L, h, T, peak = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
try:
    lines = [json.loads(l) for l in open(path) if l.strip().startswith("{")]
    m = [l for l in lines if "tokens_per_second" in l][-1]
except (OSError, IndexError, ValueError):
    print(f"| {model} | {impl} | failed (see logs) | | | |"); sys.exit()
n = m.get("params")
if n is None:  # ours: the memory plan's count, without the position embeddings (T x h), as the baseline counts
    n = next(l["memory_plan"]["parameters"] for l in lines if "memory_plan" in l) - T * h
tok = m["tokens_per_second"]
mfu = tok * (6 * n + 12 * L * h * T) / (peak * 1e12)
print(f"| {model} ({n/1e6:.0f}M) | {impl} | {tok:,.0f} | {100*mfu:.1f}% | {m.get('peak_device_bytes', 0)/2**30:.1f} | {m['seconds_per_iteration']:.3f} |")
PYEOF
}

ours() {  # ours NAME LAYERS HIDDEN HEADS MICRO GLOBAL TIMEOUT [flags]
  local name=$1 L=$2 h=$3 heads=$4 micro=$5 global=$6 limit=$7
  shift 7
  rm -rf "$OUT/ckpt"
  timeout "$limit" $BIN/pretrain_gpt --num-layers $L --hidden-size $h --num-attention-heads $heads --seq-length $SEQ \
    --max-position-embeddings $SEQ --micro-batch-size $micro --global-batch-size $global --train-iters $ITERS --lr 1.5e-4 \
    --lr-warmup-iters 2 --clip-grad 1.0 --data-path $DATA --vocab-file $VOCAB --split 949,50,1 --log-interval $LOGI \
    --eval-interval 100000 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --device $DEVICE "${EXTRA[@]}" \
    --data-cache-path "$OUT/cache" --metrics-out "$OUT/logs/$name.jsonl" "$@" > "$OUT/logs/$name.log" 2>&1
  echo "$name: exit $?" >> "$OUT/logs/status.txt"
}
base() {  # base NAME LAYERS HIDDEN HEADS MICRO GLOBAL TIMEOUT [--compile]
  local name=$1 L=$2 h=$3 heads=$4 micro=$5 global=$6 limit=$7
  shift 7
  timeout "$limit" $PY tests/bench/gpu/baseline_train.py --layers $L --hidden $h --heads $heads --seq $SEQ --micro $micro \
    --global-batch $global --iters $ITERS --warmup $LOGI --device $DEVICE --peak-tflops $PEAK "$@" > "$OUT/logs/$name.jsonl" 2> "$OUT/logs/$name.log"
  echo "$name: exit $?" >> "$OUT/logs/status.txt"
}

# 1. 124M and 345M.
if [[ $PART == all || $PART == 1 ]]; then
if [[ -n "${DRY:-}" ]]; then S124=(2 64 4 4 8) S345=(2 96 4 4 8); else S124=(12 768 12 16 128) S345=(24 1024 16 8 64); fi
ours gpt2_124m "${S124[@]}" 300; row "GPT-2 124M" "zerolm pretrain_gpt" "$OUT/logs/gpt2_124m.jsonl" "${S124[0]}" "${S124[1]}"
base py_124m "${S124[@]}" 300; row "GPT-2 124M" "PyTorch eager" "$OUT/logs/py_124m.jsonl" "${S124[0]}" "${S124[1]}"
base pyc_124m "${S124[@]}" 400 --compile; row "GPT-2 124M" "PyTorch torch.compile" "$OUT/logs/pyc_124m.jsonl" "${S124[0]}" "${S124[1]}"
ours gpt2_345m "${S345[@]}" 300; row "GPT-2 345M" "zerolm pretrain_gpt" "$OUT/logs/gpt2_345m.jsonl" "${S345[0]}" "${S345[1]}"
base py_345m "${S345[@]}" 300; row "GPT-2 345M" "PyTorch eager" "$OUT/logs/py_345m.jsonl" "${S345[0]}" "${S345[1]}"
base pyc_345m "${S345[@]}" 400 --compile; row "GPT-2 345M" "PyTorch torch.compile" "$OUT/logs/pyc_345m.jsonl" "${S345[0]}" "${S345[1]}"
fi


# 2. GPT-2 1.5B without offload.
if [[ $PART == all || $PART == 2 ]]; then
if [[ -n "${DRY:-}" ]]; then S1558=(3 64 4 2 4); else S1558=(48 1600 25 4 32); fi
ours gpt2_1558m "${S1558[@]}" 400 --checkpoint-activations
row "GPT-2 1.5B" "zerolm, no offload, activation checkpointing" "$OUT/logs/gpt2_1558m.jsonl" "${S1558[0]}" "${S1558[1]}"
fi

# 3. ZeRO-3 + offload: the largest that trains (largest first; 180 s each keeps the three under 10 minutes).
if [[ $PART == all || $PART == 3 ]]; then

# 6.4B, 4.5B, 2.5B: host memory holds 16 B per parameter (master = parameter shard, Adam m and v, gradient).
if [[ -n "${DRY:-}" ]]; then SHAPES=("2 128 4" "2 64 4"); else SHAPES=("32 4096 32" "40 3072 24" "32 2560 32"); fi
for shape in "${SHAPES[@]}"; do
  read -r L h heads <<< "$shape"
  ITERS_SAVE=$ITERS LOGI_SAVE=$LOGI
  ITERS=4 LOGI=2
  ours offload_${L}x$h $L $h $heads 1 8 180 --zero-stage 3 --cpu-offload --offload-params
  ITERS=$ITERS_SAVE LOGI=$LOGI_SAVE
  row "GPT-2-shaped L=$L h=$h" "zerolm ZeRO-3 + CPU offload (optimizer, parameters)" "$OUT/logs/offload_${L}x$h.jsonl" "$L" "$h"
  grep -q '"tokens_per_second"' "$OUT/logs/offload_${L}x$h.jsonl" 2>/dev/null && break
done
fi

if [[ $PART == all || $PART == 4 ]]; then
# 4. The optimizer step alone (gradient norm, clipping, AdamW) of a 1.2B GPT-2: on the GPU, and
# with --cpu-offload on the host (what ZeRO-Offload's users see dominate), against PyTorch's fused
# AdamW on the host CPU (DeepSpeed's CPU Adam is compared on the CPU machine: bench_optimizer.sh).
if [[ -n "${DRY:-}" ]]; then OPT=(2 128 4 cpu); else OPT=(24 2048 16 cuda); fi
opt_secs() { sed -n 's/.*"seconds_per_step": \([0-9.e-]*\).*/\1/p' | xargs -r printf "%.4f"; }
{
  echo
  echo "| optimizer step, GPT-2 L=${OPT[0]} h=${OPT[1]}, vocab 50304 | s/step |"
  echo "|---|---|"
  for v in "" --offload; do
    if [[ ! -x $BIN/zlm_bench_optimizer ]]; then  # a trainer-alone build has no CLI11 for it
      echo "| zerolm on ${OPT[3]}${v:+, optimizer offloaded to the CPU} | not built (carry build/bin from the full build) |"
      continue
    fi
    s=$(timeout 150 $BIN/zlm_bench_optimizer --layers ${OPT[0]} --hidden ${OPT[1]} --heads ${OPT[2]} --device ${OPT[3]} --iters 3 $v \
        2>> "$OUT/logs/optimizer.log" | tee -a "$OUT/logs/optimizer.log" | opt_secs)
    echo "| zerolm on ${OPT[3]}${v:+, optimizer offloaded to the CPU} | ${s:-failed (see logs)} |"
  done
  s=$(timeout 150 $PY tests/bench/baseline_optimizer.py time torch ${OPT[0]} ${OPT[1]} 50304 3 2>> "$OUT/logs/optimizer.log" |
      tee -a "$OUT/logs/optimizer.log" | opt_secs)
  echo "| torch.optim.AdamW(fused=True) on the host CPU | ${s:-failed (see logs)} |"
} >> "$table"
fi
cat "$table"
