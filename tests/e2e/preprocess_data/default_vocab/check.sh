# Without --vocab-file/--merge-file, preprocess_data uses GPT-2's own files installed with it
# (build/share/zerolm/gpt2, copied from common/tokenizer/gpt2): the stats name them, and the
# dataset equals the one made from tests/data/gpt2's copies given explicitly.
OUT=$1 BIN=$2 DATA=$3
set -e
grep -q '"vocab_file": ".*share/zerolm/gpt2/gpt2-vocab.json"' $OUT/stats.json
grep -q '"merge_file": ".*share/zerolm/gpt2/gpt2-merges.txt"' $OUT/stats.json
cd $OUT
$BIN/preprocess_data --input $DATA/megatron/test.jsonl --json-keys text --tokenizer-type GPT2BPETokenizer --append-eod --workers 1 \
  --vocab-file $DATA/gpt2/gpt2-vocab.json --merge-file $DATA/gpt2/gpt2-merges.txt --output-prefix given -q
cmp dflt_text_document.bin given_text_document.bin
cmp dflt_text_document.idx given_text_document.idx
