#!/usr/bin/env bash
# near_dedup against the one-machine chain on the same documents: 600
# OpenWebText documents with planted near-duplicates (make_corpus.py), cut
# into shards (some gzip-compressed). For several shard counts, hash ranges,
# task widths, spill sizes and verification rules, the kept lines (the
# filter's parts concatenated) must equal, byte for byte,
#   find_duplicates --inputs all.jsonl url | group_dups T | dedup --key url
# on the shards concatenated. Then: each task run alone (as a Slurm array
# would) gives the same bytes; a re-run does nothing; a task killed with
# SIGKILL mid-run is redone by a re-run; damaged and inconsistent inputs
# are refused naming the file.
#   near_dedup_test.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
SRC=$1 BIN=$2 PY=$3
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
corpus() {  # corpus NAME SHARDS
  "$PY" "$SRC/tests/e2e/near_dedup/make_corpus.py" "$SRC/tests/data/megatron/openwebtext-1000.decoded.jsonl" "$W/$1" "$2" > /dev/null
}
one_machine() {  # one_machine DIR GROUP_T [find_duplicates flags...]
  local d=$1 t=$2
  shift 2
  "$BIN/find_duplicates" --inputs "$d/all.jsonl" url --output "$d/dups.jsonl" --threads 2 -q "$@" 2> /dev/null
  "$BIN/group_dups" "$d/dups.jsonl" "$d/groups.jsonl" "$t" -q
  "$BIN/dedup" "$d/groups.jsonl" "$d/all.jsonl" "$d/one.jsonl" --key url -q 2> /dev/null
}
sharded() {  # sharded DIR WORK [near_dedup flags...]: the kept lines to DIR/sharded.jsonl
  local d=$1 w=$2
  shift 2
  "$BIN/near_dedup" all --shards "$d/shards" --work "$d/$w" --output-dir "$d/$w.out" -q "$@" 2> "$d/$w.log" \
    || { cat "$d/$w.log"; fail "near_dedup $*"; }
  cat "$d"/$w.out/part-*.jsonl > "$d/sharded.jsonl"
}
same() {  # same DIR WHAT
  cmp -s "$1/one.jsonl" "$1/sharded.jsonl" || { diff <(cut -c1-80 "$1/one.jsonl") <(cut -c1-80 "$1/sharded.jsonl") | head; fail "$2"; }
  echo "ok: $2 ($(wc -l < "$1/one.jsonl") of $(wc -l < "$1/all.jsonl") lines kept)"
}

# Equal to one machine for any shard count, range count, task width and spill size.
for shards in 1 4 9; do
  corpus s$shards $shards
  one_machine "$W/s$shards" 0.7
  removed=$(( $(wc -l < "$W/s$shards/all.jsonl") - $(wc -l < "$W/s$shards/one.jsonl") ))
  (( removed > 50 )) || fail "the planted corpus should lose more than 50 lines, lost $removed"
  sharded "$W/s$shards" w1 --local-tasks 1
  same "$W/s$shards" "$shards shards, 1 range, 1 task at a time"
  sharded "$W/s$shards" w2 --local-tasks 3 --ranges 4 --threads 2 --memory-mb 0.05
  same "$W/s$shards" "$shards shards, 4 ranges, 3 tasks at a time, spilled runs"
  "$BIN/near_dedup" signatures --shards "$W/s$shards/shards" --work "$W/s$shards/w3" --memory-mb 0.05 -q \
    --stats-out "$W/s$shards/w3.json" 2> /dev/null
  grep -q '"signatures_spills": [1-9]' "$W/s$shards/w3.json" || fail "--memory-mb 0.05 spilled no run"
done
# A verify task's pairs in several sweeps under the smallest --memory-mb (10 KiB: 436 pairs a sweep): the same lines kept.
sharded "$W/s4" wsweep --memory-mb 0.01 --verify-tasks 2 --stats-out "$W/s4/wsweep.json"
same "$W/s4" "4 shards, verify in sweeps of 436 pairs"
grep -Eq '"verify_sweeps": ([2-9]|[1-9][0-9]+)[,}]' "$W/s4/wsweep.json" || fail "--memory-mb 0.01: one verify sweep ($(grep -o '"verify_sweeps": [0-9]*' "$W/s4/wsweep.json"))"
# Other rules of find_duplicates and group_dups: rounds until exhausted, min denominator, other thresholds.
d=$W/s4
one_machine $d 0.95 --heuristic-iter -1 --jaccard min --jaccard-threshold 0.6
sharded $d w4 --heuristic-iter -1 --jaccard min --jaccard-threshold 0.6 --group-threshold 0.95 --ranges 2 --local-tasks 2
same $d "--heuristic-iter -1 --jaccard min --jaccard-threshold 0.6, group threshold 0.95"
one_machine $d 0.5 --jaccard-threshold 0.3
sharded $d w7 --jaccard-threshold 0.3 --group-threshold 0.5 --ranges 3
same $d "--jaccard-threshold 0.3, group threshold 0.5"
one_machine $d 0.7 --num-bands 10 --num-seeds 50 --char-ngram 3 --seed 99
sharded $d w5 --num-bands 10 --num-seeds 50 --char-ngram 3 --seed 99
same $d "10 bands of 5 rows, 3-grams, seed 99"

