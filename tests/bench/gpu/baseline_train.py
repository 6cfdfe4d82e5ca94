"""The plain PyTorch (Python) training loop that pretrain_gpt is measured
against on a GPU: the same GPT-2 (learned positions, pre-LayerNorm, tanh-GELU
MLP, tied embeddings, causal scaled_dot_product_attention, no dropout),
bf16 autocast with fp32 weights, fused AdamW, clipping, micro-batches
accumulated to the global batch; optionally torch.compile. Random token ids
(throughput only). Prints one JSON line: tokens/s, seconds per iteration,
peak device memory, MFU.

  baseline_train.py --layers 12 --hidden 768 --heads 12 --seq 1024 --micro 16 --global-batch 64 [--compile]
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc, self.out = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab, seq, layers, h, heads):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, h), nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02 / (math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight")) else 1))
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, labels):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    for k, d in [("layers", 12), ("hidden", 768), ("heads", 12), ("seq", 1024), ("micro", 16), ("global-batch", 64),
                 ("vocab", 50304), ("iters", 30), ("warmup", 10)]:
        ap.add_argument("--" + k, type=int, default=d)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--peak-tflops", type=float, default=989.4, help="dense bf16 peak of the device (H100 SXM: 989.4)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.manual_seed(1234)
    model = GPT2(a.vocab, a.seq, a.layers, a.hidden, a.heads).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=1.5e-4,
                            fused=True)  # the fused kernel on CPU too, as ours
    step_fn = torch.compile(model) if a.compile else model
    accum = a.global_batch // a.micro
    times = []
    for it in range(a.iters):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(accum):
            x = torch.randint(0, a.vocab, (a.micro, a.seq + 1), device=dev)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                loss = step_fn(x[:, :-1], x[:, 1:]) / accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    secs = sum(times[a.warmup:]) / max(1, len(times[a.warmup:]))
    tokens = a.global_batch * a.seq / secs
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    flops_per_token = 6 * n + 12 * a.layers * a.hidden * a.seq  # PaLM appendix B (nanoGPT's estimate_mfu)
    print(json.dumps({"impl": "pytorch" + ("+compile" if a.compile else ""), "params": n, "seconds_per_iteration": secs,
                      "tokens_per_second": tokens, "mfu": tokens * flops_per_token / (a.peak_tflops * 1e12),
                      "peak_device_bytes": torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0}))


if __name__ == "__main__":
    main()
