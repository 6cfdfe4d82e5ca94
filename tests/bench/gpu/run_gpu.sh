#!/usr/bin/env bash
# What the GPU issue measures, in parts that each fit one 10-minute command of
# the device tool (PART_BUDGET seconds, 540 by default: every run inside a part
# gets at most what is left of it). Every part writes its logs as it goes
# ($OUT/logs/) and its table ($OUT/gpu_bench.md), row by row, so a part that
# fails or is cut off still leaves what it measured.
#   0  the machine: GPU name and peak, nvcc, Python.h (torch.compile needs it), the
#      build (carried or made here), the label-gpu tests (the fused loss's kernel)
#   1  GPT-2 124M, bf16, seq 1024: pretrain_gpt with and without the gradient-
#      accumulation fusion, the plain PyTorch loop under torch.compile, pretrain_gpt
#      again, PyTorch eager
#   2  345M pretrain_gpt
#   3  345M PyTorch eager and torch.compile
#   4  GPT-2 1.5B without offload (one GPU, activation checkpointing, then without)
#   5  ZeRO-3 + CPU offload (optimizer and parameters): the largest GPT-2 shape
#      that the host's memory holds by the memory plan's bytes per parameter
#   6  the optimizer step of a 1.2B GPT-2 on the GPU and offloaded to the CPU,
#      against PyTorch's fused AdamW on the host
#   7  llm.c (train_gpt2cu -e d12, same batch and sequence, on our data) built
#      here from a copy of it that the run carries (LLMC_DIR, .llmc by default),
#      or LLMC_BIN, built already
#   8  compute-sanitizer (memcheck, synccheck) over the offload path
#   9  where a 124M step's time goes: LibTorch's profiler over two steps
#      (trace_summary.py), then Megatron's timers (--timing-log-level 1)
# The build: BIN=DIR, or the carried trainer-alone build (build-kit/bin, made by
# tests/bench/gpu/build_kit.sh on the CPU machine), or else one built here into
# build-gpu (nvcc and CMake are on the GPU machine). LD_LIBRARY_PATH gets the
# GPU machine's torch and NVIDIA libraries and the carried lib/ (the carried
# binaries have no RUNPATH).
# Every part's table has the same columns, so parts compare by their rows: llm.c's
# (part 7) beside pretrain_gpt's and PyTorch's 124M rows (part 1) is
#   tail -n +4 out7/gpu_bench.md >> out1/gpu_bench.md
# MFU: PaLM's 6N + 12 L h T FLOPs per token (N without position embeddings)
# against the GPU's dense bf16 peak by its name (H100/H200 SXM 989.4, H100
# PCIe 756; PEAK_TFLOPS overrides).
#   PART=1 tests/bench/gpu/run_gpu.sh                  # on the GPU machine, one part per command
#   DRY=1 BIN=build/bin PART=1 tests/bench/gpu/run_gpu.sh   # tiny shapes on the CPU (dry_test.sh)
set -uo pipefail
cd "$(dirname "$0")/../../.."
source tests/bench/gpu/env.sh  # PY, LD_LIBRARY_PATH, START, OUT
BUDGET=${PART_BUDGET:-540}
mkdir -p "$OUT/logs"
PART=${PART:-0}
table="$OUT/gpu_bench.md"
trap 'echo; cat "$table" 2>/dev/null' EXIT
DATA=tests/data/megatron/meg-gpt2-openwebtext_text_document
VOCAB=tests/data/gpt2/gpt2-vocab.json
log() { echo "[kit] $*" | tee -a "$OUT/logs/status.txt" >&2; }
# left LIMIT: LIMIT, or what is left of the part's budget less a margin for the table (at least 1).
left() { local l=$(( BUDGET - (SECONDS - START) - 15 )); (( l > $1 )) && l=$1; (( l < 1 )) && l=1; echo $l; }

# ---- the GPU and its peak --------------------------------------------------
GPU=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
[[ -n $GPU ]] || GPU="no GPU"
if [[ -n "${PEAK_TFLOPS:-}" ]]; then PEAK=$PEAK_TFLOPS
elif [[ $GPU == *PCIe* ]]; then PEAK=756
else PEAK=989.4; fi  # H100 SXM (HBM3), H200
echo "$GPU" > "$OUT/logs/gpu.txt"

