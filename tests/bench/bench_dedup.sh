#!/usr/bin/env bash
# MinHash fingerprinting, one core: zerolm (the signature kernel, and
# find_duplicates end to end with JSON parsing) against datasketch's MinHash
# (num_perm=100, character 5-grams, update_batch) with its default SHA-1 hash
# and with MurmurHash3, on the OpenWebText fixture documents.
# Megatron's find_duplicates.py imports the Cython `lsh` package (mattilyra/LSH,
# murmur3 shingles), which is installed from GitHub and is not on PyPI (PyPI's
# `lsh` 0.1.2 is an unrelated learning-to-hash package), so it cannot be
# installed here; datasketch with MurmurHash3 is the closest row we can run.
# Checks first: the kernel's signatures of all 1000 documents equal the slow
# reference's (in zlm_bench_dedup), and find_duplicates on an input with
# planted near-duplicates reports every planted pair with its exact Jaccard.
#   tests/bench/bench_dedup.sh     (RUNS; SMOKE=1: 100 documents, one run)
source "$(dirname "$0")/lib.sh"
docs=$([[ $SMOKE == 1 ]] && echo 100 || echo 1000)
min_time=$([[ $SMOKE == 1 ]] && echo 0.01 || echo 0.5)
taskset -c 0 "$BIN/zlm_bench_dedup" --benchmark_filter=BM_MinHashSignature --benchmark_repetitions=$RUNS \
  --benchmark_min_time=$min_time --benchmark_format=json > "$work/kernel.json" || fail "zlm_bench_dedup (checks signatures first)"
kernel=$(calc "$(gbench_best "$work/kernel.json" BM_MinHashSignature bytes_per_second) / 1e6")
target=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["context"]["minhash_target"])' "$work/kernel.json")
copies=$((docs / 10))
$PY tests/bench/planted_duplicates.py make $DATA/megatron/openwebtext-1000.decoded.jsonl "$work/in.jsonl" $docs $copies
e2e=0
for ((run = 0; run < RUNS; ++run)); do
  taskset -c 0 "$BIN/find_duplicates" --inputs "$work/in.jsonl" url --output "$work/similar.jsonl" --threads 1 -q \
    --stats-out "$work/s.json" || fail "find_duplicates"
  v=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["fingerprint_mb_per_sec"])' "$work/s.json")
  e2e=$(calc "$v > $e2e ? $v : $e2e")
done
$PY tests/bench/planted_duplicates.py check "$work/in.jsonl" "$work/similar.jsonl" $copies >&2 || fail "find_duplicates' output"
result sha1 _ -- taskset -c 0 $PY tests/bench/baseline_minhash.py $DATA sha1 $RUNS $docs || fail "baseline_minhash.py sha1"
result mm3 _ -- taskset -c 0 $PY tests/bench/baseline_minhash.py $DATA mmh3 $RUNS $docs || fail "baseline_minhash.py mmh3"
ds=$($PY -c 'import datasketch;print(datasketch.__version__)')
echo "| MinHash, 100 permutations, char 5-grams, 1 core, $docs OpenWebText documents | MB/s | vs datasketch + MurmurHash3 | vs datasketch default |"
echo "|---|---|---|---|"
printf "| zerolm signature kernel (Highway, %s here) | %.1f | %.0fx | %.0fx |\n" "$target" "$kernel" "$(calc "$kernel / $mm3")" "$(calc "$kernel / $sha1")"
printf "| zerolm find_duplicates fingerprint stage (JSON + signatures) | %.1f | %.0fx | %.0fx |\n" "$e2e" "$(calc "$e2e / $mm3")" "$(calc "$e2e / $sha1")"
printf "| datasketch %s MinHash.update_batch, hashfunc mmh3.hash (fast) | %.2f | 1x | |\n" "$ds" "$mm3"
printf "| datasketch %s MinHash.update_batch, default hashfunc (SHA-1) | %.2f | | 1x |\n" "$ds" "$sha1"
echo "(Megatron's Cython lsh engine: not on PyPI, not measured)"
