#!/usr/bin/env bash
# The data pipeline of scripts/pipeline.sh for corpora that outgrow one
# machine: every stage a set of independent tasks, run as Slurm job arrays
# chained by --dependency=afterok (--slurm), or N at a time here (--local-tasks N).
#
#   blacklist_urls   one task, with --urls            -> urls.clean.txt (URL lists are small; duplicates
#                                                     across lists need one pass over them all)
#   download_urls    a task per part of the list,     download_urls --part T/K -> raw/part-NNNNN.jsonl
#                    with --urls and no --shards      (--download-tasks K, 4 by default): the shards
#   cleanup          a task per shard                 cleanup SHARD -> cleaned/part-NNNNN.jsonl
#   signatures       a task per shard                 near_dedup (docs/design.md, "Sharded near-duplicate removal")
#   candidates       a task per band x hash range
#   verify           a task per part of the candidate pairs (--verify-tasks)
#   cluster          one task
#   filter           a task per shard                 -> deduped/part-NNNNN.jsonl
#   shuffle_count    a task per shard                 shuffle --sharded
#   shuffle_scatter  a task per shard
#   shuffle_gather   a task per bucket                -> shuffled/bucket-NNNNN.jsonl
#   preprocess_data  a task per bucket                -> tokens/bucket-NNNNN_text_document.bin/.idx
#   merge_datasets   one task                         -> NAME_text_document.bin/.idx
#
# The result equals scripts/pipeline.sh on the shards concatenated (the same
# URLs and documents kept, the same .bin/.idx bytes), for any
# number of shards, ranges, buckets and tasks. Each task leaves a marker
# (WORK/.tasks/STAGE/N.done) when it succeeds: a re-run, here or as a new
# submission, runs only the tasks without one. A failed task is retried
# --retries times (its outputs are written under temporary names, so a killed
# attempt leaves nothing half-written). The stage table (lines in and out,
# tasks, task-seconds, wall seconds) ends the run and is saved as WORK/summary.txt.
#
# Usage:
#   scripts/cluster_pipeline.sh --shards DIR_OR_GLOB --work DIR [--urls DIR_OR_FILE]
#   scripts/cluster_pipeline.sh --urls DIR_OR_FILE --work DIR [--download-tasks K] [--download-procs P]
#       [--download-arg ARG]...
#     common: [--local-tasks N | --slurm [--sbatch "OPTIONS"] [--max-array N] [--no-wait]]
#       [--retries N] [--threads N] [--ranges R] [--verify-tasks V] [--buckets B] [--memory-mb M] [--seed N]
#       [--group-threshold T] [--key url] [--output-name NAME] [--vocab-file V --merge-file M]
# --sbatch passes options to every sbatch (partition, account, time, memory:
# "--partition=cpu --account=me --time=2:00:00 --mem=8G"). --max-array splits
# arrays larger than the cluster's MaxArraySize (read from scontrol; 1001 otherwise).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build/bin}
SELF=$ROOT/scripts/cluster_pipeline.sh
ARGS=("$@")
SHARDS="" WORK="" LOCAL=1 SLURM=0 SBATCH="" MAX_ARRAY="" WAIT=1 RETRIES=2 THREADS=1 RANGES=1 VERIFY_TASKS=8 BUCKETS=8 MEMORY=1024 SEED=1234
GROUP_T=0.7 KEY=url NAME=gpt2 VOCAB="" MERGES="" URLS="" RUN_TASK="" TASK="" TASK_LIST=""
DOWNLOAD_TASKS=4 DOWNLOAD_PROCS=50 DOWNLOAD_ARGS=()
usage() { sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while (($#)); do
  case $1 in
    --shards) SHARDS=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --urls) URLS=$2; shift 2 ;;
    --download-tasks) DOWNLOAD_TASKS=$2; shift 2 ;;
    --download-procs) DOWNLOAD_PROCS=$2; shift 2 ;;
    --download-arg) DOWNLOAD_ARGS+=("$2"); shift 2 ;;
    --local-tasks) LOCAL=$2; shift 2 ;;
    --slurm) SLURM=1; shift ;;
    --sbatch) SBATCH=$2; shift 2 ;;
    --max-array) MAX_ARRAY=$2; shift 2 ;;
    --no-wait) WAIT=0; shift ;;
    --retries) RETRIES=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --ranges) RANGES=$2; shift 2 ;;
    --verify-tasks) VERIFY_TASKS=$2; shift 2 ;;
    --buckets) BUCKETS=$2; shift 2 ;;
    --memory-mb) MEMORY=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --group-threshold) GROUP_T=$2; shift 2 ;;
    --key) KEY=$2; shift 2 ;;
    --output-name) NAME=$2; shift 2 ;;
    --vocab-file) VOCAB=$2; shift 2 ;;
    --merge-file) MERGES=$2; shift 2 ;;
    --run-task) RUN_TASK=$2; shift 2 ;;      # internal: one task (what a job array's task runs)
    --task) TASK=$2; shift 2 ;;
    --task-list) TASK_LIST=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "cluster_pipeline.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ (-n $SHARDS || -n $URLS) && -n $WORK ]] || { echo "cluster_pipeline.sh: --work and --shards or --urls are required" >&2; usage; }
