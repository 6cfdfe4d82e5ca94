#!/usr/bin/env bash
# Colossal-AI's GPT-2 data steps as its README and its Chinese tutorial page write them (README.md,
# block colossalai-data), download step included, over small data served on 127.0.0.1
# (tests/e2e/download_urls/server.py: /doc/N is OpenWebText fixture document N as an article
# page, /dup/N the same with one word changed):
#   <path/to/URLs>  a directory of two URL lists: /doc/0-199 and /dup/0-19 of the loopback server,
#                   plus URLs blacklist_urls must drop (a blacklisted domain, an image, repeats)
# Checks: clean_urls.txt holds the 220 page URLs in first-seen order; download_urls --n_procs 50
# writes 220 pages in that order; cleanup (GPT-2's own tokenizer, no flag given) keeps 219,
# dropping the fixture's one Croatian text (doc 149), and keeps the others in order; the 20 planted
# pairs are found, grouped and removed (199 documents, no /dup/ page); shuffle -o writes a
# permutation of them.
#   colossalai_data.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$SRC/tests/e2e/download_urls/lib.sh"
serve_docs . 200  # common.sh's exit trap stops it
P=$PORT
mkdir URLs
{ for n in $(seq 0 199); do echo "http://127.0.0.1:$P/doc/$n"; done; echo "http://www.youtube.com/watch?v=1"; } > URLs/a.txt
{ for n in $(seq 0 19); do echo "http://127.0.0.1:$P/dup/$n"; done; echo "http://127.0.0.1:$P/doc/5"
  echo "http://127.0.0.1:$P/photo.jpg"; } > URLs/b.txt
{ for n in $(seq 0 199); do echo "http://127.0.0.1:$P/doc/$n"; done
  for n in $(seq 0 19); do echo "http://127.0.0.1:$P/dup/$n"; done; } > expected_clean_urls.txt

tutorial colossalai-data --sub "<path/to/URLs>" "URLs" --sub "<path/to/clean_urls.txt>" "clean_urls.txt" \
  --sub "<path/to/raw.json>" "raw.json" --sub "<path/to/clean.json>" "clean.json" \
  --sub "<path/to/process_stage_one.json>" "stage_one.json" --sub "<path/to/process_stage_two.json>" "stage_two.json" \
  --sub "<path/to/dedup.json>" "dedup.json" --sub "<path/to/train_data.json>" "train_data.json"

cmp expected_clean_urls.txt clean_urls.txt || fail "clean_urls.txt is not the 220 page URLs in first-seen order"
urls() { grep -o '"url": "[^"]*"' "$1" | sed 's/"url": "http:[^ ]*:[0-9]*//; s/"$//'; }
cmp <(sed "s|http://127.0.0.1:$P||" clean_urls.txt) <(urls raw.json) || fail "download_urls did not write every page in input order"
[[ $(wc -l < clean.json) == 219 ]] || fail "cleanup kept $(wc -l < clean.json) documents, expected 219"
grep -q "cleanup.*no --vocab-file/--merge-file given: GPT-2's own, .*share/zerolm/gpt2/gpt2-vocab.json" colossalai-data.log || fail "cleanup did not say it used the installed GPT-2 files"
! grep -q '/doc/149"' clean.json || fail "the Croatian document 149 was kept"
cmp <(urls raw.json | grep -vx '/doc/149') <(urls clean.json) || fail "cleanup did not keep every other document in input order"
for n in $(seq 0 19); do
  grep -q "/dup/$n\"" stage_one.json || fail "find_duplicates missed the planted copy /dup/$n"
done
[[ $(wc -l < stage_two.json) == 20 ]] || fail "group_dups wrote $(wc -l < stage_two.json) groups, expected 20"
[[ $(wc -l < dedup.json) == 199 ]] || fail "dedup kept $(wc -l < dedup.json) documents, expected 199"
! grep -q '/dup/' dedup.json || fail "dedup kept a planted copy"
cmp <(sort dedup.json) <(sort train_data.json) || fail "train_data.json is not a permutation of dedup.json"
! cmp -s dedup.json train_data.json || fail "shuffle left the order unchanged"
echo "colossalai-data: ok"
