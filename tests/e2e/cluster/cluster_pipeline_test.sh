#!/usr/bin/env bash
# scripts/cluster_pipeline.sh (--local-tasks) against scripts/pipeline.sh on one
# machine: 200 OpenWebText documents plus planted near-duplicates, the one
# machine's run over raw.jsonl, the sharded runs over raw.jsonl cut into shards
# (some gzip-compressed). The final .bin/.idx must be byte-identical for 1, 3
# and 7 shards, several hash ranges, buckets and task widths; a run killed
# mid-way and run again gives the same bytes; a re-run does nothing; a failing
# task is retried, then reported with its log.
#   cluster_pipeline_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
SRC=$1 BIN=$2
DATA=$SRC/tests/data
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
TOK=(--vocab-file $DATA/megatron/gpt2-tiny-vocab.json --merge-file $DATA/megatron/gpt2-tiny-merges.txt)
head -200 $DATA/megatron/openwebtext-1000.decoded.jsonl | awk '{sub(/^\{/, "{\"url\": \"o-" NR "\", "); print}' > $W/raw.jsonl
head -20 $DATA/megatron/openwebtext-1000.decoded.jsonl | awk '{sub(/^\{/, "{\"url\": \"c-" NR "\", "); sub(/ the /, " THE "); print}' >> $W/raw.jsonl
sed -n '30,45p' $DATA/megatron/openwebtext-1000.decoded.jsonl | awk '{sub(/^\{/, "{\"url\": \"x-" NR "\", "); print}' >> $W/raw.jsonl
BIN=$BIN $SRC/scripts/pipeline.sh --raw $W/raw.jsonl --work $W/one --urls $DATA/urls/urls.txt "${TOK[@]}" --threads 2 > $W/one.log 2>&1 || { cat $W/one.log; fail "pipeline.sh"; }
want=$(cat $W/one/gpt2_text_document.bin $W/one/gpt2_text_document.idx | md5sum)
docs=$("$BIN/dataset_info" $W/one/gpt2_text_document | sed -n 's/^documents: //p')
(( docs > 150 && docs < 220 )) || fail "the one-machine dataset has $docs documents"

shards() {  # shards DIR K: raw.jsonl cut into K consecutive pieces, every third gzip-compressed
  local d=$1 k=$2 n i
  mkdir -p $d
  n=$(wc -l < $W/raw.jsonl)
  for ((i = 0; i < k; i++)); do
    sed -n "$(( i * n / k + 1 )),$(( (i + 1) * n / k ))p" $W/raw.jsonl > $d/s-$(printf %03d $i).jsonl
    (( i % 3 == 1 )) && gzip $d/s-$(printf %03d $i).jsonl
  done
  true
}
cluster() {  # cluster WORK SHARDS [flags...]
  local w=$1 s=$2
  shift 2
  BIN=$BIN $SRC/scripts/cluster_pipeline.sh --shards $s --work $w "${TOK[@]}" "$@" > $w.log 2>&1 || { cat $w.log; fail "cluster_pipeline.sh $*"; }
}
same() {
  [[ $(cat $1/gpt2_text_document.bin $1/gpt2_text_document.idx | md5sum) == "$want" ]] || { cat $1/summary.txt; fail "$2: other bytes than one machine's"; }
  echo "ok: $2"
}
for k in 1 3 7; do
  shards $W/shards$k $k
  cluster $W/c$k $W/shards$k --local-tasks 3 --ranges 2 --buckets 4
  same $W/c$k "$k shards, 2 ranges, 4 buckets, 3 tasks at a time"
done
cluster $W/cu $W/shards3 --urls $DATA/urls/urls.txt --local-tasks 2
cmp $W/cu/urls.clean.txt $W/one/urls.clean.txt || fail "the clean URL list differs from pipeline.sh's"
same $W/cu "--urls: blacklist_urls as one task, the same clean URL list"
cluster $W/c7b $W/shards7 --local-tasks 1 --buckets 1 --threads 2
same $W/c7b "7 shards, 1 bucket, 1 task at a time"
grep -qE '^\| filter +\| +7 of 7 +\| +[0-9]+ \| +[0-9]+ \|' $W/c7/summary.txt || { cat $W/c7/summary.txt; fail "no filter row in the table"; }

# A re-run does nothing and prints the same table.
cluster $W/c3 $W/shards3 --local-tasks 3 --ranges 2 --buckets 4
grep -q '>>>' $W/c3.log && { cat $W/c3.log; fail "a re-run ran tasks"; }
same $W/c3 "a re-run runs nothing"

# Other settings on a finished work directory: refused, never a resumed mix.
if BIN=$BIN $SRC/scripts/cluster_pipeline.sh --shards $W/shards3 --work $W/c3 "${TOK[@]}" --ranges 2 --buckets 4 --seed 99 > $W/other.log 2>&1; then
  fail "another --seed on a finished work directory passed"
fi
grep -q 'was made with other settings' $W/other.log || { cat $W/other.log; fail "no message for other settings"; }
if "$BIN/shuffle" --sharded gather --parts $W/c3/deduped --work $W/c3/shuffle-work --buckets 8 --bucket-dir $W/c3/shuffled > $W/other.log 2>&1; then
  fail "shuffle --sharded gather with another bucket count on a bucket directory passed"
fi
grep -q 'holds the buckets of another shuffle' $W/other.log || { cat $W/other.log; fail "no message for another shuffle's buckets"; }
echo "ok: other settings are refused"

# SIGKILL mid-run (the whole process group), then a re-run: the same bytes.
setsid bash -c "BIN=$BIN $SRC/scripts/cluster_pipeline.sh --shards $W/shards7 --work $W/k ${TOK[*]} --local-tasks 2 --buckets 4" > $W/k.log 2>&1 &
pid=$!
for _ in $(seq 300); do [[ -n $(ls $W/k/.tasks/candidates 2> /dev/null) ]] && break; sleep 0.05; done
kill -KILL -- -$pid 2> /dev/null || true
wait $pid 2> /dev/null || true
[[ -e $W/k/gpt2_text_document.idx ]] && fail "killed, yet the dataset exists: the kill tested nothing"
cluster $W/k $W/shards7 --local-tasks 2 --buckets 4
same $W/k "killed during the candidates, then run again"

# A task that fails: retried, then the stage stops naming its log; fixed, a re-run completes.
mkdir -p $W/bad && cp $W/shards3/* $W/bad/ && printf 'not json\n{"url": "b", "text": \n' > $W/bad/s-009.jsonl  # every record bad
if BIN=$BIN $SRC/scripts/cluster_pipeline.sh --shards $W/bad --work $W/cb "${TOK[@]}" --retries 1 > $W/cb.log 2>&1; then fail "a bad shard passed"; fi
grep -q 'cleanup task 3 failed (attempt 2 of 2)' $W/cb.log || { cat $W/cb.log; fail "no retry reported"; }
grep -q 'stage cleanup failed' $W/cb.log || { cat $W/cb.log; fail "the failed stage is not named"; }
echo "ok: a failing task is retried and named"
echo "cluster pipeline ok"
