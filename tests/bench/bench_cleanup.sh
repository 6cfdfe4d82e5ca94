#!/usr/bin/env bash
# cleanup against a Python baseline of Megatron's cleanup_dataset.py (ftfy +
# seeded langdetect + GPT-2 token count), one core each, on the same documents:
# the 1000 OpenWebText fixture texts, each run once per process (start-up
# included on our side; the baseline times its loop only). Four rows for
# ours: the default (language ID on the first 4 KiB of each text, from six
# 256-byte windows where they agree), --lang-id-exact (all of the 4 KiB every
# time), and both again with --lang-id-bytes 0 (the whole text, as the
# baseline reads it). Before any time is printed, each default's output must
# equal its --lang-id-exact twin's byte for byte, and the kept documents of
# both sides are compared: CLD2 and
# langdetect are different classifiers, so they may disagree on a few mixed or
# short texts; more than MAX_DIFF (default 1%) differing documents fail.
#   tests/bench/bench_cleanup.sh     (RUNS; SMOKE=1: 200 documents, one run)
source "$(dirname "$0")/lib.sh"
docs=$([[ $SMOKE == 1 ]] && echo 200 || echo 1000)
head -n $docs $DATA/megatron/openwebtext-1000.decoded.jsonl |
  awk '{sub(/^\{/, "{\"url\": \"u" NR "\", "); print}' > "$work/in.jsonl"
MAX_DIFF=${MAX_DIFF:-$((docs / 100))}
ours() {  # ours NAME ARGS...: best seconds; kept urls in $work/NAME.urls
  local name=$1
  shift
  best_of taskset -c 0 "$BIN/cleanup" "$work/in.jsonl" "$work/$name.jsonl" --vocab-file $DATA/gpt2/gpt2-vocab.json \
    --merge-file $DATA/gpt2/gpt2-merges.txt --workers 1 -q "$@"
  $PY -c 'import json,sys; [print(json.loads(l)["url"]) for l in open(sys.argv[1])]' "$work/$name.jsonl" > "$work/$name.urls"
}
ours_s=$(ours default)
ours_exact_s=$(ours exact --lang-id-exact)
ours_all_s=$(ours whole --lang-id-bytes 0)
ours_all_exact_s=$(ours whole_exact --lang-id-bytes 0 --lang-id-exact)
cmp "$work/default.jsonl" "$work/exact.jsonl" || fail "the windows' shortcut changed cleanup's output"
cmp "$work/whole.jsonl" "$work/whole_exact.jsonl" || fail "the windows' shortcut changed cleanup's output (whole text)"
result py_s py_docs py_kept -- taskset -c 0 $PY tests/bench/baseline_cleanup.py "$work/in.jsonl" \
  $DATA/gpt2/gpt2-vocab.json $DATA/gpt2/gpt2-merges.txt "$work/py.urls" || fail "baseline_cleanup.py"
differ() { comm -3 <(sort "$1") <(sort "$2") | wc -l; }
d_default=$(differ "$work/default.urls" "$work/py.urls")
d_whole=$(differ "$work/whole.urls" "$work/py.urls")
echo "kept documents that differ from the baseline's: $d_default (4 KiB language ID), $d_whole (whole text); limit $MAX_DIFF" >&2
((d_default <= MAX_DIFF && d_whole <= MAX_DIFF)) || { comm -3 <(sort "$work/whole.urls") <(sort "$work/py.urls") | head >&2
  fail "more than $MAX_DIFF kept documents differ from the baseline's"; }
echo "| cleanup, 1 core, $docs OpenWebText documents | docs/s | kept | differ from baseline | speed-up |"
echo "|---|---|---|---|---|"
printf "| zerolm cleanup (fix_text + CLD2 on the first 4 KiB, six windows where they agree, + GPT-2 count) | %.0f | %d | %d | %.1fx |\n" \
  "$(calc "$docs / $ours_s")" "$(wc -l < "$work/default.urls")" "$d_default" "$(calc "$py_s / $ours_s")"
printf "| zerolm cleanup --lang-id-exact (CLD2 on all of the first 4 KiB) | %.0f | %d | %d | %.1fx |\n" \
  "$(calc "$docs / $ours_exact_s")" "$(wc -l < "$work/exact.urls")" "$d_default" "$(calc "$py_s / $ours_exact_s")"
printf "| zerolm cleanup --lang-id-bytes 0 (CLD2 on the whole text, windows where they agree) | %.0f | %d | %d | %.1fx |\n" \
  "$(calc "$docs / $ours_all_s")" "$(wc -l < "$work/whole.urls")" "$d_whole" "$(calc "$py_s / $ours_all_s")"
printf "| zerolm cleanup --lang-id-bytes 0 --lang-id-exact (CLD2 on all of the whole text) | %.0f | %d | %d | %.1fx |\n" \
  "$(calc "$docs / $ours_all_exact_s")" "$(wc -l < "$work/whole_exact.urls")" "$d_whole" "$(calc "$py_s / $ours_all_exact_s")"
printf "| Python (ftfy + langdetect + tiktoken), as cleanup_dataset.py | %.0f | %d | - | 1.0x |\n" \
  "$(calc "$py_docs / $py_s")" "$py_kept"
