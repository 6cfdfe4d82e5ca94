# Same seed -> same output, whatever the bucket count; a different seed -> another order;
# the output is a permutation of the input lines.
OUT=$1 BIN=$2 DATA=$3
$BIN/shuffle --seed 7 --memory-mb 1 $DATA/megatron/openwebtext-1000.decoded.jsonl $OUT/b.jsonl -q || exit 1
gzip -c $DATA/megatron/openwebtext-1000.decoded.jsonl > $OUT/in.gz
$BIN/shuffle --seed 7 $OUT/in.gz $OUT/c.jsonl -q || exit 1
$BIN/shuffle --seed 8 $DATA/megatron/openwebtext-1000.decoded.jsonl $OUT/d.jsonl -q || exit 1
cmp $OUT/a.jsonl $OUT/b.jsonl && cmp $OUT/a.jsonl $OUT/c.jsonl && ! cmp -s $OUT/a.jsonl $OUT/d.jsonl &&
! cmp -s $OUT/a.jsonl $DATA/megatron/openwebtext-1000.decoded.jsonl &&
[[ "$(sort $OUT/a.jsonl | md5sum)" == "$(sort $DATA/megatron/openwebtext-1000.decoded.jsonl | md5sum)" ]] &&
[[ -z "$(ls $OUT | grep bucket)" ]]
