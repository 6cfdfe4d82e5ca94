#!/usr/bin/env bash
# blacklist_urls vs a Python baseline of Megatron's blacklist_urls.py
# (tldextract + the same regex), same synthetic URL list (N, default 1M), one core each.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin} PY=.venv/bin/python N=${N:-1000000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
$PY tests/bench/baseline_blacklist.py make "$work/urls.txt" "$N"
best=999999
for run in 1 2 3; do
  t0=$(date +%s.%N)
  taskset -c 0 "$BIN/blacklist_urls" "$work/urls.txt" "$work/out.txt" --threads 1 -q
  t1=$(date +%s.%N)
  best=$(echo "t=$t1 - $t0; if (t < $best) t else $best" | bc -l)
done
read -r py_s py_n py_acc < <(taskset -c 0 $PY tests/bench/baseline_blacklist.py run "$work/urls.txt")
ours_acc=$(wc -l < "$work/out.txt")
echo "| tool | URLs/s (1 core) | accepted |"
echo "|---|---|---|"
printf "| zerolm blacklist_urls | %.0f | %d |\n" "$(echo "$N/$best" | bc -l)" "$ours_acc"
printf "| Python (tldextract + re, Megatron's logic) | %.0f | %d |\n" "$(echo "$py_n/$py_s" | bc -l)" "$py_acc"
printf "speed-up: %.1fx\n" "$(echo "$py_s/$best" | bc -l)"
