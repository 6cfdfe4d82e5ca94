# SIGTERM in the middle of a run: nothing under the final names, no temporary files left.
OUT=$1 BIN=$2 DATA=$3
for i in $(seq 40); do cat $DATA/megatron/openwebtext-1000.decoded.jsonl; done > $OUT/big.jsonl
timeout -s TERM 0.5 $BIN/preprocess_data --input $OUT/big.jsonl --tokenizer-type GPT2BPETokenizer \
  --vocab-file $DATA/gpt2/gpt2-vocab.json --merge-file $DATA/gpt2/gpt2-merges.txt --workers 1 --output-prefix $OUT/big -q
rc=$?
[[ $rc == 124 ]] || { echo "expected the run to be killed, rc=$rc"; exit 1; }
[[ ! -e $OUT/big_text_document.bin && ! -e $OUT/big_text_document.idx ]] && [[ -z "$(find $OUT -name '*.tmp.*')" ]]
