OUT=$1 BIN=$2 CASE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
grep -q '"urls_in": 9' $OUT/stats.json && grep -q '"urls_duplicate": 1' $OUT/stats.json &&
# Same result from stdin, one thread.
cat $CASE/lists/a.txt $CASE/lists/b.txt | $BIN/blacklist_urls - $OUT/stdin.txt --threads 1 -q && cmp $OUT/stdin.txt $OUT/out.txt
