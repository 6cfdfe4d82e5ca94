#!/usr/bin/env bash
# scripts/cluster_pipeline.sh --urls alone (the URL list fetched as --download-tasks parts, the parts
# being the shards) against scripts/pipeline.sh --urls on one machine, pages served on 127.0.0.1
# from 220 OpenWebText fixture documents and 20 planted near-duplicates: the .bin/.idx are
# byte-identical for 1 and 3 download tasks; a re-run submits nothing.
#   cluster_urls_test.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
SRC=$1 BIN=$2 PY=$3
DATA=$SRC/tests/data
source $SRC/tests/e2e/download_urls/lib.sh
init_test_dir
fail() { echo "FAIL: $*"; exit 1; }
TOK=(--vocab-file $DATA/megatron/gpt2-tiny-vocab.json --merge-file $DATA/megatron/gpt2-tiny-merges.txt)
serve_docs $W 220
P=$PORT
mkdir $W/lists
for i in $(seq 0 219); do echo "http://127.0.0.1:$P/doc/$i"; done > $W/lists/a.txt
{ for i in $(seq 0 19); do echo "http://127.0.0.1:$P/dup/$i"; done; echo "http://127.0.0.1:$P/404"; } > $W/lists/b.txt
BIN=$BIN $SRC/scripts/pipeline.sh --urls $W/lists --work $W/one "${TOK[@]}" --threads 2 --download-procs 8 > $W/one.log 2>&1 \
  || { cat $W/one.log; fail "pipeline.sh"; }
want=$(cat $W/one/gpt2_text_document.bin $W/one/gpt2_text_document.idx | md5sum)
docs=$("$BIN/dataset_info" $W/one/gpt2_text_document | sed -n 's/^documents: //p')
(( docs > 150 && docs < 240 )) || fail "the one-machine dataset has $docs documents"
for k in 1 3; do
  BIN=$BIN $SRC/scripts/cluster_pipeline.sh --urls $W/lists --work $W/c$k --download-tasks $k --download-procs 8 \
    --local-tasks 2 --buckets 2 "${TOK[@]}" > $W/c$k.log 2>&1 || { cat $W/c$k.log; fail "cluster_pipeline.sh --download-tasks $k"; }
  [[ $(cat $W/c$k/gpt2_text_document.bin $W/c$k/gpt2_text_document.idx | md5sum) == "$want" ]] \
    || { cat $W/c$k/summary.txt; fail "--download-tasks $k: the dataset differs from pipeline.sh's"; }
  grep -qE "^\| download_urls +\| +$k of $k +\| +241 \| +240 \|" $W/c$k/summary.txt || { cat $W/c$k/summary.txt; fail "download_urls row"; }
done
BIN=$BIN $SRC/scripts/cluster_pipeline.sh --urls $W/lists --work $W/c3 --download-tasks 3 --download-procs 8 \
  --local-tasks 2 --buckets 2 "${TOK[@]}" > $W/again.log 2>&1 || { cat $W/again.log; fail "re-run"; }
! grep -q '^>>>' $W/again.log || fail "a re-run ran tasks: $(grep '^>>>' $W/again.log)"
echo "cluster pipeline from URLs ok: $docs documents, 1 and 3 download tasks"
