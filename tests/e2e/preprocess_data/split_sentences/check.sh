# 3 sentences -> 3 sequences, EOD (4999) only at the end of the last; the empty document is skipped.
OUT=$1 BIN=$2
info=$($BIN/dataset_info $OUT/s_text_sentence)
echo "$info" | grep -q "^documents: 2$" && echo "$info" | grep -q "^sequences: 4$" || { echo "$info"; exit 1; }
doc=$($BIN/dataset_info $OUT/s_text_sentence --doc 0)
[[ $(echo "$doc" | wc -l) == 3 ]] && [[ "$(echo "$doc" | tail -1)" == *" 4999" ]] && ! echo "$doc" | head -2 | grep -q 4999 &&
grep -q '"docs_empty_text": 1' $OUT/stats.json
