"""PyTorch reference for bench_zero.sh: the same GPT-2 (Hugging Face
GPT2LMHeadModel, no dropout) trained data-parallel on CPU with W processes
over Gloo, DistributedDataParallel + ZeroRedundancyOptimizer(AdamW) (PyTorch's
ZeRO-1), micro-batches accumulated under no_sync(), clipping, as a Python
training loop would. Prints the mean seconds per iteration after warm-up.

  baseline_zero.py WORLD LAYERS HIDDEN HEADS SEQ VOCAB MICRO GLOBAL ITERS WARMUP
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import GPT2Config, GPT2LMHeadModel


def worker(rank, world, layers, hidden, heads, seq, vocab, micro, global_batch, iters, warmup, port, out):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1234)
    cfg = GPT2Config(vocab_size=vocab, n_positions=seq, n_embd=hidden, n_layer=layers, n_head=heads,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = DDP(GPT2LMHeadModel(cfg))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = ZeroRedundancyOptimizer([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                  optimizer_class=torch.optim.AdamW, lr=1e-4)
    steps = global_batch // (micro * world)
    g = torch.Generator().manual_seed(rank)
    times = []
    for it in range(iters):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        for m in range(steps):
            x = torch.randint(0, vocab, (micro, seq + 1), generator=g)
            ctx = model.no_sync() if m < steps - 1 else torch.enable_grad()
            with ctx:
                loss = model(input_ids=x[:, :-1], labels=x[:, :-1]).loss / steps
                loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        with open(out, "w") as f:
            f.write("%.6f\n" % (sum(times[warmup:]) / len(times[warmup:])))
    dist.destroy_process_group()


def main():
    world, layers, hidden, heads, seq, vocab, micro, global_batch, iters, warmup = map(int, sys.argv[1:11])
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), "baseline_zero.%d" % os.getpid())
    mp.spawn(worker, args=(world, layers, hidden, heads, seq, vocab, micro, global_batch, iters, warmup, port, out), nprocs=world)
    print(open(out).read().strip())
    os.remove(out)


if __name__ == "__main__":
    main()
