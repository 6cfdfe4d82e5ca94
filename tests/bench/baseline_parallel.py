"""PyTorch reference for bench_parallel.sh: the same GPT-2 as pretrain_gpt
(pre-LayerNorm, tanh GELU, tied embedding, fp32, no dropout), from the same
initial weights (a pretrain_gpt checkpoint, whole model) on the same samples
(Megatron's GPTDataset order, from the index arrays pretrain_gpt cached), with
AdamW (decay on weights only), clipping and pretrain_gpt's LR (0 in iteration 1
under a 1-iteration warm-up, then constant), on 2 CPU processes over Gloo:

  tp  PyTorch's tensor parallelism (torch.distributed.tensor.parallel):
      q, k, v and the MLP up-projection ColwiseParallel, the attention and MLP
      output projections RowwiseParallel; the tied embedding / head stays
      replicated (one weight cannot take a row-parallel and a column-parallel
      plan at once).
  pp  PyTorch's pipelining (torch.distributed.pipelining): two stages split at
      the middle layer, Schedule1F1B; the last stage holds a copy of the tied
      embedding whose gradient is summed with the first stage's each step.
  dp  data parallel over WORLD processes (environment, default 2):
      DistributedDataParallel + ZeroRedundancyOptimizer (PyTorch's ZeRO-1),
      micro-batches accumulated under no_sync(); each rank reads Megatron's
      slice of every global batch (rank r: micro-batch m's samples
      m*MICRO*WORLD + r*MICRO ...).
The optimizer is torch.optim.AdamW(fused=True) on plain tensors (PyTorch's
fused CPU kernel, as pretrain_gpt's step is fused); DTensors (TP) take the
default implementation, which the fused kernel does not accept.

Writes one JSON line per iteration (loss, seconds) from the rank that has the loss.

  baseline_parallel.py MODE CKPT_DIR DATA_PREFIX INDEX_PREFIX LAYERS HIDDEN HEADS SEQ MICRO GLOBAL ITERS LR CLIP OUT
"""
import faulthandler
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.hs = h // heads
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.q, self.k, self.v = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.proj, self.fc, self.mlp_proj = nn.Linear(h, h), nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):
        B, T, _ = x.shape
        y = self.ln1(x)
        q, k, v = (m(y).view(B, T, -1, self.hs).transpose(1, 2) for m in (self.q, self.k, self.v))  # local heads under TP
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, -1)
        x = x + self.proj(a)
        return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Part(nn.Module):
    """Layers [lo, hi) of the model, with the embeddings (pre) and/or the head (post)."""

    def __init__(self, vocab, seq, h, heads, lo, hi, pre, post):
        super().__init__()
        self.pre, self.post = pre, post
        self.wte = nn.Embedding(vocab, h) if pre or post else None
        self.wpe = nn.Embedding(seq, h) if pre else None
        self.blocks = nn.ModuleList(Block(h, heads) for _ in range(lo, hi))
        self.ln_f = nn.LayerNorm(h) if post else None
        self.lo = lo

    def forward(self, x):
        if self.pre:
            x = self.wte(x) + self.wpe.weight[: x.shape[1]]
        for b in self.blocks:
            x = b(x)
        if self.post:
            x = self.ln_f(x) @ self.wte.weight.t()
        return x


