#!/usr/bin/env bash
# Colossal-AI's GPT-2 data steps as its README and its Chinese tutorial page write them (README.md,
# block colossalai-data), over small data:
#   <path/to/URLs>  a directory holding tests/data/urls/urls.txt (67 URLs)
#   <path/to/raw.json>  200 OpenWebText documents (url o-N) and 20 near-duplicates of the first 20 (url c-N)
# The tutorial's download step (download/download.py) is not run: zerolm has no download_urls yet.
# Checks: clean_urls.txt holds exactly the URLs the golden (tests/data/urls/golden.tsv) accepts, in
# first-seen order; cleanup (GPT-2's own tokenizer, no flag given) keeps 219 documents, dropping the
# fixture's one Croatian text (o-150), and keeps the others in order; the 20 planted pairs are found,
# grouped and removed (199 documents, none of them c-N); shuffle -o writes a permutation of them.
#   colossalai_data.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
source "$(dirname "$0")/common.sh"
mkdir URLs && cp $DATA/urls/urls.txt URLs/
head -200 $DATA/megatron/openwebtext-1000.decoded.jsonl | awk '{sub(/^\{/, "{\"url\": \"o-" NR "\", "); print}' > raw.json
head -20 $DATA/megatron/openwebtext-1000.decoded.jsonl | awk '{sub(/^\{/, "{\"url\": \"c-" NR "\", "); sub(/ the /, " THE "); print}' >> raw.json

tutorial colossalai-data --sub "<path/to/URLs>" "URLs" --sub "<path/to/clean_urls.txt>" "clean_urls.txt" \
  --sub "<path/to/raw.json>" "raw.json" --sub "<path/to/clean.json>" "clean.json" \
  --sub "<path/to/process_stage_one.json>" "stage_one.json" --sub "<path/to/process_stage_two.json>" "stage_two.json" \
  --sub "<path/to/dedup.json>" "dedup.json" --sub "<path/to/train_data.json>" "train_data.json"

awk -F'\t' '$5 == "accepted" {print $1}' $DATA/urls/golden.tsv | cmp - clean_urls.txt || fail "clean_urls.txt is not the golden's accepted URLs"
[[ $(wc -l < clean.json) == 219 ]] || fail "cleanup kept $(wc -l < clean.json) documents, expected 219"
grep -q "cleanup.*no --vocab-file/--merge-file given: GPT-2's own, .*share/zerolm/gpt2/gpt2-vocab.json" colossalai-data.log || fail "cleanup did not say it used the installed GPT-2 files"
! grep -q '"url": "o-150"' clean.json || fail "the Croatian document o-150 was kept"
urls() { grep -o '^{"url": "[^"]*"' "$1"; }
cmp <(urls raw.json | grep -v '"o-150"') <(urls clean.json) || fail "cleanup did not keep every other document in input order"
for n in $(seq 1 20); do
  grep -q "\"c-$n\"" stage_one.json || fail "find_duplicates missed the planted copy c-$n"
done
[[ $(wc -l < stage_two.json) == 20 ]] || fail "group_dups wrote $(wc -l < stage_two.json) groups, expected 20"
[[ $(wc -l < dedup.json) == 199 ]] || fail "dedup kept $(wc -l < dedup.json) documents, expected 199"
! grep -q '"url": "c-' dedup.json || fail "dedup kept a planted copy"
cmp <(sort dedup.json) <(sort train_data.json) || fail "train_data.json is not a permutation of dedup.json"
! cmp -s dedup.json train_data.json || fail "shuffle left the order unchanged"
echo "colossalai-data: ok"