# The table first: a part whose build fails still leaves one, saying so.
DEVICE=cuda EXTRA=(--bf16) SEQ=1024 ITERS=30 LOGI=10 SANITIZE=()
if [[ -n "${DRY:-}" ]]; then DEVICE=cpu EXTRA=() SEQ=64 ITERS=4 LOGI=2; fi

echo "Part $PART. GPU: $GPU; seq $SEQ; MFU = tokens/s * (6N + 12*L*h*T) / ${PEAK}e12" > "$table"
echo "| model | implementation | tokens/s | MFU | peak memory (GiB) | s/iteration |" >> "$table"
echo "|---|---|---|---|---|---|" >> "$table"

# ---- the build ----------------------------------------------------------------
if [[ -z "${BIN:-}" ]]; then
  if [[ -x build-kit/bin/pretrain_gpt ]] && LD_LIBRARY_PATH="$PWD/build-kit/lib:$LD_LIBRARY_PATH" build-kit/bin/pretrain_gpt --help > /dev/null 2>&1; then
    BIN=build-kit/bin
    export LD_LIBRARY_PATH="$PWD/build-kit/lib:$LD_LIBRARY_PATH"
    log "build: the carried trainer-alone build (build-kit)"
  else
    [[ -x build-kit/bin/pretrain_gpt ]] && log "build: the carried build does not start here ($(LD_LIBRARY_PATH="$PWD/build-kit/lib:$LD_LIBRARY_PATH" build-kit/bin/pretrain_gpt --help 2>&1 | head -2 | tr '\n' ' ')); building here"
    if [[ ! -x build-gpu/bin/pretrain_gpt ]]; then
      command -v nvcc > /dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || log "build: no nvcc on PATH or in /usr/local/cuda/bin (no fused-loss kernel)"
      PREFIX=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
      log "build: trainer-alone into build-gpu (limit $(left 420) s)"
      timeout "$(left 420)" bash -c "cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DZLM_BUILD_DATA_TOOLS=OFF \
        -DZLM_BUILD_TESTS=ON -DZLM_BUILD_TRAINER=ON -DCMAKE_PREFIX_PATH='$PREFIX' && cmake --build build-gpu -j $(nproc)" \
        > "$OUT/logs/build.log" 2>&1 || { log "build failed (logs/build.log)"; tail -30 "$OUT/logs/build.log"
        echo "| (build) | failed: logs/build.log | | | | |" >> "$table"; exit 1; }
    fi
    BIN=build-gpu/bin
  fi
fi

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

ours() {  # ours NAME LAYERS HIDDEN HEADS MICRO GLOBAL LIMIT [flags]
  local name=$1 L=$2 h=$3 heads=$4 micro=$5 global=$6 limit
  limit=$(left "$7")
  shift 7
  rm -rf "$OUT/ckpt"
  timeout "$limit" "${SANITIZE[@]}" $BIN/pretrain_gpt --num-layers $L --hidden-size $h --num-attention-heads $heads --seq-length $SEQ \
    --max-position-embeddings $SEQ --micro-batch-size $micro --global-batch-size $global --train-iters $ITERS --lr 1.5e-4 \
    --lr-warmup-iters 2 --clip-grad 1.0 --data-path $DATA --vocab-file $VOCAB --split 949,50,1 --log-interval $LOGI \
    --eval-interval 100000 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --device $DEVICE "${EXTRA[@]}" \
    --data-cache-path "$OUT/cache" --metrics-out "$OUT/logs/$name.jsonl" "$@" > "$OUT/logs/$name.log" 2>&1
  log "$name: exit $? (limit $limit s)"
}
base() {  # base NAME LAYERS HIDDEN HEADS MICRO GLOBAL LIMIT [--compile]
  local name=$1 L=$2 h=$3 heads=$4 micro=$5 global=$6 limit
  limit=$(left "$7")
  shift 7
  timeout "$limit" $PY tests/bench/gpu/baseline_train.py --layers $L --hidden $h --heads $heads --seq $SEQ --micro $micro \
    --global-batch $global --iters $ITERS --warmup $LOGI --device $DEVICE --peak-tflops $PEAK "$@" > "$OUT/logs/$name.jsonl" 2> "$OUT/logs/$name.log"
  log "$name: exit $? (limit $limit s)"
}
# torch.compile needs Python's headers (Inductor builds C++); say so instead of failing late.
has_python_h() { $PY -c 'import os, sysconfig, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)'; }
compiled() {  # compiled NAME MODEL LAYERS HIDDEN HEADS MICRO GLOBAL LIMIT
  local name=$1 model=$2
  shift 2
  if has_python_h; then
    base "$name" "$@" --compile
    row "$model" "PyTorch torch.compile" "$OUT/logs/$name.jsonl" "$1" "$2"
  else
    log "$name: skipped, no Python.h for torch.compile"
    echo "| $model | PyTorch torch.compile | skipped: no Python.h on this machine | | | |" >> "$table"
  fi
}