[[ $DOWNLOAD_TASKS =~ ^[1-9][0-9]*$ ]] || { echo "cluster_pipeline.sh: --download-tasks must be a positive integer" >&2; exit 2; }
DOWNLOAD=$([[ -z $SHARDS ]] && echo 1 || echo 0)  # --urls alone: the shards are download_urls' parts
[[ $LOCAL =~ ^[1-9][0-9]*$ && $RETRIES =~ ^[0-9]+$ && $BUCKETS =~ ^[1-9][0-9]*$ && $RANGES =~ ^[1-9][0-9]*$ ]] \
  || { echo "cluster_pipeline.sh: --local-tasks, --buckets and --ranges must be positive integers, --retries a count" >&2; exit 2; }
WORK=$(mkdir -p "$WORK" && cd "$WORK" && pwd)
TOKENIZER=()
[[ -n $VOCAB ]] && TOKENIZER+=(--vocab-file "$VOCAB")
[[ -n $MERGES ]] && TOKENIZER+=(--merge-file "$MERGES")
ND=(--work "$WORK/dedup" --key "$KEY" --group-threshold "$GROUP_T" --ranges "$RANGES" --verify-tasks "$VERIFY_TASKS" --threads "$THREADS" --memory-mb "$MEMORY")
SH=(--work "$WORK/shuffle-work" --seed "$SEED" --buckets "$BUCKETS" --memory-mb "$MEMORY")
STAGES=(${URLS:+blacklist_urls} $( ((DOWNLOAD)) && echo download_urls || true) cleanup signatures candidates verify cluster filter shuffle_count shuffle_scatter shuffle_gather preprocess_data merge_datasets)

# The shards in order, as the tools expand an argument (a directory's .json/.jsonl/.txt files, plain
# or compressed, sorted bytewise; else a glob, sorted).
shard_list() {
  if [[ -d $SHARDS ]]; then
    find -L "$SHARDS" -maxdepth 1 -type f -regextype posix-extended -regex '.*\.(json|jsonl|txt)(\.(gz|xz|zst))?$' | LC_ALL=C sort
  else
    compgen -G "$SHARDS" | LC_ALL=C sort || true
  fi
}
# Part T of COUNT, zero-padded to one width for the set (5 digits, more past 99,999 parts),
# so that a directory's sorted listing is in part order.
numbered() {
  local last=$(($2 - 1))
  local width=${#last}
  ((width < 5)) && width=5
  printf "%0${width}d" "$1"
}
if ((DOWNLOAD)); then
  SHARD_FILES=()
  for ((t = 0; t < DOWNLOAD_TASKS; t++)); do SHARD_FILES+=("$WORK/raw/part-$(numbered "$t" "$DOWNLOAD_TASKS").jsonl"); done
else
  mapfile -t SHARD_FILES < <(shard_list)
fi
N=${#SHARD_FILES[@]}
((N > 0)) || { echo "cluster_pipeline.sh: --shards '$SHARDS' names no shard" >&2; exit 2; }
BANDS=$("$BIN/near_dedup" candidates --shards "${SHARD_FILES[0]}" "${ND[@]}" --print-tasks)
VERIFY=$("$BIN/near_dedup" verify --shards "${SHARD_FILES[0]}" "${ND[@]}" --print-tasks)
tasks_of() {
  case $1 in
    download_urls|cleanup|signatures|filter|shuffle_count|shuffle_scatter) echo "$N" ;;
    candidates) echo "$BANDS" ;;
    verify) echo "$VERIFY" ;;
    blacklist_urls|cluster|merge_datasets) echo 1 ;;
    shuffle_gather|preprocess_data) echo "$BUCKETS" ;;
  esac
}
part() { printf '%s/%s/part-%s.jsonl' "$WORK" "$1" "$(numbered "$2" "$N")"; }

