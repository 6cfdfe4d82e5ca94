#!/usr/bin/env bash
# The OpenWebText recipe of Megatron-LM's tools/openwebtext, with zerolm's tools:
#
#   blacklist_urls -> download_urls -> cleanup -> find_duplicates -> group_dups -> dedup
#   -> shuffle -> preprocess_data
#
# Usage:
#   scripts/pipeline.sh --urls DIR_OR_FILE --work DIR [--download-procs N] [--download-arg ARG]...
#   scripts/pipeline.sh --raw RAW.jsonl --work DIR [--urls DIR_OR_FILE]
#     common: [--vocab-file V --merge-file M] [--skip STAGE]... [--threads N] [--seed N]
#             [--group-threshold T] [--key url] [--output-name NAME]
#
# With --urls alone the URL lists are cleaned (blacklist_urls) and fetched
# (download_urls --n_procs N, default 50, plus each --download-arg; its per-URL
# outcomes in DIR/download.meta.jsonl) into DIR/raw.json; with --raw the documents
# are given and --urls only cleans the lists.
#
# Every stage writes into DIR and records what made its output (DIR/.records/STAGE:
# its settings, and each input's size, mtime and checksums of its first and last
# MiB). A stage whose output exists and whose record matches is resumed (the tools
# write under temporary names and rename when complete, so an existing output is
# a finished one): an interrupted run resumes where it stopped. A stage whose
# record differs (another --raw, --seed, vocabulary...) is redone, saying why, and
# so is every stage after it, whose input it rewrites. A summary table (documents
# in/out and seconds per stage) ends the run and is saved as DIR/summary.txt; a
# final dataset without documents is an error naming the stage that emptied it.
# --skip cleanup passes the raw documents on unchanged (for data cleaned
# elsewhere). Without --vocab-file/--merge-file the tools use GPT-2's own files,
# installed with them.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build/bin}
RAW="" WORK="" URLS="" VOCAB="" MERGES="" THREADS=$(nproc) SEED=1234 GROUP_T=0.7 KEY=url NAME=gpt2
DOWNLOAD_PROCS=50 DOWNLOAD_ARGS=()
declare -A SKIP=()
usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while (($#)); do
  case $1 in
    --raw) RAW=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --urls) URLS=$2; shift 2 ;;
    --download-procs) DOWNLOAD_PROCS=$2; shift 2 ;;
    --download-arg) DOWNLOAD_ARGS+=("$2"); shift 2 ;;
    --vocab-file) VOCAB=$2; shift 2 ;;
    --merge-file) MERGES=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --group-threshold) GROUP_T=$2; shift 2 ;;
    --key) KEY=$2; shift 2 ;;
    --output-name) NAME=$2; shift 2 ;;
    --skip)
      case $2 in
        blacklist_urls|cleanup|find_duplicates|group_dups|dedup|shuffle|preprocess_data) SKIP[$2]=1; shift 2 ;;
        *) echo "pipeline.sh: --skip '$2' is no stage (blacklist_urls cleanup find_duplicates group_dups dedup shuffle preprocess_data;" \
                "download_urls runs when --urls comes without --raw)" >&2
           exit 2 ;;
      esac ;;
    -h|--help) usage 0 ;;
    *) echo "pipeline.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ (-n $RAW || -n $URLS) && -n $WORK ]] || { echo "pipeline.sh: --work and --raw or --urls are required" >&2; usage; }
TOKENIZER=()  # none given: the tools' own GPT-2 files
[[ -n $VOCAB ]] && TOKENIZER+=(--vocab-file "$VOCAB")
[[ -n $MERGES ]] && TOKENIZER+=(--merge-file "$MERGES")
[[ -z $RAW || -f $RAW ]] || { echo "pipeline.sh: --raw '$RAW' does not exist" >&2; exit 2; }
[[ -n $RAW || -z ${SKIP[blacklist_urls]:-} ]] || { echo "pipeline.sh: --skip blacklist_urls needs --raw (download_urls fetches the clean list)" >&2; exit 2; }
mkdir -p "$WORK"
SUMMARY=()
# Lines of a JSONL/text file; documents of a Megatron dataset (.idx).
count() {
  if [[ $1 == *.idx && -f $1 ]]; then "$BIN/dataset_info" "${1%.idx}" | sed -n 's/^documents: //p'
  elif [[ -f $1 ]]; then wc -l < "$1" | tr -d ' '
  else echo "-"; fi
}

