#!/usr/bin/env bash
# download_urls against the tools of the recipe's download step, on this machine.
#  A. Main-text extraction, one core: download_urls --from-warc --threads 1 over the 181
#     pages of the ScrapingHub article-extraction benchmark (a WARC made with warcio,
#     REPEAT copies for timing; the WARC read, the decoding and the extraction are all
#     in its time), against newspaper3k (what OpenWebText's download.py uses),
#     trafilatura, readability-lxml and jusText timed on their extraction calls alone
#     (run_extractors.py). F1 by the benchmark's scoring; checked first: ours is the
#     F1 the README states.
#  B. Fetching over loopback: URLS URLs of those pages served by a local server
#     (tests/e2e/download_urls/server.py on 127.0.0.1), download_urls --n_procs 256
#     against download.py's approach (baseline_download.py: a process pool of
#     requests + newspaper3k, --n_procs BASE_PROCS). Checked first: ours gives a page
#     for every URL, the baseline for at least 90% of them (newspaper3k finds no text on
#     some pages of the benchmark: part A's recall), and every URL the baseline has is
#     ours too. Pages per second of wall time and per CPU-second.
#   tests/bench/bench_download.sh      (SMOKE=1: 20 pages, 40 URLs, one run)
source "$(dirname "$0")/lib.sh"
BENCH=$DATA/article-extraction-benchmark
repeat=${REPEAT:-$([[ $SMOKE == 1 ]] && echo 1 || echo 5)}
py_pages=$([[ $SMOKE == 1 ]] && echo 20 || echo 0)
nurls=${URLS:-$([[ $SMOKE == 1 ]] && echo 40 || echo 905)}
base_procs=${BASE_PROCS:-16}

# ---- A. extraction ----
$PY tests/bench/extraction/extraction_quality.py "$BIN" "$BENCH" > "$work/quality.txt" || { cat "$work/quality.txt"; fail "extraction quality"; }
ours_f1=$(sed -n 's/.* F1 \([0-9.]*\) .*/\1/p' "$work/quality.txt")
$PY tests/bench/extraction/make_warc.py "$BENCH" "$work/bench.warc.gz" --repeat "$repeat" || fail "make_warc.py"
records=$((181 * repeat))
t=$(best_of taskset -c 0 "$BIN/download_urls" --from-warc "$work/bench.warc.gz" --output "$work/x.json" --threads 1 -q --no-progress)
ours_ps=$(calc "$records / $t")
taskset -c 0 $PY tests/bench/extraction/run_extractors.py "$BENCH" --pages "$py_pages" > "$work/py.jsonl" || fail "run_extractors.py"
echo
echo "A. main-text extraction, one core ($records pages for ours, $([[ $py_pages == 0 ]] && echo 181 || echo $py_pages) for the others)"
printf '%-18s %7s %10s %14s\n' extractor F1 pages/s "ours/theirs"
printf '%-18s %7s %10.1f %14s\n' "download_urls" "$ours_f1" "$ours_ps" "-"
$PY -c '
import json, sys
ours = float(sys.argv[1])
for line in open(sys.argv[2]):
    d = json.loads(line)
    print("%-18s %7.3f %10.1f %13.1fx" % (d["extractor"], d["f1"], d["pages_per_sec"], ours / d["pages_per_sec"]))
' "$ours_ps" "$work/py.jsonl"

# ---- B. fetching over loopback ----
$PY tests/e2e/download_urls/server.py --port-file "$work/port" --pages "$BENCH/html" &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do [[ -f $work/port ]] && break; sleep 0.1; done
port=$(cat "$work/port")
for ((i = 0; i < nurls; ++i)); do echo "http://127.0.0.1:$port/bench/$i"; done > "$work/urls.txt"
# the check: a page with text for every URL on both sides
"$BIN/download_urls" "$work/urls.txt" --output "$work/ours.json" --n_procs 256 --per-host 256 -q --no-progress || fail "download_urls"
$PY -W ignore tests/bench/baseline_download.py "$work/urls.txt" "$work/base.json" --n_procs "$base_procs" 2> /dev/null || fail "baseline_download.py"
[[ $(wc -l < "$work/ours.json") == "$nurls" ]] || fail "download_urls: $(wc -l < "$work/ours.json") of $nurls pages with text"
base_pages=$(wc -l < "$work/base.json")
(( base_pages * 10 >= nurls * 9 )) || fail "baseline: $base_pages of $nurls pages with text"
$PY -c '
import json, sys
ours = {json.loads(l)["url"] for l in open(sys.argv[1])}
base = {json.loads(l)["url"] for l in open(sys.argv[2])}
sys.exit(0 if base <= ours else 1)' "$work/ours.json" "$work/base.json" || fail "the baseline has pages download_urls has not"
timed() {  # timed NAME CMD...: prints "wall cpu" (best wall of RUNS, the CPU seconds of that run)
  local name=$1 best="" cpu="" t0 t1 c
  shift
  for ((run = 0; run < RUNS; ++run)); do
    t0=$(date +%s.%N)
    /usr/bin/time -o "$work/$name.time" -f "%U %S" "$@" > /dev/null 2>&1 || fail "$name"
    t1=$(date +%s.%N)
    c=$(awk '{print $1 + $2}' "$work/$name.time")
    if [[ -z $best ]] || (( $(calc "($t1 - $t0) < $best") )); then best=$(calc "$t1 - $t0"); cpu=$c; fi
  done
  echo "$best $cpu"
}
read -r ow oc <<< "$(timed ours "$BIN/download_urls" "$work/urls.txt" --output "$work/ours.json" --n_procs 256 --per-host 256 -q --no-progress)"
read -r bw bc <<< "$(timed base $PY tests/bench/baseline_download.py "$work/urls.txt" "$work/base.json" --n_procs "$base_procs")"
echo
echo "B. fetching $nurls pages over loopback (one Python server; the client's CPU only)"
printf '%-34s %9s %9s %14s\n' tool wall_s pages/s pages/CPU-s
printf '%-34s %9.2f %9.1f %14.1f\n' "download_urls --n_procs 256" "$ow" "$(calc "$nurls / $ow")" "$(calc "$nurls / $oc")"
printf '%-34s %9.2f %9.1f %14.1f   (%d pages with text)\n' "requests+newspaper3k, $base_procs procs" "$bw" \
  "$(calc "$nurls / $bw")" "$(calc "$nurls / $bc")" "$base_pages"
echo "ratio (wall): $(calc "$bw / $ow")x; per CPU-second: $(calc "($nurls / $oc) / ($nurls / $bc)")x"
