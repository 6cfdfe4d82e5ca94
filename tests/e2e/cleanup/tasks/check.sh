# general_cleaning alone: runs of spaces and word-boundary newlines become one space.
OUT=$1 BIN=$2
CASE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p $OUT/gc && $BIN/cleanup --tasks general_cleaning --input-files $CASE/in.jsonl --output-path $OUT/gc -q &&
grep -q 'line with spaces next' $OUT/gc/in_cleaned.jsonl && grep -q '"task_ftfy_fix_text": 2' $OUT/stats.json &&
grep -q '"task_remove_512": 1' $OUT/stats.json
