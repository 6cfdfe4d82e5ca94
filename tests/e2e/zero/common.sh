# Sourced by the multi-process trainer tests (zero_test.sh, slurm_test.sh):
# the tiny GPT-2 run they all compare with one process, and a free TCP port.
# Needs DATA (the Megatron fixtures), W (the work directory) and PY.
export OMP_NUM_THREADS=1
common=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --micro-batch-size 1 --global-batch-size 12
        --seq-length 32 --max-position-embeddings 32 --train-iters 10 --lr 0.003 --lr-decay-style cosine --min-lr 0.0003
        --lr-warmup-iters 3 --weight-decay 0.01 --clip-grad 0.5 --data-path $DATA/meg-gpt2-openwebtext_text_document
        --vocab-file $DATA/gpt2-tiny-vocab.json --split 949,50,1 --log-interval 1 --eval-interval 5 --eval-iters 1
        --hidden-dropout 0 --attention-dropout 0 --seed 1234 --data-cache-path $W/cache --distributed-backend gloo)
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
