#!/usr/bin/env bash
# scripts/pipeline.sh end to end on 200 OpenWebText documents plus 20 planted
# near-duplicates: cleanup drops the one Croatian document of the fixture, the
# duplicates are removed, the dataset has 199 documents,
# a second run resumes every stage without changing the outputs, and a deleted
# stage output is rebuilt alone.
#   pipeline_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
SRC=$1 BIN=$2
DATA=$SRC/tests/data
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
head -200 $DATA/megatron/openwebtext-1000.decoded.jsonl | awk '{sub(/^\{/, "{\"url\": \"o-" NR "\", "); print}' > $W/raw.jsonl
head -20 $DATA/megatron/openwebtext-1000.decoded.jsonl | awk '{sub(/^\{/, "{\"url\": \"c-" NR "\", "); sub(/ the /, " THE "); print}' >> $W/raw.jsonl
run() { BIN=$BIN $SRC/scripts/pipeline.sh --raw $W/raw.jsonl --work $W/work --urls $DATA/urls/urls.txt \
        --vocab-file $DATA/megatron/gpt2-tiny-vocab.json --merge-file $DATA/megatron/gpt2-tiny-merges.txt --threads 2 2>&1; }
run > $W/log1
grep -qE '^\| cleanup +\| +220 \| +219 \|' $W/work/summary.txt || { cat $W/log1; exit 1; }
grep -qE '^\| dedup +\| +219 \| +199 \|' $W/work/summary.txt || { cat $W/log1; exit 1; }
grep -qE '^\| preprocess_data +\| +199 \| +199 \|' $W/work/summary.txt || { cat $W/work/summary.txt; exit 1; }
md5=$(md5sum $W/work/gpt2_text_document.bin $W/work/shuffled.jsonl)
run > $W/log2
[[ $(grep -c '| resumed |' $W/work/summary.txt) == 7 ]] || { cat $W/work/summary.txt; exit 1; }
rm $W/work/shuffled.jsonl
run > $W/log3
grep -qE '^\| shuffle .*\| ran \|' $W/work/summary.txt && grep -qE '^\| dedup .*\| resumed \|' $W/work/summary.txt
[[ "$(md5sum $W/work/gpt2_text_document.bin $W/work/shuffled.jsonl)" == "$md5" ]]
echo "pipeline ok"
