#!/usr/bin/env bash
# pretrain_gpt under real Slurm: starts a private one-node cluster (munged,
# slurmctld and slurmd from Debian's Slurm packages, run as root with their
# configuration, sockets, ports and state in a temporary directory), then
#   srun -N 1 -n 2  ... --zero-stage 2             (rank and world from srun,
#                                                   rendezvous on the nodelist's host)
#   srun -N 1 -n 3  ... --zero-stage 3 --cpu-offload (padding, offload)
#   salloc -n 2 + srun inside the allocation          (the batch-job way)
# and compares losses and weights with one process (rtol 1e-5, as the zero test).
# The node claims 4 CPUs whatever the machine has (config_overrides).
# Exits 77 (skipped) without the Slurm binaries or without root.
#   slurm_test.sh SOURCE_DIR BIN_DIR PYTHON
set -euo pipefail
SRC=$1 BIN=$2 PY=$3
skip() {  # CI never goes green by skipping
  echo "skipped: $1"
  if [[ -n "${CI:-}" ]]; then echo "FAIL: CI is set, and this test must run there"; exit 1; fi
  exit 77
}
for tool in munged mungekey slurmctld slurmd srun salloc sinfo; do
  command -v $tool > /dev/null || skip "$tool is not installed (scripts/setup.sh installs Slurm)"
done
[[ $(id -u) == 0 ]] || skip "a private Slurm cluster needs root"
DATA=$SRC/tests/data/megatron
W=$(mktemp -d)
chmod 755 "$W"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
cd "$W"
source "$SRC/tests/e2e/zero/common.sh"
fail() {
  echo "FAIL: $*"
  for f in munged.log slurmctld.log slurmd.log; do [[ -f $f ]] && { echo "--- $f"; tail -15 $f; }; done
  exit 1
}

# munge: its own key and socket (nothing of the host's is touched).
mkdir -p munge && chmod 700 munge
mungekey --create --keyfile munge/munge.key > /dev/null 2>&1 || fail "mungekey"
munged --force --foreground --key-file munge/munge.key --socket "$W/munge/socket" --pid-file munge/munged.pid \
  --seed-file munge/seed --log-file "$W/munged.log" > /dev/null 2>&1 &
pids+=($!)

host=$(hostname -s)
mkdir -p ctld d
cat > slurm.conf <<EOF
ClusterName=zlmtest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$W/munge/socket
CredType=cred/munge
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd.pid
StateSaveLocation=$W/ctld
SlurmdSpoolDir=$W/d
SlurmctldLogFile=$W/slurmctld.log
SlurmdLogFile=$W/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
export SLURM_CONF=$W/slurm.conf
for _ in $(seq 100); do [[ -S munge/socket ]] && break; sleep 0.1; done
slurmctld -D -i > /dev/null 2>&1 &
pids+=($!)
sleep 1
slurmd -D -N "$host" > /dev/null 2>&1 &
pids+=($!)
up=0
for _ in $(seq 60); do
  [[ "$(sinfo -h -o %t 2>/dev/null)" == idle ]] && { up=1; break; }
  sleep 0.5
done
((up)) || fail "the private Slurm cluster did not come up: $(sinfo -h 2>&1)"

$BIN/pretrain_gpt "${common[@]}" --save ref > ref.log 2>&1 || { tail ref.log; exit 1; }

# No MASTER_ADDR: rank 0's host is the first of SLURM_JOB_NODELIST (unless this
# machine cannot resolve its own name, where the job script would set it).
rdv=$host
if ! getent hosts "$host" > /dev/null; then
  echo "note: $host does not resolve; MASTER_ADDR=127.0.0.1 as a job script would set it"
  export MASTER_ADDR=127.0.0.1 rdv=127.0.0.1
fi
MASTER_PORT=$(free_port) timeout 120 srun -N 1 -n 2 $BIN/pretrain_gpt "${common[@]}" --zero-stage 2 --save srun_z2 > srun_z2.log 2>&1 ||
  { tail -20 srun_z2.log; fail "srun -n 2"; }
grep -q "initialized data parallel with size 2 (gloo backend, launched by slurm, rendezvous $rdv:" srun_z2.log ||
  { cat srun_z2.log; fail "srun -n 2 did not start 2 ranks under Slurm"; }
MASTER_PORT=$(free_port) timeout 120 srun -N 1 -n 3 $BIN/pretrain_gpt "${common[@]}" --zero-stage 3 --cpu-offload --save srun_z3 > srun_z3.log 2>&1 ||
  { tail -20 srun_z3.log; fail "srun -n 3"; }
