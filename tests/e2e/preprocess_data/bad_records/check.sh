OUT=$1 BIN=$2
[[ "$($BIN/dataset_info $OUT/out_text_document --doc 0)" == "1 2 3 100" ]] &&
[[ "$($BIN/dataset_info $OUT/out_text_document --doc 1)" == "8 9 100" ]] &&
[[ "$($BIN/dataset_info $OUT/out_text_document --doc 2)" == "10 100" ]] &&
grep -q '"docs_bad": 6' $OUT/stats.json && grep -q '"docs_written_text": 3' $OUT/stats.json
