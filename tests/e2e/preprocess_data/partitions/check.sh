# Megatron's round-robin partitions: line j -> partition j % 2, merged in partition order.
OUT=$1 BIN=$2
order=""
for d in 0 1 2 3 4 5 6 7 8 9; do order+="$($BIN/dataset_info $OUT/p_text_document --doc $d | cut -d' ' -f1) "; done
[[ "$order" == "0 2 4 6 8 1 3 5 7 9 " ]] || { echo "order: $order"; exit 1; }
[[ -f $OUT/p_0_text_document.idx && -f $OUT/p_1_text_document.bin ]]
