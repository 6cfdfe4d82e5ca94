OUT=$1 BIN=$2 DATA=$3
CASE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
grep -q '"reason": "non_english: fr' $OUT/rejected.jsonl && grep -q '"reason": "small: ' $OUT/rejected.jsonl &&
grep -q '"reason": "malformed_json' $OUT/rejected.jsonl && [[ $(wc -l < $OUT/rejected.jsonl) == 3 ]] &&
grep -q '"docs_written": 3' $OUT/stats.json &&
# one worker gives the same bytes
$BIN/cleanup $CASE/in.jsonl $OUT/one.jsonl --vocab-file $DATA/gpt2/gpt2-vocab.json --merge-file $DATA/gpt2/gpt2-merges.txt --workers 1 -q &&
cmp $OUT/one.jsonl $OUT/out.jsonl
