# Shared by tests/bench/bench_*.sh (sourced). Every script checks its result
# before it prints a time, exits non-zero when a check fails, and prints ours,
# the baseline and the ratio in one table.
#   SMOKE=1   tiny sizes and single runs: the default test suite runs every
#             script this way (ctest bench/smoke) so that a broken benchmark is caught.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${BIN:-build/bin} PY=${PY:-.venv/bin/python} DATA=${DATA:-tests/data}
SMOKE=${SMOKE:-0}
RUNS=${RUNS:-$([[ $SMOKE == 1 ]] && echo 1 || echo 3)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# best_of CMD...: runs CMD RUNS times (output to $work/best_of.log), prints the fastest wall time in seconds.
best_of() {
  local best="" t0 t1
  for ((run = 0; run < RUNS; ++run)); do
    t0=$(date +%s.%N)
    "$@" > "$work/best_of.log" 2>&1 || { tail -n 20 "$work/best_of.log" >&2; fail "$*"; }
    t1=$(date +%s.%N)
    best=$(min_of "$best" "$(calc "$t1 - $t0")")
  done
  echo "$best"
}

# result VAR... -- CMD...: runs CMD to its end and reads the words of its output into the VARs;
# fails (status 1) when CMD does. Not `read VAR < <(CMD)`: that returns at CMD's first line, while a
# Python baseline may still be exiting (seconds, with torch imported) on the core that the next
# timed run uses, and it ignores CMD's exit status.
result() {
  local -a _r_names=()
  while [[ $1 != -- ]]; do _r_names+=("$1"); shift; done
  shift
  local _r_out
  _r_out=$("$@") || return 1
  read -r "${_r_names[@]}" <<< "$_r_out"
}

# min_of A B: the smaller number; an empty A counts as none.
min_of() { awk -v a="$1" -v b="$2" 'BEGIN {print (a == "" || b + 0 < a + 0) ? b : a}'; }

# calc EXPR: floating-point arithmetic (awk), e.g. calc "3 / 2".
calc() { awk "BEGIN {print ($*)}"; }

# gbench_best JSON NAME FIELD: the best (largest) FIELD over the repetitions of the
# Google Benchmark NAME, from --benchmark_format=json output.
gbench_best() {
  $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); v=[b[sys.argv[3]] for b in d["benchmarks"] if b["run_name"]==sys.argv[2] and b["run_type"]=="iteration"]; assert v, sys.argv[2]; print(max(v))' "$@"
}

# --- Training benchmarks (bench_parallel.sh, bench_zero.sh) ---
# pretrain NAME ITERS ARGS...: pretrain_gpt on the OpenWebText fixture with the shape in
# LAYERS HIDDEN HEADS SEQ MICRO GLOBAL LR CLIP, every iteration logged to
# $work/NAME/metrics.jsonl, its checkpoint saved in $work/NAME. LR is 0 in iteration 1
# (a 1-iteration warm-up), so the 1-iteration run's checkpoint is the initial model.
pretrain() {
  local name=$1 iters=$2
  shift 2
  rm -rf "${work:?}/$name"
  $BIN/pretrain_gpt --num-layers $LAYERS --hidden-size $HIDDEN --num-attention-heads $HEADS --seq-length $SEQ \
    --max-position-embeddings $SEQ --micro-batch-size $MICRO --global-batch-size $GLOBAL --train-iters $iters --lr $LR \
    --lr-warmup-iters 1 --lr-decay-style constant --clip-grad $CLIP \
    --data-path $DATA/megatron/meg-gpt2-openwebtext_text_document --vocab-file $DATA/megatron/gpt2-tiny-vocab.json \
    --split 949,50,1 --log-interval 1 --eval-interval 100000 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 \
    --distributed-backend gloo --data-cache-path "$work/cache" --save "$work/$name" "$@" > "$work/$name.log" 2>&1 ||
    { tail -n 20 "$work/$name.log" >&2; fail "pretrain_gpt $name"; }
}

# torch_baseline MODE OUT: tests/bench/baseline_parallel.py MODE from the initial model
# ($work/init) on the samples of pretrain_gpt's cached index; per-iteration JSON lines to OUT.
torch_baseline() {
  local index=$work/cache/meg-gpt2-openwebtext_text_document_train_indexmap_$((ITERS * GLOBAL))ns_${SEQ}sl_1234s
  $PY tests/bench/baseline_parallel.py $1 "$work/init" $DATA/megatron/meg-gpt2-openwebtext_text_document "$index" \
    $LAYERS $HIDDEN $HEADS $SEQ $MICRO $GLOBAL $ITERS $LR $CLIP "$2" 2> "$2.log" ||
    { tail -n 20 "$2.log" >&2; fail "PyTorch $1"; }
}

# same_losses RTOL REF.jsonl OTHER.jsonl...: every iteration's loss of each file within
# RTOL (relative) of REF's (pretrain_gpt metrics or baseline_parallel.py lines).
same_losses() {
  $PY - "$@" >&2 <<'PYEOF'
import json, sys
def losses(f):
    return {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(f)) if "lm_loss" in r and "split" not in r}
rtol, ref = float(sys.argv[1]), losses(sys.argv[2])
for f in sys.argv[3:]:
    got = losses(f)
    assert set(got) == set(ref), f"{f}: iterations {sorted(got)} != {sorted(ref)}"
    worst = max(abs(got[i] - ref[i]) / abs(ref[i]) for i in ref)
    print(f"{'ok  ' if worst <= rtol else 'FAIL'} {f}: {len(ref)} losses, worst relative difference {worst:.2e}")
    assert worst <= rtol, f
PYEOF
}

# mean_seconds FILE: mean seconds per iteration after WARMUP iterations.
mean_seconds() {
  $PY -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; t=[x.get('seconds_per_iteration', x.get('seconds')) for x in r if x.get('iteration',0)>$WARMUP and 'lm_loss' in x and 'split' not in x]; print('%.4f' % (sum(t)/len(t)))" "$1"
}

# keep_best NAME FILE: BEST[NAME] becomes the smaller of itself and FILE's mean_seconds
# (the training benches run every side RUNS times, interleaved, and report each side's best).
declare -A BEST
keep_best() {
  BEST[$1]=$(min_of "${BEST[$1]:-}" "$(mean_seconds "$2")")
}