grep -q 'initialized data parallel with size 3' srun_z3.log
# A job step inside an allocation (what an sbatch script does).
MASTER_PORT=$(free_port) timeout 120 salloc -N 1 -n 2 srun $BIN/pretrain_gpt "${common[@]}" --zero-stage 1 --save salloc_z1 > salloc_z1.log 2>&1 ||
  { tail -20 salloc_z1.log; fail "salloc + srun"; }
grep -q 'initialized data parallel with size 2' salloc_z1.log
$PY "$SRC/tests/e2e/zero/compare_runs.py" --rtol 1e-5 --atol 1e-5 ref srun_z2 srun_z3 salloc_z1

# The data pipeline as a Slurm job graph (scripts/cluster_pipeline.sh --slurm): job arrays chained
# by afterok give the bytes of the local run; a second submission submits nothing; arrays split
# under --max-array; the jobs cancelled mid-way (scancel) and submitted again complete the same.
TOK=(--vocab-file $DATA/gpt2-tiny-vocab.json --merge-file $DATA/gpt2-tiny-merges.txt)
mkdir -p shards
head -120 $DATA/openwebtext-1000.decoded.jsonl | awk '{sub(/^\{/, "{\"url\": \"o-" NR "\", "); print}' > raw.jsonl
head -10 $DATA/openwebtext-1000.decoded.jsonl | awk '{sub(/^\{/, "{\"url\": \"c-" NR "\", "); sub(/ the /, " THE "); print}' >> raw.jsonl
split -n l/3 -d -a 3 --additional-suffix=.jsonl raw.jsonl shards/s-
export BIN
PIPE=("$SRC/scripts/cluster_pipeline.sh" --shards shards "${TOK[@]}" --buckets 2 --ranges 2)
"${PIPE[@]}" --work local --local-tasks 2 > local.log 2>&1 || { cat local.log; fail "cluster_pipeline.sh --local-tasks"; }
want=$(cat local/gpt2_text_document.bin local/gpt2_text_document.idx | md5sum)
dataset_of() { cat "$1/gpt2_text_document.bin" "$1/gpt2_text_document.idx" | md5sum; }
timeout 300 "${PIPE[@]}" --work sl --slurm > sl.log 2>&1 || { cat sl.log; tail -5 sl/.tasks/logs/* 2>/dev/null; fail "cluster_pipeline.sh --slurm"; }
grep -q 'submitted merge_datasets: job' sl.log || { cat sl.log; fail "no job array was submitted"; }
[[ $(dataset_of sl) == "$want" ]] || { cat sl.log; fail "the Slurm job graph's dataset differs from the local run's"; }
timeout 120 "${PIPE[@]}" --work sl --slurm > sl2.log 2>&1 || { cat sl2.log; fail "a second submission"; }
grep -q 'every task is done already' sl2.log || { cat sl2.log; fail "a second submission submitted jobs"; }
timeout 300 "${PIPE[@]}" --work split --slurm --max-array 3 > split.log 2>&1 || { cat split.log; fail "--max-array 3"; }
[[ $(grep -c 'submitted candidates: job' split.log) == 20 ]] || { cat split.log; fail "40 candidates tasks should be 20 arrays of 2"; }
[[ $(dataset_of split) == "$want" ]] || fail "split arrays: another dataset"
timeout 60 "${PIPE[@]}" --work cancel --slurm --no-wait > cancel.log 2>&1 || { cat cancel.log; fail "--no-wait"; }
for _ in $(seq 600); do [[ -n $(ls cancel/.tasks/candidates 2> /dev/null) ]] && break; sleep 0.1; done
scancel --user="$(id -un)"  # every job of the graph still queued or running (this private cluster runs nothing else)
for _ in $(seq 100); do [[ -z $(squeue -h) ]] && break; sleep 0.2; done
[[ -e cancel/gpt2_text_document.idx ]] && fail "cancelled, yet the dataset exists: the cancel tested nothing"
timeout 300 "${PIPE[@]}" --work cancel --slurm > cancel2.log 2>&1 || { cat cancel2.log; fail "a submission after scancel"; }
grep -q 'submitted signatures' cancel2.log && fail "the signatures were done before the cancel, yet submitted again"
[[ $(dataset_of cancel) == "$want" ]] || fail "after scancel and a second submission: another dataset"
echo "slurm ok"
