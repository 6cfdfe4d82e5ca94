#!/usr/bin/env bash
# Memory does not grow with the input, and output does not depend on the thread
# count: preprocess_data (1 and 2 workers), cleanup (1 and 2 workers),
# near_dedup's signatures (MinHash, --memory-mb 1) and shuffle's sharded gather
# of one bucket (--memory-mb 1: sorted runs on disk, merged; its output equals the
# one-machine shuffle's, which holds the input in memory) on the 1000 OpenWebText fixture
# documents repeated 3 times (14 MB) and 30 times (142 MB). preprocess_data and
# cleanup, which both tokenize, run on 6 and 60 times (28 and 284 MB), so that each
# of 2 workers gets past the 8 MiB of text after which its piece cache takes a copy
# of the whole-token tables (a step of ~5 MiB per worker, once; gpt2_bpe.h): on
# 14 MB each of 2 workers stays under it, on 142 MB each passes it, and that step
# alone (CI saw 9 MiB for cleanup's two workers) is not growth with the input.
# For each, the peak RSS
# (/usr/bin/time) of the 10x larger input may exceed the smaller one's by at most
# 8 MiB (measured: 0-6 MiB, the 2-worker pipelines' batches in flight), and the
# 1- and 2-worker outputs are byte-identical. A 2-worker run's peak varies by up to
# 9 MiB from run to run under load (which of glibc's per-thread arenas holds the
# freed batches depends on scheduling; CI saw 29 and 38 MiB for cleanup), so a
# pair over the limit is measured twice more and the least peak of each size
# counts: memory that grows with the input exceeds the limit in every run.
#   constant_rss_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
SRC=$1 BIN=$2
DATA=$SRC/tests/data
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
SLACK_KB=$((8 * 1024))
for n in 3 30 6 60; do  # each document gets a url: near_dedup's document id
  for ((i = 0; i < n; i++)); do cat "$DATA/megatron/openwebtext-1000.decoded.jsonl"; done |
    awk '{printf "{\"url\": \"u%d\", %s\n", NR, substr($0, 2)}' > "$W/x$n.jsonl"
done
peak() {  # NAME N: runs CMD (with xN as its input) and prints its peak RSS in KiB
  local name=$1 n=$2
  /usr/bin/time -f %M -o "$W/$name.$n.rss" "${CMD[@]}" > "$W/$name.$n.log" 2>&1 || { cat "$W/$name.$n.log"; fail "$name on x$n"; }
  cat "$W/$name.$n.rss"
}
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$DATA/gpt2/gpt2-vocab.json" --merge-file "$DATA/gpt2/gpt2-merges.txt")
mb() { awk -v b="$(stat -c %s "$W/x$1.jsonl")" 'BEGIN { printf "%.0f MB", b / 1e6 }'; }
check() {  # NAME BUILDER [N]: BUILDER N sets CMD to the command on input xN; sizes N and 10N (3 by default)
  local name=$1 n=${3:-3} small large
  local n10=$((10 * n)) on="on $(mb "$n")" on10="on $(mb $((10 * n)))"
  $2 $n
  small=$(peak "$name" $n)
  $2 $n10
  large=$(peak "$name" $n10)
  local try s l
  for try in 2 3; do
    ((large > small + SLACK_KB)) || break
    echo "$name: peak RSS $small KiB $on, $large KiB $on10; measuring again ($try of 3)"
    $2 $n
    s=$(peak "$name" $n)
    $2 $n10
    l=$(peak "$name" $n10)
    small=$((s < small ? s : small)) large=$((l < large ? l : large))
  done
  ((large <= small + SLACK_KB)) || fail "$name: peak RSS $small KiB $on, $large KiB $on10"
  echo "ok: $name: peak RSS $((small / 1024)) MiB $on, $((large / 1024)) MiB $on10"
}
pp() { CMD=("$BIN/preprocess_data" --input "$W/x$1.jsonl" "${TOK[@]}" --append-eod --workers "$WORKERS" --output-prefix "$W/pp$WORKERS.$1" -q); }
cl() { CMD=("$BIN/cleanup" "$W/x$1.jsonl" "$W/clean$WORKERS.$1.jsonl" --workers "$WORKERS" -q); }
sig() { CMD=("$BIN/near_dedup" signatures --shards "$W/x$1.jsonl" --work "$W/sig.$1" --memory-mb 1 -q); }
SHUF=(--seed 7 --buckets 1 --memory-mb 1 -q)
gather() {  # the count and scatter tasks first (not measured; done once); each measure starts from no bucket
  mkdir -p "$W/parts$1" && ln -sf "$W/x$1.jsonl" "$W/parts$1/x.jsonl"
  local stage
  for stage in count scatter; do
    "$BIN/shuffle" --sharded $stage --parts "$W/parts$1" --work "$W/shw$1" "${SHUF[@]}" || fail "shuffle $stage on x$1"
  done
  rm -rf "$W/shb$1"
  CMD=("$BIN/shuffle" --sharded gather --parts "$W/parts$1" --work "$W/shw$1" --bucket-dir "$W/shb$1" "${SHUF[@]}" --stats-out "$W/shs$1.json")
}
for WORKERS in 1 2; do
  check "preprocess_data --workers $WORKERS" pp 6
  check "cleanup --workers $WORKERS" cl 6
done
check "near_dedup signatures --memory-mb 1" sig
check "shuffle --sharded gather --memory-mb 1" gather
grep -Eq '"gather_merge_passes": [1-9]' "$W/shs30.json" || fail "shuffle gather on x30: no run merged into a longer one ($(cat "$W/shs30.json"))"
for n in 3 30; do
  "$BIN/shuffle" --seed 7 "$W/x$n.jsonl" "$W/shuf$n.jsonl" -q || fail "shuffle x$n"
  cmp -s "$W/shuf$n.jsonl" "$W/shb$n/bucket-00000.jsonl" || fail "shuffle: the gather in runs differs from the one-machine shuffle on x$n"
done
# Under an open-file limit of 100 (soft and hard) and --memory-mb 4 the 71 runs of x30 are more
# than may be open at once: merged 36 at a time, in a pass into longer runs first.
( ulimit -n 100
  "$BIN/shuffle" --sharded gather --parts "$W/parts30" --work "$W/shw30" --bucket-dir "$W/shfd" --seed 7 --buckets 1 --memory-mb 4 -q \
    --stats-out "$W/shfd.json" ) || fail "shuffle gather under ulimit -n 100"
grep -Eq '"gather_merge_passes": [1-9]' "$W/shfd.json" || fail "under ulimit -n 100: no merge pass ($(cat "$W/shfd.json"))"
cmp -s "$W/shuf30.jsonl" "$W/shfd/bucket-00000.jsonl" || fail "shuffle: the gather under ulimit -n 100 differs from the one-machine shuffle"
echo "ok: shuffle's gather in runs gives the one-machine shuffle's bytes, also under ulimit -n 100"
for n in 6 60; do  # the workers' piece caches seeded at different points of the input: the same ids
  cmp -s "$W/pp1.$n"_text_document.bin "$W/pp2.$n"_text_document.bin && cmp -s "$W/pp1.$n"_text_document.idx "$W/pp2.$n"_text_document.idx ||
    fail "preprocess_data: 1 and 2 workers differ on x$n"
done
for n in 6 60; do
  cmp -s "$W/clean1.$n.jsonl" "$W/clean2.$n.jsonl" || fail "cleanup: 1 and 2 workers differ on x$n"
done
echo "ok: preprocess_data and cleanup give the same bytes with 1 and 2 workers"