if [[ -n "${DRY:-}" ]]; then S124=(2 64 4 4 8) S345=(2 96 4 4 8); else S124=(12 768 12 16 128) S345=(24 1024 16 8 64); fi

case $PART in
0)
  {
    echo "GPU: $GPU (peak $PEAK TFLOPS)"
    echo "nvcc: $( (command -v nvcc || ls /usr/local/cuda/bin/nvcc) 2>/dev/null | head -1 || echo missing)"
    has_python_h && echo "Python.h: present" || echo "Python.h: missing (torch.compile cannot build its kernels)"
    $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())' 2>&1
    echo "binaries: $BIN"
  } | tee "$OUT/logs/env.txt"
  if [[ -n "${DRY:-}" ]]; then
    [[ -x $BIN/zlm_trainer_gpu_tests ]] && r="built, not run (dry: no GPU)" || r="failed: not built"
    echo "| label gpu tests | $r | | | | |" >> "$table"
  elif [[ -x $BIN/zlm_trainer_gpu_tests ]]; then
    timeout "$(left 240)" $BIN/zlm_trainer_gpu_tests > "$OUT/logs/gpu_tests.log" 2>&1
    rc=$?
    log "label gpu tests: exit $rc"
    echo "| label gpu tests (the fused loss's kernel vs the ATen loss) | $([[ $rc == 0 ]] && echo passed || echo "failed (see logs)") | | | | |" >> "$table"
  else
    echo "| label gpu tests | not built (no GoogleTest where the build was made) | | | | |" >> "$table"
  fi
  ;;
1)
  # The target first, side by side: ours with and without Megatron's gradient-accumulation
  # fusion against torch.compile; then ours again (the spread between runs), and PyTorch eager.
  ours gpt2_124m "${S124[@]}" 90; row "GPT-2 124M" "zerolm pretrain_gpt" "$OUT/logs/gpt2_124m.jsonl" "${S124[0]}" "${S124[1]}"
  ours gpt2_124m_unfused "${S124[@]}" 90 --no-gradient-accumulation-fusion
  row "GPT-2 124M" "zerolm pretrain_gpt --no-gradient-accumulation-fusion" "$OUT/logs/gpt2_124m_unfused.jsonl" "${S124[0]}" "${S124[1]}"
  compiled pyc_124m "GPT-2 124M" "${S124[@]}" 200
  ours gpt2_124m_again "${S124[@]}" 90; row "GPT-2 124M" "zerolm pretrain_gpt (again)" "$OUT/logs/gpt2_124m_again.jsonl" "${S124[0]}" "${S124[1]}"
  base py_124m "${S124[@]}" 90; row "GPT-2 124M" "PyTorch eager" "$OUT/logs/py_124m.jsonl" "${S124[0]}" "${S124[1]}"
  ;;
2)
  ours gpt2_345m "${S345[@]}" 220; row "GPT-2 345M" "zerolm pretrain_gpt" "$OUT/logs/gpt2_345m.jsonl" "${S345[0]}" "${S345[1]}"
  ;;
3)
  base py_345m "${S345[@]}" 200; row "GPT-2 345M" "PyTorch eager" "$OUT/logs/py_345m.jsonl" "${S345[0]}" "${S345[1]}"
  compiled pyc_345m "GPT-2 345M" "${S345[@]}" 320
  ;;
