OUT=$1 BIN=$2
[[ "$($BIN/dataset_info $OUT/m_a_document --doc 1)" == "6 786" ]] && [[ "$($BIN/dataset_info $OUT/m_b_document --doc 1)" == "4 5 786" ]] &&
[[ "$($BIN/dataset_info $OUT/m_a_document --doc 0)" == "1 2 786" ]]
