#!/usr/bin/env bash
# blacklist_urls against a Python baseline of Megatron's blacklist_urls.py
# (tldextract + the same regex and rules), one core each, on the same seeded
# synthetic URL list (N URLs, default 1M). Before any time is printed, the
# sorted accepted sets of both sides must be identical (cmp).
#   tests/bench/bench_blacklist.sh     (N, RUNS; SMOKE=1: 20000 URLs, one run)
source "$(dirname "$0")/lib.sh"
N=${N:-$([[ $SMOKE == 1 ]] && echo 20000 || echo 1000000)}
export LC_ALL=C
$PY tests/bench/baseline_blacklist.py make "$work/urls.txt" "$N"
ours_s=$(best_of taskset -c 0 "$BIN/blacklist_urls" "$work/urls.txt" "$work/out.txt" --threads 1 -q)
result py_s py_n py_acc -- taskset -c 0 $PY tests/bench/baseline_blacklist.py run "$work/urls.txt" "$work/py.txt" ||
  fail "baseline_blacklist.py"
sort "$work/out.txt" > "$work/ours.txt"
cmp -s "$work/ours.txt" "$work/py.txt" || { diff "$work/ours.txt" "$work/py.txt" | head -n 10 >&2; fail "the accepted URLs differ from the Python baseline's"; }
echo "| blacklist_urls, $N synthetic URLs, 1 core | URLs/s | accepted | speed-up |"
echo "|---|---|---|---|"
printf "| zerolm blacklist_urls (best of $RUNS) | %.0f | %d | %.1fx |\n" "$(calc "$N / $ours_s")" "$(wc -l < "$work/ours.txt")" \
  "$(calc "$py_s / $ours_s")"
printf "| Python (tldextract + re, Megatron's logic) | %.0f | %d | 1.0x |\n" "$(calc "$py_n / $py_s")" "$py_acc"
