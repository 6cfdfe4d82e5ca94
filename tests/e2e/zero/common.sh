# Sourced by the multi-process trainer tests (zero_test.sh, slurm_test.sh, parallel_test.sh):
# the tiny GPT-2 run they all compare with one process, a free TCP port, and the
# fault cases (each takes the pretrain_gpt flags of a long run; exits 1 on failure).
# Needs DATA (the Megatron fixtures), W (the work directory) and PY.
export OMP_NUM_THREADS=1
common=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --micro-batch-size 1 --global-batch-size 12
        --seq-length 32 --max-position-embeddings 32 --train-iters 10 --lr 0.003 --lr-decay-style cosine --min-lr 0.0003
        --lr-warmup-iters 3 --weight-decay 0.01 --clip-grad 0.5 --data-path $DATA/meg-gpt2-openwebtext_text_document
        --vocab-file $DATA/gpt2-tiny-vocab.json --split 949,50,1 --log-interval 1 --eval-interval 5 --eval-iters 1
        --hidden-dropout 0 --attention-dropout 0 --seed 1234 --data-cache-path $W/cache --distributed-backend gloo)
# A --save run of the tiny model on WORLD ranks under our launcher.
run() {  # run NAME WORLD ARGS...
  local name=$1 world=$2
  shift 2
  if ! $BIN/pretrain_gpt "${common[@]}" --nproc-per-node "$world" --save "$name" "$@" > "$name.log" 2>&1; then
    echo "FAIL: $name ($world ranks $*)"; tail -20 "$name.log"; exit 1
  fi
}
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

children_of() {  # PIDs whose parent is $1, from /proc (no procps needed)
  local f pid comm state ppid
  for f in /proc/[0-9]*/stat; do
    read -r pid comm state ppid _ < "$f" 2>/dev/null || continue
    if [[ $ppid == "$1" ]]; then echo "$pid"; fi
  done
}
wait_first_iteration() { for _ in $(seq 600); do grep -q ' iteration ' "$1" && break; sleep 0.1; done; }

# Rank 1 killed mid-run under our launcher: the launcher stops the rest and fails, naming it.
fault_killed_under_launcher() {
  $BIN/pretrain_gpt "$@" --nproc-per-node 2 > kill_launcher.log 2>&1 &
  local launcher=$!
  wait_first_iteration kill_launcher.log
  kill -9 "$(children_of $launcher | sort -n | tail -1)"
  local start=$SECONDS
  if wait $launcher; then echo "FAIL: launcher exited 0 after a rank was killed"; exit 1; fi
  (( SECONDS - start < 30 )) || { echo "FAIL: took $((SECONDS - start)) s to notice"; exit 1; }
  grep -q 'rank 1 was killed by signal' kill_launcher.log || { cat kill_launcher.log; exit 1; }
}

# torchrun-style ranks started separately: rank 0 notices rank 1's death by itself.
fault_killed_separately() {
  local port r0 r1 start
  port=$(free_port)
  RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $BIN/pretrain_gpt "$@" > r0.log 2>&1 &
  r0=$!
  RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $BIN/pretrain_gpt "$@" > r1.log 2>&1 &
  r1=$!
  wait_first_iteration r0.log
  kill -9 $r1
  start=$SECONDS
  if wait $r0; then echo "FAIL: rank 0 exited 0 after rank 1 was killed"; exit 1; fi
  (( SECONDS - start < 30 )) || { echo "FAIL: rank 0 took $((SECONDS - start)) s to notice"; exit 1; }
  grep -q 'error: \[rank 0\] .* among 2 ranks failed: .*HINT: another rank died' r0.log || { cat r0.log; exit 1; }
}

# A rank that stops answering (SIGSTOP): the other gives up after --distributed-timeout-minutes.
fault_hung() {
  local port h0 h1 start
  port=$(free_port)
  RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $BIN/pretrain_gpt "$@" --distributed-timeout-minutes 0.1 > h0.log 2>&1 &
  h0=$!
  RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $BIN/pretrain_gpt "$@" --distributed-timeout-minutes 0.1 > h1.log 2>&1 &
  h1=$!
  wait_first_iteration h0.log
  kill -STOP $h1
  start=$SECONDS
  if wait $h0; then echo "FAIL: rank 0 exited 0 while rank 1 hung"; exit 1; fi
  (( SECONDS - start < 40 )) || { echo "FAIL: rank 0 took $((SECONDS - start)) s to give up on a hung rank"; exit 1; }
  grep -q 'error: \[rank 0\] .* among 2 ranks failed: .*imed out.* (no answer within --distributed-timeout-minutes 0.1) ---> HINT: another rank died or timed out' h0.log ||
    { cat h0.log; exit 1; }
  kill -9 $h1; wait $h1 2>/dev/null || true
}