# What made a stage's output: one line per input file (size, mtime, checksums of
# its first and last MiB; a directory's files each), then the command with its
# thread counts left out (the tools' output does not depend on them).
fingerprint() {
  local f=$1 x
  if [[ -d $f ]]; then
    while IFS= read -r x; do fingerprint "$x"; done < <(find "$f" -type f | LC_ALL=C sort)
  elif [[ -f $f ]]; then
    echo "input $f size=$(stat -c %s "$f") mtime=$(stat -c %.9Y "$f")" \
      "first_mib=$(head -c 1048576 "$f" | cksum | cut -d' ' -f1) last_mib=$(tail -c 1048576 "$f" | cksum | cut -d' ' -f1)"
  else
    echo "input $f missing"
  fi
}
record_of() {  # INPUTS_ARRAY_NAME COMMAND...
  local -n ins=$1
  shift
  local f args=() drop=0
  for f in "${ins[@]}"; do fingerprint "$f"; done
  for f in "$@"; do
    if ((drop)); then drop=0; continue; fi
    case $f in --threads|--workers) drop=1; continue ;; esac
    args+=("$f")
  done
  echo "command ${args[*]}"
}
# Why RECORD_FILE differs from the record on stdin ("" when it does not): the first line that differs.
record_change() {
  local old=$1 new
  new=$(cat)
  [[ -f $old ]] || { echo "no record of what made its output (a run interrupted before recording it, or an older pipeline.sh)"; return; }
  [[ "$(cat "$old")" == "$new" ]] && return
  paste -d '\n' "$old" <(echo "$new") | awk '
    NR % 2 == 1 { was = $0; next }
    $0 != was {
      split(was, a, " "); split($0, b, " ")
      if (a[1] == "command" || b[1] == "command") print "its settings changed (were: " substr(was, 9) ")"
      else if (a[2] != b[2]) print "its input is now " b[2] " (was " a[2] ")"
      else if (a[3] != b[3]) print "its input " a[2] " changed (" a[3] ", now " b[3] ")"
      else if (a[5] != b[5] || a[6] != b[6]) print "its input " a[2] " changed (same size, other content)"
      else print "its input " a[2] " was rewritten (another mtime)"
      exit
    }
    END { if (NR % 2 == 1) print "its inputs changed" }'
}

# stage NAME OUTPUT INPUTS_ARRAY_NAME COMMAND...: runs COMMAND unless OUTPUT exists
# with a matching record (then "resumed"); records the summary row.
REDO_FROM=""  # the first stage redone for a changed record: every later one is redone too
FIRST_EMPTY=""
stage() {
  local name=$1 output=$2 inputs=$3
  shift 3
  local -n first_input=$inputs
  local input=${first_input[0]} t0 t1 status rec why=""
  if [[ -n ${SKIP[$name]:-} ]]; then
    SUMMARY+=("$(printf '| %-16s | %10s | %10s | %8s | skipped |' "$name" "$(count "$input")" "-" "-")")
    return 0
  fi
  mkdir -p "$WORK/.records"
  rec=$(record_of "$inputs" "$@")
  if [[ -e $output ]]; then
    why=$(record_change "$WORK/.records/$name" <<< "$rec")
    [[ -z $why && -n $REDO_FROM ]] && why="$REDO_FROM was redone"
  fi
  if [[ -e $output && -z $why ]]; then
    status="resumed"
    t0=0 t1=0
  else
    if [[ -n $why ]]; then
      echo "pipeline.sh: redoing $name: $why" >&2
      [[ -n $REDO_FROM ]] || REDO_FROM=$name
    fi
    rm -f "$WORK/.records/$name"
    echo ">>> $name" >&2
    t0=$(date +%s.%N)
    "$@"
    t1=$(date +%s.%N)
    status=$([[ -n $why ]] && echo "redone" || echo "ran")
    # The inputs as they were when the command read them (an input rewritten meanwhile shows next time).
    echo "$rec" > "$WORK/.records/$name.tmp" && mv "$WORK/.records/$name.tmp" "$WORK/.records/$name"
  fi
  local n_in n_out
  n_in=$(count "$input") n_out=$(count "$output")
  # The stages whose output is the documents (no duplicates found is no loss).
  if [[ -z $FIRST_EMPTY && $name =~ ^(cleanup|dedup|shuffle|preprocess_data)$ && $n_out == 0 && $n_in != 0 && $n_in != - ]]; then
    FIRST_EMPTY="$name left 0 of its $n_in input lines"
  fi
  SUMMARY+=("$(printf '| %-16s | %10s | %10s | %8.1f | %s |' "$name" "$n_in" "$n_out" "$(echo "$t1 - $t0" | bc -l)" "$status")")
}

