#!/usr/bin/env bash
# `make demo`: the OpenWebText recipe on the sample data bundled in tests/data:
#   * 1000 real OpenWebText documents (tests/data/megatron/openwebtext-1000.decoded.jsonl,
#     provenance in tests/data/megatron/PROVENANCE.md) with ids added, plus 50
#     near-duplicates made here by small edits, so the dedup stages have work to do;
#   * a URL list of real-world shapes and edge cases for blacklist_urls
#     (tests/data/urls/urls.txt);
#   * the GPT-2 vocab/merges (tests/data/gpt2).
# It runs scripts/pipeline.sh (blacklist_urls -> cleanup -> find_duplicates ->
# group_dups -> dedup -> shuffle -> preprocess_data),
# checks preprocess_data against Megatron's own output on the fixture, and shows
# the resulting dataset. Outputs in demo-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin OUT=demo-out DATA=tests/data
rm -rf "$OUT" && mkdir -p "$OUT"
say() { printf '\n==> %s\n' "$*" >&2; }
t0=$(date +%s.%N)

say "sample data: 1000 OpenWebText documents + 50 planted near-duplicates + 3 non-English + 2 mojibake"
awk '{sub(/^\{/, "{\"url\": \"https://owt.example/" NR "\", "); print}' $DATA/megatron/openwebtext-1000.decoded.jsonl > "$OUT/raw.jsonl"
head -50 $DATA/megatron/openwebtext-1000.decoded.jsonl |
  awk '{sub(/^\{/, "{\"url\": \"https://mirror.example/" NR "\", "); sub(/ the /, " THE "); sub(/\. /, "! "); print}' >> "$OUT/raw.jsonl"
cat >> "$OUT/raw.jsonl" <<'JSONL'
{"url": "https://fr.example/1", "text": "Le conseil municipal s'est réuni mardi pour discuter du nouveau budget de l'année prochaine, qui comprend des fonds pour les écoles, les routes et les transports publics. Plusieurs habitants ont pris la parole pendant la séance publique, et le maire a promis de publier un rapport détaillé le mois prochain."}
{"url": "https://de.example/1", "text": "Der Stadtrat traf sich am Dienstag, um den neuen Haushalt für das kommende Jahr zu besprechen, der Mittel für Schulen, Straßen und den öffentlichen Nahverkehr vorsieht. Mehrere Bürger meldeten sich in der öffentlichen Fragestunde zu Wort."}
{"url": "https://es.example/1", "text": "El ayuntamiento se reunió el martes para debatir el nuevo presupuesto del próximo año, que incluye fondos para escuelas, carreteras y transporte público. Varios vecinos intervinieron durante el turno de preguntas."}
JSONL
head -2 $DATA/megatron/openwebtext-1000.decoded.jsonl | tail -1 |
  awk '{sub(/^\{/, "{\"url\": \"https://mojibake.example/1\", "); gsub(/’/, "â€™"); gsub(/—/, "â€”"); print}' >> "$OUT/raw.jsonl"
wc -l "$OUT/raw.jsonl" >&2

say "pipeline: blacklist_urls -> cleanup -> find_duplicates -> group_dups -> dedup -> shuffle -> preprocess_data"
scripts/pipeline.sh --raw "$OUT/raw.jsonl" --work "$OUT/work" --urls $DATA/urls/urls.txt \
  --vocab-file $DATA/gpt2/gpt2-vocab.json --merge-file $DATA/gpt2/gpt2-merges.txt

say "dataset_info: the GPT-2 dataset the pipeline wrote"
$BIN/dataset_info "$OUT/work/gpt2_text_document" --vocab-size 50257
say "dataset_info: the start of document 0, decoded"
$BIN/dataset_info "$OUT/work/gpt2_text_document" --doc 0 --vocab-file $DATA/gpt2/gpt2-vocab.json \
  --merge-file $DATA/gpt2/gpt2-merges.txt > "$OUT/doc0.txt"
head -c 400 "$OUT/doc0.txt"; echo

