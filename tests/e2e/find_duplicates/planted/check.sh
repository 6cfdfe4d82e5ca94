# The dedup chain on planted near-duplicates: 200 OpenWebText documents plus 20
# copies with small edits. find_duplicates finds the 20 pairs (same output for 1
# and 4 threads), group_dups groups them, dedup removes exactly the copies.
OUT=$1 BIN=$2 DATA=$3
head -200 $DATA/megatron/openwebtext-1000.decoded.jsonl | awk '{sub(/^\{/, "{\"url\": \"o-" NR "\", "); print}' > $OUT/in.jsonl
head -20 $DATA/megatron/openwebtext-1000.decoded.jsonl | awk '{sub(/^\{/, "{\"url\": \"c-" NR "\", "); sub(/ the /, " THE "); sub(/ a /, " A "); print}' >> $OUT/in.jsonl
$BIN/find_duplicates --inputs $OUT/in.jsonl url --output $OUT/pairs1.jsonl --threads 1 -q || exit 1
$BIN/find_duplicates --inputs $OUT/in.jsonl url --output $OUT/pairs4.jsonl --threads 4 -q || exit 1
cmp $OUT/pairs1.jsonl $OUT/pairs4.jsonl || exit 1
[[ $(wc -l < $OUT/pairs1.jsonl) == 20 ]] || { cat $OUT/pairs1.jsonl; exit 1; }
$BIN/group_dups $OUT/pairs1.jsonl $OUT/groups.jsonl -q || exit 1
$BIN/dedup $OUT/groups.jsonl $OUT/in.jsonl $OUT/dedup.jsonl --removed-out $OUT/removed.jsonl -q || exit 1
cmp $OUT/dedup.jsonl <(head -200 $OUT/in.jsonl) && [[ $(grep -c '"url": "c-' $OUT/removed.jsonl) == 20 ]]
