"""The reference side of bench_optimizer.sh: seconds per optimizer step over
the parameters of a GPT-2 (the same tensors as ours: wte, wpe, per block two
LayerNorms, qkv, projection, fc, out, then ln_f; weight decay on the matrices
only), gradient-norm clipping plus AdamW, with
  deepspeed   DeepSpeed's CPU Adam (DeepSpeedCPUAdam, adamw_mode; what its
              ZeRO-Offload steps on the CPU), built on first use;
  torch       torch.optim.AdamW(fused=True) (PyTorch's fused CPU kernel).
Prints one JSON line.
  baseline_optimizer.py deepspeed|torch LAYERS HIDDEN VOCAB ITERS
"""
import json
import os
import sys
import time

import torch


def gpt2_params(layers, h, vocab):
    shapes = [(vocab, h), (8, h)]
    for _ in range(layers):
        shapes += [(h,), (h,), (3 * h, h), (3 * h,), (h, h), (h,), (h,), (h,), (4 * h, h), (4 * h,), (h, 4 * h), (h,)]
    shapes += [(h,), (h,)]
    params = []
    for s in shapes:
        p = torch.nn.Parameter(torch.randn(s) * 0.02)
        p.grad = torch.randn(s) * 1e-3
        params.append(p)
    return params


def main():
    impl, layers, h, vocab, iters = sys.argv[1], *map(int, sys.argv[2:6])
    params = gpt2_params(layers, h, vocab)
    groups = [{"params": [p for p in params if p.dim() == 2], "weight_decay": 0.01},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    if impl == "deepspeed":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        opt = DeepSpeedCPUAdam(groups, lr=1e-4, adamw_mode=True)
    else:
        opt = torch.optim.AdamW(groups, lr=1e-4, fused=True)
    total = 0.0
    for it in range(iters + 1):  # iteration 0 warms up
        t0 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if it > 0:
            total += time.perf_counter() - t0
    print(json.dumps({"impl": impl, "params": sum(p.numel() for p in params), "seconds_per_step": total / iters,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
