# .gz/.xz/.zst inputs, a directory and a glob give the same bytes as the plain file.
OUT=$1 BIN=$2 DATA=$3
mkdir -p $OUT/dir
gzip -c $DATA/megatron/test.jsonl > $OUT/dir/a.jsonl.gz
xz -c $DATA/megatron/test.jsonl > $OUT/dir/b.jsonl.xz
zstd -q -c $DATA/megatron/test.jsonl > $OUT/dir/c.jsonl.zst
for f in a.jsonl.gz b.jsonl.xz c.jsonl.zst; do
  $BIN/preprocess_data --input $OUT/dir/$f --tokenizer-type NullTokenizer --vocab-size 131072 --append-eod --output-prefix $OUT/$f -q || exit 1
  cmp $OUT/$f"_text_document.bin" $OUT/plain_text_document.bin && cmp $OUT/$f"_text_document.idx" $OUT/plain_text_document.idx || exit 1
done
# Directory and glob: the three files in sorted order = 3000 documents.
$BIN/preprocess_data --input $OUT/dir --tokenizer-type NullTokenizer --vocab-size 131072 --append-eod --output-prefix $OUT/d -q &&
$BIN/preprocess_data --input "$OUT/dir/*.jsonl*" --tokenizer-type NullTokenizer --vocab-size 131072 --append-eod --output-prefix $OUT/g -q &&
cmp $OUT/d_text_document.bin $OUT/g_text_document.bin && $BIN/dataset_info $OUT/d_text_document | grep -q "^documents: 3000$"