# One task's command, into the array CMD (no eval: paths with spaces or shell characters stay one word).
task_command() {
  local stage=$1 t=$2
  case $stage in
    blacklist_urls) CMD=("$BIN/blacklist_urls" "$URLS" "$WORK/urls.clean.txt" --rejected-out "$WORK/urls.rejected.tsv" -q) ;;
    download_urls) mkdir -p "$WORK/raw"  # an interrupted task resumes its part (raw/part-N.jsonl.resume)
             CMD=("$BIN/download_urls" "$WORK/urls.clean.txt" --part "$t/$N" --output "${SHARD_FILES[$t]}"
                  --meta-out "$WORK/raw/meta-$(numbered "$t" "$N").jsonl" --n_procs "$DOWNLOAD_PROCS"
                  "${DOWNLOAD_ARGS[@]}" --threads "$THREADS" -q) ;;
    cleanup) mkdir -p "$WORK/cleaned" "$WORK/rejected"
             CMD=("$BIN/cleanup" "${SHARD_FILES[$t]}" "$(part cleaned "$t")" --rejected-out "$(part rejected "$t")"
                  --workers "$THREADS" "${TOKENIZER[@]}" -q) ;;
    signatures|candidates|verify|cluster|filter)
             CMD=("$BIN/near_dedup" "$stage" --shards "$WORK/cleaned" "${ND[@]}" --output-dir "$WORK/deduped"
                  --removed-dir "$WORK/dedup-removed" --task "$t" -q) ;;
    shuffle_count|shuffle_scatter|shuffle_gather)
             CMD=("$BIN/shuffle" --sharded "${stage#shuffle_}" --parts "$WORK/deduped" "${SH[@]}" --bucket-dir "$WORK/shuffled" --task "$t" -q) ;;
    preprocess_data) mkdir -p "$WORK/tokens"
             local prefix
             prefix=$(printf '%s/tokens/bucket-%05d' "$WORK" "$t")
             rm -f "$prefix"_*.tmp.*  # a killed attempt's temporaries (merge_datasets refuses stray files)
             CMD=("$BIN/preprocess_data" --input "$(printf '%s/shuffled/bucket-%05d.jsonl' "$WORK" "$t")" --json-keys text
                  --tokenizer-type GPT2BPETokenizer "${TOKENIZER[@]}" --append-eod --workers "$THREADS" --output-prefix "$prefix" -q) ;;
    merge_datasets) CMD=("$BIN/merge_datasets" --input "$WORK/tokens" --output-prefix "$WORK/${NAME}_text_document" -q) ;;
  esac
}

# ---- one task (run by a job array's task, or by xargs here) ----
if [[ -n $RUN_TASK ]]; then
  if [[ -n $TASK_LIST ]]; then  # a Slurm array: the task is line (array index + offset) of the list
    TASK=$(sed -n "$(( ${SLURM_ARRAY_TASK_ID:?} + ${ZLM_ARRAY_OFFSET:-0} + 1 ))p" "$TASK_LIST")
  fi
  [[ $TASK =~ ^[0-9]+$ ]] || { echo "cluster_pipeline.sh: --run-task needs --task N" >&2; exit 2; }
  marker=$WORK/.tasks/$RUN_TASK/$TASK.done
  [[ -e $marker ]] && { echo "$RUN_TASK $TASK: done already"; exit 0; }
  mkdir -p "$WORK/.tasks/$RUN_TASK"
  for attempt in $(seq 0 "$RETRIES"); do
    task_command "$RUN_TASK" "$TASK"
    t0=$(date +%s.%N)
    if "${CMD[@]}" 2> "$WORK/.tasks/$RUN_TASK/$TASK.log"; then
      t1=$(date +%s.%N)
      echo "seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') start=$t0 end=$t1 attempts=$((attempt + 1)) host=$(hostname)" \
        > "$marker.tmp" && mv "$marker.tmp" "$marker"
      exit 0
    fi
    echo "cluster_pipeline.sh: $RUN_TASK task $TASK failed (attempt $((attempt + 1)) of $((RETRIES + 1))): $(tail -1 "$WORK/.tasks/$RUN_TASK/$TASK.log")" >&2
  done
  cat "$WORK/.tasks/$RUN_TASK/$TASK.log" >&2
  exit 1
