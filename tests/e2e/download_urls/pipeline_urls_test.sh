#!/usr/bin/env bash
# scripts/pipeline.sh from URL lists alone: blacklist_urls -> download_urls -> ... -> .bin/.idx,
# the pages served on 127.0.0.1 from 150 OpenWebText fixture documents (plus URLs that
# blacklist_urls drops, repeated URLs and a 404). Then a second run resumes every stage.
#   pipeline_urls_test.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
SRC=$1 BIN=$2 PY=$3
DATA=$SRC/tests/data
source $SRC/tests/e2e/download_urls/lib.sh
init_test_dir
serve_docs $W 150
P=$PORT
mkdir $W/lists
for i in $(seq 0 99); do echo "http://127.0.0.1:$P/doc/$i"; done > $W/lists/a.txt
{ for i in $(seq 90 149); do echo "http://127.0.0.1:$P/doc/$i"; done   # 10 repeated across the lists
  echo "http://127.0.0.1:$P/404"
  echo "http://127.0.0.1:$P/picture.jpg"                              # dropped by extension
  echo "http://www.youtube.com/watch?v=x"; } > $W/lists/b.txt          # dropped by domain, never fetched
run() { BIN=$BIN $SRC/scripts/pipeline.sh --urls $W/lists --work $W/work --download-procs 8 \
        --download-arg --timeout --download-arg 10 \
        --vocab-file $DATA/megatron/gpt2-tiny-vocab.json --merge-file $DATA/megatron/gpt2-tiny-merges.txt --threads 2 2>&1; }
run > $W/log1 || { cat $W/log1; exit 1; }
grep -qE '^\| blacklist_urls +\| +- \| +151 \|' $W/work/summary.txt || { cat $W/work/summary.txt; exit 1; }
grep -qE '^\| download_urls +\| +151 \| +150 \|' $W/work/summary.txt || { cat $W/work/summary.txt; exit 1; }
[[ $(grep -c '"reason": "http_status"' $W/work/download.meta.jsonl) == 1 ]]
docs=$($BIN/dataset_info $W/work/gpt2_text_document | sed -n 's/^documents: //p')
(( docs > 100 )) || { cat $W/work/summary.txt; exit 1; }
md5=$(md5sum < $W/work/gpt2_text_document.bin)
run > $W/log2
[[ $(grep -c '| resumed |' $W/work/summary.txt) == 8 ]] || { cat $W/work/summary.txt; exit 1; }
[[ "$(md5sum < $W/work/gpt2_text_document.bin)" == "$md5" ]]
echo "pipeline from URLs ok: $docs documents"