4)
  if [[ -n "${DRY:-}" ]]; then S1558=(3 64 4 2 4); else S1558=(48 1600 25 4 32); fi
  ours gpt2_1558m "${S1558[@]}" 500 --checkpoint-activations
  row "GPT-2 1.5B" "zerolm, no offload, activation checkpointing" "$OUT/logs/gpt2_1558m.jsonl" "${S1558[0]}" "${S1558[1]}"
  # Without recomputation, when the time is left (on an H100 the first run peaked at 27.5 GiB).
  if (( $(left 1000) >= ${NORECOMPUTE_NEED:-$(( SECONDS - START ))} )); then
    ours gpt2_1558m_norecompute "${S1558[@]}" 500
    row "GPT-2 1.5B" "zerolm, no offload, no recomputation" "$OUT/logs/gpt2_1558m_norecompute.jsonl" "${S1558[0]}" "${S1558[1]}"
  fi
  ;;
5)
  # Host bytes per parameter with --bf16 and ZeRO-3 offload of optimizer and parameters: the
  # 16-bit parameter shard (2), fp32 master weights, Adam m and v (12), the gradient shard (4).
  # The largest shape whose 18 bytes per parameter take at most 80% of the available memory; one
  # micro-batch per step (each parameter goes up twice per micro-batch: forward and recomputed backward).
  avail=$(awk '/MemAvailable/ {print $2 * 1024}' /proc/meminfo)
  if [[ -n "${DRY:-}" ]]; then SHAPES=("2 128 4" "2 64 4"); MB=2; else SHAPES=("32 4096 32" "40 3072 24" "32 2560 32" "48 1600 25"); MB=8; fi
  picked=""
  for shape in "${SHAPES[@]}"; do
    read -r L h heads <<< "$shape"
    n=$(( 12 * L * h * h + 50304 * h ))
    if (( n * 18 <= avail * 8 / 10 )) || [[ -n "${DRY:-}" ]]; then picked=$shape; break; fi
    log "offload: L=$L h=$h (~$(( n / 1000000 ))M parameters, $(( n * 18 / 1073741824 )) GiB on the host) does not fit $(( avail / 1073741824 )) GiB available"
  done
  if [[ -z $picked ]]; then
    echo "| ZeRO-3 + CPU offload | no listed shape fits $(( avail / 1073741824 )) GiB | | | | |" >> "$table"
  else
    read -r L h heads <<< "$picked"
    ITERS=4 LOGI=2
    ours offload_${L}x$h $L $h $heads $MB $MB 500 --zero-stage 3 --cpu-offload --offload-params --checkpoint-activations
    row "GPT-2-shaped L=$L h=$h" "zerolm ZeRO-3 + CPU offload (optimizer, parameters)" "$OUT/logs/offload_${L}x$h.jsonl" "$L" "$h"
    # The same with the delayed parameter update (the host's AdamW of step i beside step i+1 on the
    # device) from the second step on, when the first run left the time for another.
    if (( $(left 1000) >= ${DPU_NEED:-$(( SECONDS - START ))} )); then
      ours offload_${L}x${h}_dpu $L $h $heads $MB $MB 500 --zero-stage 3 --cpu-offload --offload-params --checkpoint-activations \
        --delayed-param-update --delayed-param-update-warmup 1
      row "GPT-2-shaped L=$L h=$h" "zerolm ZeRO-3 + CPU offload, --delayed-param-update" "$OUT/logs/offload_${L}x${h}_dpu.jsonl" "$L" "$h"
    else
      log "offload: no time left for the --delayed-param-update run"
    fi
  fi
  ;;