fi

# The tasks of a stage without a marker.
missing() {
  local stage=$1 n t
  n=$(tasks_of "$stage")
  for ((t = 0; t < n; t++)); do [[ -e $WORK/.tasks/$stage/$t.done ]] || echo "$t"; done
}
mkdir -p "$WORK/.tasks"
T_START=$(date +%s.%N)
# What the outputs depend on (not how the tasks are scheduled): a work directory made with other
# settings is refused, never resumed into a dataset of mixed settings.
STAMP="shards=${SHARD_FILES[*]} ranges=$RANGES verify=$VERIFY_TASKS buckets=$BUCKETS seed=$SEED group=$GROUP_T key=$KEY name=$NAME"
STAMP+=" vocab=$VOCAB merges=$MERGES urls=$URLS"
((DOWNLOAD)) && STAMP+=" download_tasks=$DOWNLOAD_TASKS download_args=${DOWNLOAD_ARGS[*]}"
if [[ -f $WORK/.tasks/settings ]]; then
  [[ $(cat "$WORK/.tasks/settings") == "$STAMP" ]] || { echo "cluster_pipeline.sh: $WORK was made with other settings ($(cat "$WORK/.tasks/settings")) ---> HINT: use that run's flags, or a fresh --work" >&2; exit 2; }
else
  echo "$STAMP" > "$WORK/.tasks/settings"
fi

