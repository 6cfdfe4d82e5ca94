# shuf's spelling: the output by -o (or --output=), a long option by an unambiguous prefix (--se for
# --seed, as getopt_long takes it); the same bytes as the positional form. The output given
# twice, or not at all, is refused.
OUT=$1 BIN=$2 DATA=$3
$BIN/shuffle --seed 7 $DATA/megatron/openwebtext-1000.decoded.jsonl $OUT/b.jsonl -q || exit 1
$BIN/shuffle $DATA/megatron/openwebtext-1000.decoded.jsonl --out=$OUT/c.jsonl --seed=7 -q || exit 1
cmp $OUT/a.jsonl $OUT/b.jsonl && cmp $OUT/a.jsonl $OUT/c.jsonl || exit 1
! $BIN/shuffle $DATA/megatron/openwebtext-1000.decoded.jsonl $OUT/d.jsonl -o $OUT/e.jsonl 2> $OUT/twice.txt &&
grep -q "the output is given twice" $OUT/twice.txt &&
! $BIN/shuffle $DATA/megatron/openwebtext-1000.decoded.jsonl 2> $OUT/none.txt && grep -q "no output" $OUT/none.txt
