#!/usr/bin/env bash
# near_dedup at scale (ctest label `scale`, outside the default suite: make test-scale).
# A generated corpus (tests/bench/near_dedup_corpus.py: DOCS originals, default
# 500,000, about 2 GB, plus a copy of every fifth with 0-40% of its words
# replaced) in SHARDS shards (default 4, about 500 MB each); the stages with every
# task its own process under /usr/bin/time, two at a time, with --memory-mb CAP
# (default 64: a shard's band records, about 100 MB, do not fit). Holds:
#   - every task's peak RSS stays under CAP + 64 MiB (the program, its buffers and
#     the pages of the stage files it maps);
#   - the signatures spilled sorted runs (the corpus's band records exceed CAP);
#   - against exact Jaccard on the planted pairs (>= 0.7 is a duplicate):
#     precision 1.0 (verified pairs only) and recall at least 0.97 (LSH with
#     20 bands of 5 rows finds a pair at exactly 0.7 with probability 0.975);
#   - the kept lines then go through the sharded shuffle (count, scatter, gather;
#     4 buckets, each larger than CAP, so a gather sorts in runs on disk) under the
#     same cap, and the buckets in order equal the one-machine shuffle's output.
#   near_dedup_scale.sh SOURCE_DIR BIN_DIR PYTHON      (DOCS, SHARDS, CAP, WORK to keep the files)
set -euo pipefail
SRC=$1 BIN=$2 PY=$3
DOCS=${DOCS:-500000} SHARDS=${SHARDS:-4} CAP=${CAP:-64}
W=${WORK:-$(mktemp -d)}
[[ -n ${WORK:-} ]] || trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
t0=$SECONDS
[[ -f $W/c/truth.json ]] || "$PY" "$SRC/tests/bench/near_dedup_corpus.py" make "$W/c" "$DOCS" "$SHARDS"
echo "corpus: $(du -sh "$W/c/shards" | cut -f1) in $SHARDS shards ($((SECONDS - t0)) s to make)"
rm -rf "$W/nd" "$W/nd.kept" "$W"/*.time
for stage in signatures candidates verify cluster filter; do
  t1=$SECONDS
  n=$("$BIN/near_dedup" $stage --shards "$W/c/shards" --work "$W/nd" --print-tasks)
  seq 0 $((n - 1)) | xargs -P 2 -I{} /usr/bin/time -a -o "$W/$stage.time" -f "%M" \
    "$BIN/near_dedup" $stage --shards "$W/c/shards" --work "$W/nd" --output-dir "$W/nd.kept" --memory-mb "$CAP" --task {} -q \
    --stats-out "$W/nd/$stage-{}.json" || fail "near_dedup $stage"
  peak=$(sort -n "$W/$stage.time" | tail -1)
  echo "$stage: $n tasks, $((SECONDS - t1)) s, largest peak RSS $((peak / 1024)) MiB"
  (( peak / 1024 < CAP + 64 )) || fail "$stage: a task peaked at $((peak / 1024)) MiB, over --memory-mb $CAP + 64"
done
spills=$(cat "$W"/nd/signatures-*.json | sed -n 's/.*"signatures_spills": \([0-9]*\).*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
(( spills > 0 )) || fail "no signatures task spilled: the corpus fits --memory-mb $CAP, so the cap tested nothing"
echo "signatures spilled $spills sorted runs"
read -r _ removed _ tp _ dups _ recall _ precision < <("$PY" "$SRC/tests/bench/near_dedup_corpus.py" score "$W/c" "$W/nd.kept" 0.7)
echo "removed $removed, of which $tp of the $dups planted duplicates: recall $recall, precision $precision"
[[ $precision == 1.0000 ]] || fail "precision $precision: a removed document is no duplicate"
awk -v r="$recall" 'BEGIN { exit !(r >= 0.97) }' || fail "recall $recall under 0.97"
for stage in count scatter gather; do
  t1=$SECONDS
  n=$("$BIN/shuffle" --sharded $stage --parts "$W/nd.kept" --work "$W/sh" --buckets 4 --print-tasks)
  seq 0 $((n - 1)) | xargs -P 2 -I{} /usr/bin/time -a -o "$W/shuffle-$stage.time" -f "%M" \
    "$BIN/shuffle" --sharded $stage --parts "$W/nd.kept" --work "$W/sh" --bucket-dir "$W/sh.out" --buckets 4 --seed 3 \
    --memory-mb "$CAP" --task {} -q --stats-out "$W/sh-$stage-{}.json" || fail "shuffle --sharded $stage"
  peak=$(sort -n "$W/shuffle-$stage.time" | tail -1)
  echo "shuffle $stage: $n tasks, $((SECONDS - t1)) s, largest peak RSS $((peak / 1024)) MiB"
  (( peak / 1024 < CAP + 64 )) || fail "shuffle $stage: a task peaked at $((peak / 1024)) MiB, over --memory-mb $CAP + 64"
done
grep -Eq '"gather_runs": [1-9]' "$W"/sh-gather-0.json || fail "shuffle gather 0 sorted in memory: the cap tested nothing"
"$BIN/shuffle" --seed 3 <(cat "$W"/nd.kept/part-*.jsonl) "$W/shuffled.jsonl" -q || fail "one-machine shuffle"
cat "$W"/sh.out/bucket-*.jsonl | cmp -s - "$W/shuffled.jsonl" || fail "the sharded shuffle's buckets differ from the one-machine shuffle"
echo "near_dedup scale ok ($((SECONDS - t0)) s)"