if ((SLURM)); then
  if [[ -z $MAX_ARRAY ]]; then
    MAX_ARRAY=$(scontrol show config 2> /dev/null | awk '$1 == "MaxArraySize" { print $3 }')
    MAX_ARRAY=${MAX_ARRAY:-1001}
  fi
  read -r -a SB <<< "$SBATCH"
  mkdir -p "$WORK/.tasks/logs"
  # A submission whose jobs are still queued or running: submitting again would run every unfinished
  # task twice. Wait for them (or scancel them) first.
  if [[ -s $WORK/.tasks/jobs ]] && [[ -n $(squeue -h -j "$(paste -sd, "$WORK/.tasks/jobs")" -o %i 2> /dev/null) ]]; then
    echo "cluster_pipeline.sh: jobs of an earlier submission are still queued or running ($(paste -sd' ' "$WORK/.tasks/jobs")) ---> HINT: wait for them, or scancel them, then submit again" >&2
    exit 2
  fi
  : > "$WORK/.tasks/jobs"
  DEP="" JOBS=()
  for stage in "${STAGES[@]}"; do
    mapfile -t todo < <(missing "$stage")
    ((${#todo[@]})) || continue
    todo_file=$WORK/.tasks/$stage.$$.todo  # this submission's list: an earlier one's arrays keep theirs
    printf '%s\n' "${todo[@]}" > "$todo_file"
    stage_jobs=()
    for ((off = 0; off < ${#todo[@]}; off += MAX_ARRAY - 1)); do  # arrays of at most MaxArraySize - 1 tasks
      count=$(( ${#todo[@]} - off < MAX_ARRAY - 1 ? ${#todo[@]} - off : MAX_ARRAY - 1 ))
      id=$(ZLM_ARRAY_OFFSET=$off sbatch --parsable --export=ALL,ZLM_ARRAY_OFFSET=$off --array=0-$((count - 1)) --job-name="zlm-$stage" \
             --output="$WORK/.tasks/logs/$stage-%A_%a.out" ${DEP:+--dependency=afterok:$DEP} "${SB[@]}" \
             --wrap="$(printf '%q ' "$SELF" "${ARGS[@]}" --run-task "$stage" --task-list "$todo_file")")
      id=${id%%;*}
      stage_jobs+=("$id")
      echo "$id" >> "$WORK/.tasks/jobs"
      echo "submitted $stage: job $id (${count} tasks)" >&2
    done
    DEP=$(IFS=:; echo "${stage_jobs[*]}")
    JOBS+=("${stage_jobs[@]}")
  done
  if ((${#JOBS[@]} == 0)); then echo "every task is done already" >&2
  elif ((WAIT)); then
    # Until no job of ours is pending or running; a failed array leaves its dependants waiting forever: cancel them.
    while :; do
      left=$(squeue -h -j "$(IFS=,; echo "${JOBS[*]}")" -o '%i %T %r' 2> /dev/null || true)
      [[ -z $left ]] && break
      if grep -q 'DependencyNeverSatisfied' <<< "$left"; then
        scancel "${JOBS[@]}" 2> /dev/null || true
        break
      fi
      sleep 2
    done
  else
    echo "submitted ${#JOBS[@]} jobs; run this command again to see the table (it submits nothing new while they run)" >&2
    exit 0
  fi
else
  for stage in "${STAGES[@]}"; do
    mapfile -t todo < <(missing "$stage")
    ((${#todo[@]})) || continue
    echo ">>> $stage: ${#todo[@]} of $(tasks_of "$stage") tasks, $LOCAL at a time" >&2
    printf '%s\n' "${todo[@]}" | xargs -P "$LOCAL" -I{} "$SELF" "${ARGS[@]}" --run-task "$stage" --task {} \
      || { echo "cluster_pipeline.sh: stage $stage failed (its tasks' logs: $WORK/.tasks/$stage/*.log); run again to resume" >&2; exit 1; }
  done
fi

# ---- the stage table ----
failed=""
lines() {  # lines of the files, compressed ones decompressed
  local n=0 f c
  for f in "$@"; do
    [[ -f $f ]] || continue
    case $f in *.gz) c=(gzip -dc) ;; *.xz) c=(xz -dc) ;; *.zst) c=(zstd -dcq) ;; *) c=(cat) ;; esac
    n=$((n + $("${c[@]}" "$f" | wc -l)))
  done
  echo $n
}
docs() { [[ -f $1.idx ]] && "$BIN/dataset_info" "$1" | sed -n 's/^documents: //p' || echo "-"; }
{
  echo
  echo "| stage            | tasks       |  lines in  |  lines out | task-seconds | wall seconds |"
  echo "|------------------|-------------|------------|------------|--------------|--------------|"
  for stage in "${STAGES[@]}"; do
    n=$(tasks_of "$stage") done_n=0 secs=0 first="" last=""
    for ((t = 0; t < n; t++)); do
      m=$WORK/.tasks/$stage/$t.done
      [[ -e $m ]] || continue
      done_n=$((done_n + 1))
      read -r s a b <<< "$(sed -E 's/seconds=([^ ]+) start=([^ ]+) end=([^ ]+).*/\1 \2 \3/' "$m")"
      secs=$(awk -v x="$secs" -v y="$s" 'BEGIN { print x + y }')
      first=$(awk -v x="${first:-$a}" -v y="$a" 'BEGIN { print (y < x ? y : x) }')
      last=$(awk -v x="${last:-$b}" -v y="$b" 'BEGIN { print (y > x ? y : x) }')
    done
    ((done_n == n)) || failed="$failed $stage"
    case $stage in
      blacklist_urls) in="-" out=$(lines "$WORK/urls.clean.txt") ;;
      download_urls) in=$(lines "$WORK/urls.clean.txt") out=$(lines "${SHARD_FILES[@]}") ;;
      cleanup) in=$(lines "${SHARD_FILES[@]}") out=$(lines "$WORK"/cleaned/part-*.jsonl) ;;
      filter) in=$(lines "$WORK"/cleaned/part-*.jsonl) out=$(lines "$WORK"/deduped/part-*.jsonl) ;;
      shuffle_gather) in=$(lines "$WORK"/deduped/part-*.jsonl) out=$(lines "$WORK"/shuffled/bucket-*.jsonl) ;;
      merge_datasets) in=$(lines "$WORK"/shuffled/bucket-*.jsonl) out=$(docs "$WORK/${NAME}_text_document") ;;
      *) in="-" out="-" ;;
    esac
    wall=$(awk -v a="${first:-0}" -v b="${last:-0}" 'BEGIN { printf "%.1f", b - a }')
    printf '| %-16s | %4s of %-3s | %10s | %10s | %12.1f | %12s |\n' "$stage" "$done_n" "$n" "$in" "$out" "$secs" "$wall"
  done
  echo
  echo "dataset: $WORK/${NAME}_text_document.bin/.idx ($(awk -v a="$T_START" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s)"
} | tee "$WORK/summary.txt" >&2
if [[ -n $failed ]]; then
  echo "cluster_pipeline.sh: unfinished stages:$failed (logs: $WORK/.tasks/STAGE/N.log, $WORK/.tasks/logs/); run again to resume" >&2
  exit 1
fi
