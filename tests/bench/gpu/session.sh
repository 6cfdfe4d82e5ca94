#!/usr/bin/env bash
# One device-tool command for a short lease: the GPU tests and the kit's parts
# in the order given, each started only while the session's budget still holds
# its share (and given the time beyond the shares of the parts still to come),
# llm.c built in the background from the start (its nvcc run needs no GPU). Everything comes back in three files, since the device tool returns
# at most eight:
#   $OUT/summary.md        every part's table, the GPU tests' table, the status log
#   $OUT/logs.tar.gz       every log
#   $OUT/gpu_ckpt.tar.gz   a tiny GPU-trained checkpoint, for generate_gpt and convert_gpt here
#   $OUT/trace_124m.json.gz part 9's profile of two 124M steps (LibTorch's Chrome trace)
# Parts: t = tests/gpu (the fused loss's kernel, then train_gpu_test.sh, or its sections in
# TEST_ONLY, with NEED_T seconds), 0-9 = run_gpu.sh's.
#   SESSION_BUDGET=540 PARTS="t 1 7 2 8" tests/bench/gpu/session.sh   # on the GPU machine
set -uo pipefail
cd "$(dirname "$0")/../../.."
source tests/bench/gpu/env.sh  # PY, LD_LIBRARY_PATH, START, OUT
BUDGET=${SESSION_BUDGET:-540}
mkdir -p "$OUT"
BIN=${BIN:-build-kit/bin}
export LD_LIBRARY_PATH="$PWD/build-kit/lib:$LD_LIBRARY_PATH"
work=$(mktemp -d)
summary=$OUT/summary.md
echo "# GPU session $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)" > "$summary"
left() { echo $(( BUDGET - (SECONDS - START) )); }
# Each part's share of the budget (seconds): it starts only if that much is left.
declare -A NEED=([t]=${NEED_T:-220} [0]=60 [1]=240 [2]=60 [3]=150 [4]=120 [5]=240 [6]=120 [7]=60 [8]=150 [9]=120)

# llm.c, built beside the rest.
if [[ -f .llmc/train_gpt2.cu ]]; then
  cp -r .llmc "$work/llmc"
  ( cd "$work/llmc" && llmc_make 400 > "$work/llmc_build.log" 2>&1 ) &
  llmc_pid=$!
fi

parts=(${PARTS:-t 1 7 2 8})
for i in "${!parts[@]}"; do
  part=${parts[$i]}
  need=${NEED[$part]:-100}
  # The part's budget: its share, and the session's time beyond all the shares still to come.
  rest=0
  for p in "${parts[@]:$i}"; do rest=$(( rest + ${NEED[$p]:-100} )); done
  slack=$(( $(left) - rest )); (( slack < 0 )) && slack=0
  if (( $(left) < need )); then
    echo "- part $part: not started, $(left) s left of the session's $BUDGET (it needs $need)" | tee -a "$summary"
    continue
  fi
  t0=$SECONDS
  mkdir -p "$work/p$part"
  if [[ $part == t ]]; then
    {
      echo; echo "## GPU tests"
      timeout 120 "$BIN/zlm_trainer_gpu_tests" > "$work/p$part/gpu_unit.log" 2>&1
      echo "- zlm_trainer_gpu_tests (the fused loss's kernel): exit $?, $(grep -c '^\[       OK' "$work/p$part/gpu_unit.log") passed"
      ONLY=${TEST_ONLY:-} DEVICE=$([[ -n "${DRY:-}" ]] && echo cpu || echo cuda) timeout $(( need + slack - 20 )) tests/gpu/train_gpu_test.sh . "$BIN" "$PY" "$work/p$part" > "$work/p$part/train_gpu_test.log" 2>&1
      echo "- train_gpu_test.sh: exit $?"
      echo; cat "$work/p$part/train_gpu_test.md" 2>/dev/null
    } >> "$summary"
    [[ -f $work/p$part/gpu_ckpt.tar.gz ]] && mv "$work/p$part/gpu_ckpt.tar.gz" "$OUT/"
  else
    if [[ $part == 7 && -n "${llmc_pid:-}" ]]; then
      wait "$llmc_pid"
      cp "$work/llmc_build.log" "$work/p$part/"
      [[ -x $work/llmc/train_gpt2cu ]] && export LLMC_BIN=$work/llmc/train_gpt2cu
    fi
    PART=$part PART_BUDGET=$(( need + slack )) BIN=$BIN OUT=$work/p$part tests/bench/gpu/run_gpu.sh > "$work/p$part/run.log" 2>&1
    { echo; echo "## Part $part (exit $?)"; cat "$work/p$part/gpu_bench.md"; } >> "$summary"
    [[ -f $work/p$part/trace_124m.json.gz ]] && mv "$work/p$part/trace_124m.json.gz" "$OUT/"
  fi
  echo "- part $part: $((SECONDS - t0)) s" >> "$summary"
done
wait
{ echo; echo "## Status"; cat "$work"/p*/logs/status.txt 2>/dev/null; } >> "$summary"
# Logs only: no checkpoints, caches or token files.
( cd "$work" && find . \( -name '*.log' -o -name '*.md' -o -name '*.jsonl' -o -name '*.txt' \) -size -20M -print0 |
  tar czf "$OUT/logs.tar.gz" --null -T - )
rm -rf "$work"
cat "$summary"