6)
  # The optimizer step alone (gradient norm, clipping, AdamW) of a 1.2B GPT-2: on the GPU, and
  # with --offload on the host (what ZeRO-Offload's users see dominate), against PyTorch's fused
  # AdamW on the host CPU (DeepSpeed's CPU Adam is compared on the CPU machine: bench_optimizer.sh).
  if [[ -n "${DRY:-}" ]]; then OPT=(2 128 4 cpu); else OPT=(24 2048 16 cuda); fi
  opt_secs() { sed -n 's/.*"seconds_per_step": \([0-9.e-]*\).*/\1/p' | xargs -r printf "%.4f"; }
  {
    echo
    echo "| optimizer step, GPT-2 L=${OPT[0]} h=${OPT[1]}, vocab 50304 | s/step |"
    echo "|---|---|"
  } >> "$table"
  for v in "" --offload; do
    s=$(timeout "$(left 150)" $BIN/zlm_bench_optimizer --layers ${OPT[0]} --hidden ${OPT[1]} --heads ${OPT[2]} --device ${OPT[3]} --iters 3 $v \
        2>> "$OUT/logs/optimizer.log" | tee -a "$OUT/logs/optimizer.log" | opt_secs)
    echo "| zerolm on ${OPT[3]}${v:+, optimizer offloaded to the CPU} | ${s:-failed (see logs)} |" >> "$table"
  done
  s=$(timeout "$(left 150)" $PY tests/bench/baseline_optimizer.py time torch ${OPT[0]} ${OPT[1]} 50304 3 2>> "$OUT/logs/optimizer.log" |
      tee -a "$OUT/logs/optimizer.log" | opt_secs)
  echo "| torch.optim.AdamW(fused=True) on the host CPU | ${s:-failed (see logs)} |" >> "$table"
  ;;
7)
  # llm.c's token files: a 256-int32 header (magic 20240520, version 1, token count) and uint16 tokens.
  LLMC=${LLMC_DIR:-.llmc}
  $PY tests/bench/gpu/to_llmc.py "$DATA" "$OUT/llmc_tokens.bin" > "$OUT/logs/llmc_convert.log" 2>&1 || { log "llm.c: conversion failed"; }
  if [[ -n "${DRY:-}" ]]; then
    ok=$([[ -s $OUT/llmc_tokens.bin ]] && echo "converted, not run (dry: no GPU)" || echo "failed (see logs)")
    echo "| GPT-2 124M | llm.c train_gpt2cu -e d12 | $ok | | | |" >> "$table"
  elif [[ ! -f $LLMC/train_gpt2.cu ]]; then
    log "llm.c: no copy at $LLMC (carry it: cp -r ../shared/anchors/llm.c .llmc, ignored by git)"
    echo "| GPT-2 124M | llm.c | not carried (see logs) | | | |" >> "$table"
  else
    if [[ -x "${LLMC_BIN:-}" ]]; then  # built already (session.sh builds it beside the other parts)
      mkdir -p "$OUT/llmc-build" && cp "$LLMC_BIN" "$OUT/llmc-build/train_gpt2cu"
    else
      rm -rf "$OUT/llmc-build"; cp -r "$LLMC" "$OUT/llmc-build"
      ( cd "$OUT/llmc-build" && llmc_make "$(left 240)" ) > "$OUT/logs/llmc_build.log" 2>&1 || log "llm.c: build failed (logs/llmc_build.log)"
    fi
    B=${S124[3]} STEPS=30
    timeout "$(left 240)" "$OUT/llmc-build/train_gpt2cu" -i "$OUT/llmc_tokens.bin" -j "$OUT/llmc_tokens.bin" -e d12 -b "$B" -t $SEQ \
      -d $(( ${S124[4]} * SEQ )) -x $STEPS -v 100000 -s 100000 -h 0 > "$OUT/logs/llmc.log" 2>&1
    log "llmc: exit $?"
    $PY - "$OUT/logs/llmc.log" "$SEQ" "$PEAK" >> "$table" <<'PYEOF'
import re, sys
path, T, peak = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
toks = [float(m.group(1)) for m in re.finditer(r"\| ([0-9.]+) tok/s", open(path, errors="replace").read())]
if len(toks) < 3:
    print("| GPT-2 124M | llm.c train_gpt2cu -e d12 | failed (see logs) | | | |"); sys.exit()
tok = sum(toks[2:]) / len(toks[2:])  # its own figures, after two warm-up steps
n, L, h = 124_475_904 - T * 768, 12, 768  # d12 with the padded vocabulary (50304), without position embeddings
print(f"| GPT-2 124M (124M) | llm.c train_gpt2cu -e d12 | {tok:,.0f} | {100 * tok * (6 * n + 12 * L * h * T) / (peak * 1e12):.1f}% | | |")
PYEOF
  fi
  ;;