say "compatibility: preprocess_data on the fixture text vs Megatron's preprocess_data.py output"
$BIN/preprocess_data --input $DATA/megatron/openwebtext-1000.decoded.jsonl --tokenizer-type GPT2BPETokenizer \
  --vocab-file $DATA/megatron/gpt2-tiny-vocab.json --merge-file $DATA/megatron/gpt2-tiny-merges.txt --append-eod \
  --workers 2 --output-prefix "$OUT/megatron-check" -q
if cmp -s "$OUT/megatron-check_text_document.bin" $DATA/megatron/meg-gpt2-openwebtext_text_document.bin &&
   cmp -s "$OUT/megatron-check_text_document.idx" $DATA/megatron/meg-gpt2-openwebtext_text_document.idx; then
  echo "byte-identical to Megatron's output: yes" >&2
else
  echo "byte-identical to Megatron's output: NO" >&2; exit 1
fi

if [[ -x $BIN/pretrain_gpt ]]; then
  say "pretrain_gpt: a small GPT-2 (4 layers, hidden 128) on the pipeline's dataset: 2 CPU ranks, ZeRO stage 2"
  t_train0=$(date +%s.%N)
  $BIN/pretrain_gpt --num-layers 4 --hidden-size 128 --num-attention-heads 4 --micro-batch-size 4 --global-batch-size 8 \
    --seq-length 128 --max-position-embeddings 128 --train-iters ${DEMO_TRAIN_ITERS:-200} --lr 0.002 --lr-decay-style cosine \
    --min-lr 0.0002 --lr-warmup-iters 20 --weight-decay 0.01 --clip-grad 1.0 --split 949,50,1 \
    --data-path "$OUT/work/gpt2_text_document" --vocab-file $DATA/gpt2/gpt2-vocab.json --merge-file $DATA/gpt2/gpt2-merges.txt \
    --log-interval 20 --eval-interval 50 --eval-iters 4 --hidden-dropout 0 --attention-dropout 0 \
    --save "$OUT/checkpoints" --tensorboard-dir "$OUT/tensorboard" --log-validation-ppl-to-tensorboard \
    --distributed-backend nccl --nproc-per-node 2 --zero-stage 2 2>&1 | tee "$OUT/train.log" |
    grep --line-buffered -E "iteration|validation|data parallel|memory plan|rank [0-9]+: [0-9]+ parameters" >&2
  t_train1=$(date +%s.%N)
  say "generate_gpt: a sample from the trained model"
  $BIN/generate_gpt --load "$OUT/checkpoints" --prompt "The city council said" --vocab-file $DATA/gpt2/gpt2-vocab.json \
    --merge-file $DATA/gpt2/gpt2-merges.txt --max-new-tokens 40 --temperature 0.8 --top-k 40 -q | tee "$OUT/sample.txt"
  python3 scripts/plot_loss.py "$OUT/checkpoints/metrics.jsonl" "$OUT/loss.svg" >&2
fi

t1=$(date +%s.%N)
{
  echo
  echo "================ zerolm demo summary ================"
  cat "$OUT/work/summary.txt"
  echo "tokens written: $($BIN/dataset_info "$OUT/work/gpt2_text_document" | sed -n 's/^tokens: //p')"
  if [[ -f "$OUT/train.log" ]]; then
    echo "training: $(grep -c ' iteration ' "$OUT/train.log") log lines, $(printf '%.0f' "$(echo "$t_train1 - $t_train0" | bc -l)") s;" \
         "validation loss $(grep -m1 'validation loss at iteration' "$OUT/train.log" | sed 's/.*value: \([^ ]*\).*/\1/')" \
         "-> $(grep 'end of training for val' "$OUT/train.log" | sed 's/.*value: \([^ ]*\).*/\1/')"
    echo "sample: $OUT/sample.txt   loss curve: $OUT/loss.svg"
    echo "TensorBoard: .venv/bin/tensorboard --logdir $OUT/tensorboard"
  fi
  printf 'total: %.1f s; outputs in %s/\n' "$(echo "$t1 - $t0" | bc -l)" "$OUT"
} >&2
