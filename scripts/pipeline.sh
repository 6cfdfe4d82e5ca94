#!/usr/bin/env bash
# The OpenWebText recipe of Megatron-LM's tools/openwebtext, with zerolm's tools:
#
#   blacklist_urls -> (your downloader makes raw.jsonl from the clean URLs) -> cleanup
#   -> find_duplicates -> group_dups -> dedup -> shuffle -> preprocess_data
#
# Usage:
#   scripts/pipeline.sh --raw RAW.jsonl --work DIR [--vocab-file V --merge-file M]
#                       [--urls DIR_OR_FILE] [--skip STAGE]... [--threads N] [--seed N]
#                       [--group-threshold T] [--key url] [--output-name NAME]
#
# Every stage writes into DIR and is skipped when its output already exists (the
# tools write under temporary names and rename when complete, so an existing
# output is a finished one): an interrupted run resumes where it stopped. A
# summary table (documents in/out and seconds per stage) ends the run and is
# saved as DIR/summary.txt. --skip cleanup passes the raw documents on unchanged
# (for data cleaned elsewhere). Without --vocab-file/--merge-file the tools use
# GPT-2's own files, installed with them.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build/bin}
RAW="" WORK="" URLS="" VOCAB="" MERGES="" THREADS=$(nproc) SEED=1234 GROUP_T=0.7 KEY=url NAME=gpt2
declare -A SKIP=()
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while (($#)); do
  case $1 in
    --raw) RAW=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --urls) URLS=$2; shift 2 ;;
    --vocab-file) VOCAB=$2; shift 2 ;;
    --merge-file) MERGES=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --group-threshold) GROUP_T=$2; shift 2 ;;
    --key) KEY=$2; shift 2 ;;
    --output-name) NAME=$2; shift 2 ;;
    --skip) SKIP[$2]=1; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "pipeline.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ -n $RAW && -n $WORK ]] || { echo "pipeline.sh: --raw and --work are required" >&2; usage; }
TOKENIZER=()  # none given: the tools' own GPT-2 files
[[ -n $VOCAB ]] && TOKENIZER+=(--vocab-file "$VOCAB")
[[ -n $MERGES ]] && TOKENIZER+=(--merge-file "$MERGES")
[[ -f $RAW ]] || { echo "pipeline.sh: --raw '$RAW' does not exist" >&2; exit 2; }
mkdir -p "$WORK"
SUMMARY=()
# Lines of a JSONL/text file; documents of a Megatron dataset (.idx).
count() {
  if [[ $1 == *.idx && -f $1 ]]; then "$BIN/dataset_info" "${1%.idx}" | sed -n 's/^documents: //p'
  elif [[ -f $1 ]]; then wc -l < "$1" | tr -d ' '
  else echo "-"; fi
}

# stage NAME INPUT OUTPUT COMMAND...: runs COMMAND unless OUTPUT exists; records the summary row.
stage() {
  local name=$1 input=$2 output=$3
  shift 3
  local t0 t1 status
  if [[ -n ${SKIP[$name]:-} ]]; then
    SUMMARY+=("$(printf '| %-16s | %10s | %10s | %8s | skipped |' "$name" "$(count "$input")" "-" "-")")
    return 0
  fi
  if [[ -e $output ]]; then
    status="resumed"
    t0=0 t1=0
  else
    echo ">>> $name" >&2
    t0=$(date +%s.%N)
    "$@"
    t1=$(date +%s.%N)
    status="ran"
  fi
  SUMMARY+=("$(printf '| %-16s | %10s | %10s | %8.1f | %s |' "$name" "$(count "$input")" "$(count "$output")" "$(echo "$t1 - $t0" | bc -l)" "$status")")
}

if [[ -n $URLS ]]; then
  stage blacklist_urls "$URLS" "$WORK/urls.clean.txt" \
    "$BIN/blacklist_urls" "$URLS" "$WORK/urls.clean.txt" --rejected-out "$WORK/urls.rejected.tsv" --threads "$THREADS"
  echo "clean URL list: $WORK/urls.clean.txt (download it with your OpenWebText downloader into the --raw JSONL)" >&2
fi

CLEANED=$WORK/cleaned.jsonl
if [[ -n ${SKIP[cleanup]:-} ]]; then
  CLEANED=$RAW
  stage cleanup "$RAW" "$RAW" true
else
  stage cleanup "$RAW" "$CLEANED" "$BIN/cleanup" "$RAW" "$CLEANED" --workers "$THREADS" \
    "${TOKENIZER[@]}" --rejected-out "$WORK/cleanup.rejected.jsonl"
fi
stage find_duplicates "$CLEANED" "$WORK/duplicates.jsonl" \
  "$BIN/find_duplicates" --inputs "$CLEANED" "$KEY" --output "$WORK/duplicates.jsonl" --threads "$THREADS"
stage group_dups "$WORK/duplicates.jsonl" "$WORK/groups.jsonl" \
  "$BIN/group_dups" "$WORK/duplicates.jsonl" "$WORK/groups.jsonl" "$GROUP_T"
stage dedup "$CLEANED" "$WORK/deduped.jsonl" \
  "$BIN/dedup" "$WORK/groups.jsonl" "$CLEANED" "$WORK/deduped.jsonl" --key "$KEY" --removed-out "$WORK/dedup.removed.jsonl"
stage shuffle "$WORK/deduped.jsonl" "$WORK/shuffled.jsonl" \
  "$BIN/shuffle" --seed "$SEED" "$WORK/deduped.jsonl" "$WORK/shuffled.jsonl"
stage preprocess_data "$WORK/shuffled.jsonl" "$WORK/${NAME}_text_document.idx" \
  "$BIN/preprocess_data" --input "$WORK/shuffled.jsonl" --json-keys text --tokenizer-type GPT2BPETokenizer \
  "${TOKENIZER[@]}" --append-eod --workers "$THREADS" --output-prefix "$WORK/$NAME" \
  --stats-out "$WORK/preprocess.stats.json"

{
  echo
  echo "| stage            |  lines in  |  lines out | seconds  | status |"
  echo "|------------------|------------|------------|----------|--------|"
  printf '%s\n' "${SUMMARY[@]}"
  echo
  echo "dataset: $WORK/${NAME}_text_document.bin/.idx"
} | tee "$WORK/summary.txt" >&2