def load(part, ckpt):
    """Our checkpoint's whole-model tensors (compare_runs.checkpoint) into a part."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "e2e", "zero"))
    from compare_runs import checkpoint
    _, state = checkpoint(ckpt)
    w = {k[len("param/"):]: v for k, v in state.items() if k.startswith("param/")}
    with torch.no_grad():
        for name in ("wte", "wpe", "ln_f"):
            mod = getattr(part, name)
            if mod is not None:
                for pn, p in mod.named_parameters():
                    p.copy_(w[f"{name}.{pn}"])
        h = part.blocks[0].q.weight.shape[1] if len(part.blocks) else 0
        for i, b in enumerate(part.blocks):
            p = lambda n: w[f"blocks.{part.lo + i}.{n}"]
            for m, sl in ((b.q, slice(0, h)), (b.k, slice(h, 2 * h)), (b.v, slice(2 * h, 3 * h))):
                m.weight.copy_(p("attn_qkv.weight")[sl])
                m.bias.copy_(p("attn_qkv.bias")[sl])
            for m, n in ((b.ln1, "ln1"), (b.ln2, "ln2"), (b.proj, "attn_proj"), (b.fc, "mlp_fc"), (b.mlp_proj, "mlp_proj")):
                m.weight.copy_(p(n + ".weight"))
                m.bias.copy_(p(n + ".bias"))


def samples(data, index):
    """(first, n) -> n consecutive samples as a (n, seq + 1) int64 tensor."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
    from megatron_samples import sample_reader
    sample = sample_reader(data, index)
    return lambda first, n: torch.tensor(np.stack([sample(first + b) for b in range(n)]).astype(np.int64))


def start_iteration(opts, it, lr):
    """Gradients cleared; pretrain_gpt's LR: 0 in iteration 1 (1-iteration warm-up), then constant."""
    for o in opts:
        o.zero_grad(set_to_none=True)
        for g in o.param_groups:
            g["lr"] = 0.0 if it == 1 else lr


def decay_groups(ps):
    return [{"params": [p for p in ps if p.dim() >= 2], "weight_decay": 0.01},
            {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}]


def optimizers(params, lr):
    """AdamW, decay on weights only; plain tensors (fused) and DTensors in separate optimizers."""
    from torch.distributed.tensor import DTensor
    groups = {}
    for p in params:
        groups.setdefault(isinstance(p, DTensor), []).append(p)
    return [torch.optim.AdamW(decay_groups(ps), lr=lr, fused=not is_dt) for is_dt, ps in groups.items()]


def clip(params, max_norm, shared_sq_fn):
    """Global norm: sharded DTensor gradients summed over ranks, replicated ones once."""
    from torch.distributed.tensor import DTensor, Shard
    sq = torch.zeros((), dtype=torch.float64)
    split = torch.zeros((), dtype=torch.float64)
    for p in params:
        g = p.grad
        if isinstance(g, DTensor):  # sharded: each rank holds a part; replicated (row-parallel biases): counted once
            local = g.to_local().double().pow(2).sum()
            if any(isinstance(pl, Shard) for pl in g.placements):
                split += local
            else:
                sq += local
        else:
            sq += g.double().pow(2).sum()
    total = shared_sq_fn(sq, split)
    coef = min(1.0, max_norm / (total.sqrt().item() + 1e-6))
    for p in params:
        p.grad.mul_(coef)


