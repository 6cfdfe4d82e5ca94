OUT=$1 BIN=$2
order=""
for d in 0 1 2 3 4 5 6 7 8 9; do order+="$($BIN/dataset_info $OUT/p_text_document --doc $d | cut -d' ' -f1) "; done
[[ "$order" == "0 1 2 3 4 5 6 7 8 9 " ]] || { echo "order: $order"; exit 1; }