# Every task alone, as the array tasks of a Slurm job would run them.
one_machine $d 0.7
w=$d/w6
for stage in signatures candidates verify cluster filter; do
  n=$("$BIN/near_dedup" $stage --shards $d/shards --work $w --ranges 2 --print-tasks)
  for ((t = n - 1; t >= 0; t--)); do
    "$BIN/near_dedup" $stage --shards $d/shards --work $w --ranges 2 --output-dir $w.out --task $t -q 2> /dev/null
  done
done
cat $w.out/part-*.jsonl > $d/sharded.jsonl
same $d "each task alone"
[[ $(ls $w/done | wc -l) == $((4 + 40 + 8 + 1 + 4)) ]] || fail "expected 57 task markers, found $(ls $w/done | wc -l)"

# A re-run does nothing; a removed marker redoes that task only.
"$BIN/near_dedup" all --shards $d/shards --work $w --ranges 2 --output-dir $w.out 2> $W/rerun.log
[[ $(grep -c 'done already' $W/rerun.log) == 57 ]] || { cat $W/rerun.log; fail "a re-run redid tasks"; }
rm $w/done/candidates-003-0001
"$BIN/near_dedup" all --shards $d/shards --work $w --ranges 2 --output-dir $w.out 2> $W/rerun.log
[[ $(grep -c 'done already' $W/rerun.log) == 56 ]] && grep -q 'candidates-003-0001: [0-9]* records' $W/rerun.log \
  || { cat $W/rerun.log; fail "a removed marker did not redo its task alone"; }

# SIGKILL mid-run (the signatures of a large shard), then a re-run: the same bytes.
big=$W/big
mkdir -p $big/shards
for k in 0 1 2 3 4 5 6 7; do cat $d/all.jsonl; done > $big/shards/a.jsonl
cp $d/shards/shard-000.jsonl $big/shards/b.jsonl
cat $big/shards/a.jsonl $big/shards/b.jsonl > $big/all.jsonl
one_machine $big 0.7
"$BIN/near_dedup" all --shards $big/shards --work $big/w --output-dir $big/w.out --threads 1 -q 2> /dev/null &
pid=$!
for _ in $(seq 200); do [[ -n $(ls $big/w/signatures 2> /dev/null) ]] && break; sleep 0.02; done
kill -KILL $pid
wait $pid 2> /dev/null && fail "near_dedup finished before it was killed: the kill tested nothing"
[[ -e $big/w/done/cluster ]] && fail "killed, yet the cluster task has its marker"
sharded $big w
same $big "SIGKILL during the signatures, then a re-run"

# Faults: each a clear error naming the file; never a smaller output.
expect_error() {  # expect_error WHAT PATTERN COMMAND...
  local what=$1 pattern=$2
  shift 2
  if "$@" > $W/err.log 2>&1; then fail "$what: exit 0"; fi
  grep -q -- "$pattern" $W/err.log || { cat $W/err.log; fail "$what: no '$pattern' in the error"; }
  echo "ok: $what"
}
f=$W/s4
expect_error "a shard listed twice" "lists .*shard-000.jsonl twice" \
  "$BIN/near_dedup" signatures --shards $f/shards $f/shards/shard-000.jsonl --work $f/wx
head -c 1000 $f/w1/signatures/00002.band-007 > $W/cut && cp $W/cut $f/w1/signatures/00002.band-007
rm -f $f/w1/done/candidates-* $f/w1/done/verify-* $f/w1/done/cluster $f/w1/done/filter-*
expect_error "a truncated band run" "00002.band-007: no end marker: the file is truncated" \
  "$BIN/near_dedup" candidates --shards $f/shards --work $f/w1
printf 'X' | dd of=$f/w2/signatures/00001.docs bs=1 seek=100 conv=notrunc 2> /dev/null
rm $f/w2/done/cluster
expect_error "a damaged document table" "00001.docs: checksum mismatch" \
  "$BIN/near_dedup" cluster --shards $f/shards --work $f/w2 --ranges 4
expect_error "other settings than the work directory's" "was done with other settings" \
  "$BIN/near_dedup" signatures --shards $f/shards --work $f/w2 --num-bands 25
rm -f $f/w2/done/filter-00003
echo '{"url": "late", "text": "a line added after the signatures were taken"}' >> $f/shards/shard-003.jsonl
expect_error "a shard changed after its signatures" "shard-003.jsonl changed since its signatures were taken" \
  "$BIN/near_dedup" filter --shards $f/shards --work $f/w2 --ranges 4 --output-dir $f/w2.out
echo "near_dedup ok"