def worker(rank, a, store_file, world):
    faulthandler.enable()  # a crash inside PyTorch prints the Python stack it happened under
    torch.set_num_threads(1)
    # A file rendezvous: no port to pick (a port found free and then closed could be taken by
    # another job's connection before the group binds it).
    dist.init_process_group("gloo", init_method="file://" + store_file, rank=rank, world_size=world)
    mode, ckpt, data, index = a[0], a[1], a[2], a[3]
    L, H, HEADS, SEQ, MICRO, GLOBAL, ITERS = map(int, a[4:11])
    LR, CLIP, out = float(a[11]), float(a[12]), a[13]
    get = samples(data, index)
    vocab = None
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "e2e", "zero"))
    from compare_runs import checkpoint
    vocab = checkpoint(ckpt)[1]["param/wte.weight"].shape[0]
    M = GLOBAL // MICRO
    records = []
    if mode == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        model = Part(vocab, SEQ, H, HEADS, 0, L, True, True)
        load(model, ckpt)
        mesh = init_device_mesh("cpu", (2,))
        for b in model.blocks:
            parallelize_module(b, mesh, {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
                                         "fc": ColwiseParallel(), "proj": RowwiseParallel(), "mlp_proj": RowwiseParallel()})
        params = list(model.parameters())
        opts = optimizers(params, LR)

        def norm_sq(sq, split):
            dist.all_reduce(split)
            return sq + split
        for it in range(1, ITERS + 1):
            t0 = time.perf_counter()
            start_iteration(opts, it, LR)
            total = 0.0
            for m in range(M):
                batch = get((it - 1) * GLOBAL + m * MICRO, MICRO)
                logits = model(batch[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
                (loss / M).backward()
                total += loss.item()
            clip(params, CLIP, norm_sq)
            for o in opts:
                o.step()
            records.append({"iteration": it, "lm_loss": total / M, "seconds": time.perf_counter() - t0})
        keep = rank == 0
    elif mode == "dp":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.nn.parallel import DistributedDataParallel as DDP
        part = Part(vocab, SEQ, H, HEADS, 0, L, True, True)
        load(part, ckpt)
        model = DDP(part)
        params = list(model.parameters())
        opt = ZeroRedundancyOptimizer(decay_groups(params), optimizer_class=torch.optim.AdamW, lr=LR, fused=True)
        steps = GLOBAL // (MICRO * world)

        def norm_sq(sq, split):
            return sq  # DDP's gradients are already averaged over the ranks
        for it in range(1, ITERS + 1):
            t0 = time.perf_counter()
            start_iteration([opt], it, LR)
            total = torch.zeros((), dtype=torch.float64)
            for m in range(steps):
                batch = get((it - 1) * GLOBAL + m * MICRO * world + rank * MICRO, MICRO)
                with model.no_sync() if m < steps - 1 else torch.enable_grad():
                    logits = model(batch[:, :-1])
                    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
                    (loss / steps).backward()
                total += loss.item()
            clip(params, CLIP, norm_sq)
            opt.step()
            dist.all_reduce(total)  # the loss averaged over every micro-batch of the global batch
            records.append({"iteration": it, "lm_loss": total.item() / (steps * world), "seconds": time.perf_counter() - t0})
        keep = rank == 0
    else:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B
        half = L // 2
        model = Part(vocab, SEQ, H, HEADS, 0 if rank == 0 else half, half if rank == 0 else L, rank == 0, rank == 1)
        load(model, ckpt)
        stage = PipelineStage(model, rank, 2, torch.device("cpu"))
        losses = []

        def loss_fn(logits, labels):
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        sched = Schedule1F1B(stage, n_microbatches=M, loss_fn=loss_fn)
        params = list(model.parameters())
        opts = optimizers(params, LR)

        def norm_sq(sq, split):
            # The last stage's copy of the tied embedding is not counted twice.
            if rank == 1:
                sq = sq - model.wte.weight.grad.double().pow(2).sum()
            dist.all_reduce(sq)
            return sq
        for it in range(1, ITERS + 1):
            t0 = time.perf_counter()
            start_iteration(opts, it, LR)
            batch = get((it - 1) * GLOBAL, GLOBAL)
            losses.clear()
            if rank == 0:
                sched.step(batch[:, :-1].contiguous())
            else:
                sched.step(target=batch[:, 1:].contiguous(), losses=losses)
            dist.all_reduce(model.wte.weight.grad)  # the tied embedding: first and last stage add their gradients
            clip(params, CLIP, norm_sq)
            for o in opts:
                o.step()
            if rank == 1:
                records.append({"iteration": it, "lm_loss": float(sum(l.item() for l in losses) / M), "seconds": time.perf_counter() - t0})
        keep = rank == 1
    if keep:
        with open(out, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    # Leave without the interpreter's teardown: once in a CI run a rank aborted there
    # ("terminate called without an active exception", Gloo's threads destroyed after the
    # group), after every figure was written. The results are on disk; nothing is left to free.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    world = int(os.environ.get("WORLD", "2")) if sys.argv[1] == "dp" else 2
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(sys.argv[1:], os.path.join(tmp, "rendezvous"), world), nprocs=world, join=True)


if __name__ == "__main__":
    main()