8)
  # compute-sanitizer (memcheck, then synccheck) over 2 iterations of a tiny model at ZeRO-3 with
  # the optimizer and the parameters offloaded: the copy stream and the compute stream together.
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
  for tool in memcheck synccheck; do
    if [[ -n "${DRY:-}" || -z $SAN ]]; then
      echo "| compute-sanitizer $tool | $([[ -n "${DRY:-}" ]] && echo "not run (dry: no GPU)" || echo "failed: no compute-sanitizer") | | | | |" >> "$table"
      continue
    fi
    ITERS=2 LOGI=1 SEQ=128
    SANITIZE=("$SAN" --tool "$tool" --error-exitcode 9 --print-limit 20)
    ours san_$tool 2 128 4 2 4 $([[ $tool == memcheck ]] && echo 200 || echo 150) --zero-stage 3 --cpu-offload --offload-params
    n=$(grep -o 'ERROR SUMMARY: [0-9]* error' "$OUT/logs/san_$tool.log" | tail -1)
    echo "| compute-sanitizer $tool, ZeRO-3 + offload, 2 iterations | ${n:-failed (see logs)} | | | | |" >> "$table"
  done
  ;;
9)
  # Where a 124M step's time goes: LibTorch's profiler over steps 5 and 6 (--profile
  # --use-pytorch-profiler; the rate is still that of iterations 21-30), summarised by
  # trace_summary.py (wall and device-busy time per step, device time by kind of work, the
  # top kernels); the trace comes back gzipped. Then, if time is left, Megatron's timers
  # (--timing-log-level 1; each phase waits for the device, so that run is a little slower).
  P0=5; [[ -n "${DRY:-}" ]] && P0=1  # a dry run has 4 iterations
  ours gpt2_124m_prof "${S124[@]}" 150 --profile --use-pytorch-profiler --profile-step-start $P0 --profile-step-end $((P0 + 2)) \
    --tensorboard-dir "$OUT/prof"
  row "GPT-2 124M" "zerolm pretrain_gpt (steps $P0-$((P0 + 1)) profiled)" "$OUT/logs/gpt2_124m_prof.jsonl" "${S124[0]}" "${S124[1]}"
  trace=$(ls "$OUT"/prof/*.pt.trace.json 2>/dev/null | head -1)
  if [[ -n $trace ]]; then
    { echo; $PY tests/bench/gpu/trace_summary.py "$trace" 2>&1; } >> "$table"
    gzip -c "$trace" > "$OUT/trace_124m.json.gz"
  else
    echo "| GPT-2 124M | profile: failed, no trace (see logs/gpt2_124m_prof.log) | | | | |" >> "$table"
  fi
  # --profile without the PyTorch profiler (the range and NVTX ranges for Nsight Systems), a tiny model.
  ours nvtx_tiny 2 128 4 2 4 60 --profile --profile-step-start 1 --profile-step-end 3
  rc=$(sed -n 's/.*nvtx_tiny: exit \([0-9]*\).*/\1/p' "$OUT/logs/status.txt" | tail -1)
  echo "| tiny GPT-2 | --profile for Nsight Systems (cudaProfilerStart/Stop, NVTX): exit ${rc:-?}$([[ $rc == 0 ]] || echo ', failed') | | | | |" >> "$table"
  if (( $(left 1000) >= 60 )); then
    ours gpt2_124m_timed "${S124[@]}" 120 --timing-log-level 1
    row "GPT-2 124M" "zerolm pretrain_gpt, --timing-log-level 1" "$OUT/logs/gpt2_124m_timed.jsonl" "${S124[0]}" "${S124[1]}"
    $PY - "$OUT/logs/gpt2_124m_timed.jsonl" >> "$table" <<'PYEOF'
import json, sys
try:
    t = [r for r in map(json.loads, open(sys.argv[1])) if "timers_ms" in r][-1]["timers_ms"]
except (OSError, IndexError, ValueError):
    print("\n| phase | ms per iteration |\n|---|---|\n| failed (see logs) | |"); sys.exit()
print("\n| phase | ms per iteration |\n|---|---|")
for name, ms in t.items():
    print(f"| {name} | {ms:.2f} |")
PYEOF
  fi
  ;;
*) echo "PART is 0-9" >&2; exit 2 ;;
esac
