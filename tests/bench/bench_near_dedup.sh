#!/usr/bin/env bash
# Sharded near-duplicate removal: zerolm's near_dedup (its four stages, every
# task its own process) against datatrove's MinHash deduplication (its four
# stages with LocalPipelineExecutor), on the same shards, the same number of
# tasks and 2 processes at a time, 20 bands x 5 hashes on both sides. The
# corpus (near_dedup_corpus.py) has one copy of every fifth document with 0-40%
# of its words replaced; a copy is a duplicate when the exact Jaccard of its and
# its original's character 5-gram sets is >= 0.7 (near_dedup's group
# threshold). Checks first: near_dedup keeps exactly what find_duplicates +
# group_dups + dedup keep on the shards concatenated. Then per side: wall
# seconds, CPU seconds, MB per CPU-second, the largest process's peak RSS, and
# recall and precision of the removed documents against that truth.
#   tests/bench/bench_near_dedup.sh     (DOCS; SMOKE=1: 400 documents, one run)
source "$(dirname "$0")/lib.sh"
docs=${DOCS:-$([[ $SMOKE == 1 ]] && echo 400 || echo 10000)}
shards=4
$PY tests/bench/near_dedup_corpus.py make "$work/c" "$docs" $shards > "$work/corpus.txt" || fail "near_dedup_corpus.py make"
mb=$(du -bc "$work"/c/shards/*.jsonl | tail -1 | awk '{print $1 / 1e6}')
cat "$work"/c/shards/*.jsonl > "$work/all.jsonl"

# The check: the one-machine chain's kept lines.
"$BIN/find_duplicates" --inputs "$work/all.jsonl" url --output "$work/dups.jsonl" --threads 2 -q || fail "find_duplicates"
"$BIN/group_dups" "$work/dups.jsonl" "$work/groups.jsonl" 0.7 -q || fail "group_dups"
"$BIN/dedup" "$work/groups.jsonl" "$work/all.jsonl" "$work/one.jsonl" --key url -q || fail "dedup"

# ours: every task a process, 2 at a time (what --local-tasks does in a cluster script), timed one by one.
ours() {  # ours WORK: prints "wall cpu peak_kb"
  local w=$1 stage n t0 t1
  t0=$(date +%s.%N)
  for stage in signatures candidates verify cluster filter; do
    n=$("$BIN/near_dedup" $stage --shards "$work/c/shards" --work "$w" --print-tasks)
    seq 0 $((n - 1)) | xargs -P 2 -I{} /usr/bin/time -a -o "$w.time" -f "%U %S %M" \
      "$BIN/near_dedup" $stage --shards "$work/c/shards" --work "$w" --output-dir "$w.kept" --task {} -q || fail "near_dedup $stage"
  done
  t1=$(date +%s.%N)
  awk -v wall="$(calc "$t1 - $t0")" '{ cpu += $1 + $2; if ($3 > peak) peak = $3 } END { print wall, cpu, peak }' "$w.time"
}
best_wall="" ; for ((run = 0; run < RUNS; ++run)); do
  rm -rf "$work/nd" "$work/nd.kept" "$work/nd.time"
  mkdir -p "$work/nd"
  read -r wall cpu peak < <(ours "$work/nd")
  if [[ -z $best_wall ]] || (( $(calc "$wall < $best_wall") )); then best_wall=$wall ours_cpu=$cpu ours_peak=$peak; fi
done
cat "$work"/nd.kept/part-*.jsonl | cmp -s - "$work/one.jsonl" || fail "near_dedup kept other lines than find_duplicates + group_dups + dedup"
read -r _ _ _ ours_tp _ ours_dups _ ours_recall _ ours_precision < <($PY tests/bench/near_dedup_corpus.py score "$work/c" "$work/nd.kept" 0.7)

# datatrove: the wall time with 2 worker processes (best of RUNS); its CPU seconds and peak RSS from
# one run with 1 worker, where LocalPipelineExecutor runs every task in its own process in turn (its
# pool's workers are not reaped, so their CPU time is not counted by time(1)).
dt_wall=""; for ((run = 0; run < RUNS; ++run)); do
  rm -rf "$work/dt"
  $PY tests/bench/baseline_near_dedup.py "$work/c/shards" "$work/dt" 2 > "$work/dt.out" 2> "$work/dt.log" \
    || { tail -n 20 "$work/dt.log" >&2; fail "baseline_near_dedup.py"; }
  dt_wall=$(min_of "$dt_wall" "$(tail -1 "$work/dt.out")")
done
rm -rf "$work/dt1"
/usr/bin/time -o "$work/dt.time" -f "%U %S %M" $PY tests/bench/baseline_near_dedup.py "$work/c/shards" "$work/dt1" 1 > /dev/null 2> "$work/dt1.log" \
  || { tail -n 20 "$work/dt1.log" >&2; fail "baseline_near_dedup.py, 1 worker"; }
read -r u s dt_peak < "$work/dt.time"
dt_cpu=$(calc "$u + $s")
read -r _ _ _ dt_tp _ _ _ dt_recall _ dt_precision < <($PY tests/bench/near_dedup_corpus.py score "$work/c" "$work/dt/kept" 0.7)
dtv=$($PY -c 'import importlib.metadata as m; print(m.version("datatrove"))')

echo "Near-duplicate removal, $(cat "$work/corpus.txt"), $ours_dups duplicates at exact Jaccard >= 0.7; $shards shards, 2 processes at a time"
echo "| | wall s (2 processes) | CPU s | MB per CPU-s | peak RSS of a task's process (MiB) | recall | precision |"
echo "|---|---|---|---|---|---|---|"
printf "| zerolm near_dedup (verified, char 5-grams) | %.2f | %.2f | %.2f | %.0f | %s | %s |\n" "$best_wall" "$ours_cpu" "$(calc "$mb / $ours_cpu")" \
  "$(calc "$ours_peak / 1024")" "$ours_recall" "$ours_precision"
printf "| datatrove %s MinHash (unverified, word 5-grams; RSS: one process running every task) | %.2f | %.2f | %.2f | %.0f | %s | %s |\n" "$dtv" "$dt_wall" "$dt_cpu" "$(calc "$mb / $dt_cpu")" \
  "$(calc "$dt_peak / 1024")" "$dt_recall" "$dt_precision"
printf "throughput per core: %.1fx datatrove's\n" "$(calc "$dt_cpu / $ours_cpu")"