TOK_FILES=()  # the vocabulary's files are inputs of the stages that tokenize
[[ -n $VOCAB ]] && TOK_FILES+=("$VOCAB")
[[ -n $MERGES ]] && TOK_FILES+=("$MERGES")
IN_URLS=("$URLS")
if [[ -n $URLS ]]; then
  stage blacklist_urls "$WORK/urls.clean.txt" IN_URLS \
    "$BIN/blacklist_urls" "$URLS" "$WORK/urls.clean.txt" --rejected-out "$WORK/urls.rejected.tsv" --threads "$THREADS"
  if [[ -z $RAW ]]; then
    # download_urls resumes an interrupted fetch by itself (raw.json.resume); the stage record redoes it
    # when the clean list or the flags change.
    RAW=$WORK/raw.json
    IN_CLEAN=("$WORK/urls.clean.txt")
    stage download_urls "$RAW" IN_CLEAN \
      "$BIN/download_urls" "$WORK/urls.clean.txt" --output "$RAW" --n_procs "$DOWNLOAD_PROCS" \
      --meta-out "$WORK/download.meta.jsonl" "${DOWNLOAD_ARGS[@]}" --threads "$THREADS"
  fi
fi

CLEANED=$WORK/cleaned.jsonl
IN_RAW=("$RAW" "${TOK_FILES[@]}")
if [[ -n ${SKIP[cleanup]:-} ]]; then
  CLEANED=$RAW
  stage cleanup "$RAW" IN_RAW true
else
  stage cleanup "$CLEANED" IN_RAW "$BIN/cleanup" "$RAW" "$CLEANED" --workers "$THREADS" \
    "${TOKENIZER[@]}" --rejected-out "$WORK/cleanup.rejected.jsonl"
fi
IN_CLEANED=("$CLEANED")
stage find_duplicates "$WORK/duplicates.jsonl" IN_CLEANED \
  "$BIN/find_duplicates" --inputs "$CLEANED" "$KEY" --output "$WORK/duplicates.jsonl" --threads "$THREADS"
IN_DUPS=("$WORK/duplicates.jsonl")
stage group_dups "$WORK/groups.jsonl" IN_DUPS \
  "$BIN/group_dups" "$WORK/duplicates.jsonl" "$WORK/groups.jsonl" "$GROUP_T"
IN_DEDUP=("$CLEANED" "$WORK/groups.jsonl")
stage dedup "$WORK/deduped.jsonl" IN_DEDUP \
  "$BIN/dedup" "$WORK/groups.jsonl" "$CLEANED" "$WORK/deduped.jsonl" --key "$KEY" --removed-out "$WORK/dedup.removed.jsonl"
IN_DEDUPED=("$WORK/deduped.jsonl")
stage shuffle "$WORK/shuffled.jsonl" IN_DEDUPED \
  "$BIN/shuffle" --seed "$SEED" "$WORK/deduped.jsonl" "$WORK/shuffled.jsonl"
IN_SHUFFLED=("$WORK/shuffled.jsonl" "${TOK_FILES[@]}")
stage preprocess_data "$WORK/${NAME}_text_document.idx" IN_SHUFFLED \
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
DOCS=$(count "$WORK/${NAME}_text_document.idx")
if [[ -z ${SKIP[preprocess_data]:-} && $DOCS == 0 ]]; then
  echo "pipeline.sh: the dataset $WORK/${NAME}_text_document holds no documents: ${FIRST_EMPTY:-the input $RAW holds no records}" \
       "(the stages' rejected-record files say why)" >&2
  exit 1
fi
