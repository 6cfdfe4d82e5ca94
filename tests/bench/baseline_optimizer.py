"""The reference side of bench_optimizer.sh: seconds per optimizer step over
the parameters of a GPT-2 (the same tensors as ours: wte, wpe, per block two
LayerNorms, qkv, projection, fc, out, then ln_f; weight decay on the matrices
only), gradient-norm clipping plus AdamW, with
  deepspeed   DeepSpeed's CPU Adam (DeepSpeedCPUAdam, adamw_mode; what its
              ZeRO-Offload steps on the CPU), built on first use;
  torch       torch.optim.AdamW(fused=True) (PyTorch's fused CPU kernel).
Prints one JSON line.
  baseline_optimizer.py time deepspeed|torch LAYERS HIDDEN VOCAB ITERS [SHARDS]
      SHARDS > 1: one flat parameter of 1/SHARDS of the model, what each rank's
      CPU Adam steps in DeepSpeed's ZeRO-Offload over SHARDS data-parallel ranks
  baseline_optimizer.py check deepspeed|torch DIR
      DIR from `zlm_bench_optimizer --dump DIR`: the same parameters and
      gradients, one clip + AdamW step; exit 1 unless every parameter equals
      zerolm's after its step within 1e-6 and the gradient norms agree within
      1e-6 relative (Adam's update does not see a wrong gradient scale; the norm does)
"""
import json
import os
import sys
import time

import numpy as np
import torch

LR, WD, MAX_NORM = 1e-4, 0.01, 1.0


def gpt2_shapes(layers, h, vocab):
    shapes = [(vocab, h), (8, h)]
    for _ in range(layers):
        shapes += [(h,), (h,), (3 * h, h), (3 * h,), (h, h), (h,), (h,), (h,), (4 * h, h), (4 * h,), (h, 4 * h), (h,)]
    return shapes + [(h,), (h,)]


def make_optimizer(impl, params):
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WD},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    if impl == "deepspeed":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        return DeepSpeedCPUAdam(groups, lr=LR, adamw_mode=True)
    return torch.optim.AdamW(groups, lr=LR, fused=True)


def check(impl, d):
    meta = json.load(open(os.path.join(d, "manifest.json")))
    manifest = meta["params"]
    p0, grad, p1 = (np.fromfile(os.path.join(d, f), dtype=np.float32) for f in ("p0.bin", "grad.bin", "p1.bin"))
    params = []
    for m in manifest:
        n = int(np.prod(m["shape"]))
        sl = slice(m["offset"], m["offset"] + n)
        p = torch.nn.Parameter(torch.from_numpy(p0[sl].copy()).view(m["shape"]))
        p.grad = torch.from_numpy(grad[sl].copy()).view(m["shape"])
        params.append(p)
    opt = make_optimizer(impl, params)
    torch.nn.utils.clip_grad_norm_(params, MAX_NORM)
    opt.step()
    worst, where = 0.0, ""
    for m, p in zip(manifest, params):
        ours = torch.from_numpy(p1[m["offset"]:m["offset"] + p.numel()].copy()).view(p.shape)
        diff = (p.detach() - ours).abs().max().item()
        if diff > worst:
            worst, where = diff, m["name"]
    norm = float(np.sqrt(np.sum(grad.astype(np.float64) ** 2)))  # exact, in float64
    norm_diff = abs(norm - meta["grad_norm"]) / norm
    ok = worst <= 1e-6 and norm_diff <= 1e-6
    print(json.dumps({"impl": impl, "check": "ok" if ok else "FAIL", "params": int(p0.size),
                      "max_abs_difference": worst, "at": where, "grad_norm_relative_difference": norm_diff}))
    sys.exit(0 if ok else 1)


def main():
    if sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
        return
    impl, layers, h, vocab, iters = sys.argv[2], *map(int, sys.argv[3:7])
    shards = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    shapes = gpt2_shapes(layers, h, vocab)
    if shards > 1:
        shapes = [(-(-sum(int(np.prod(s)) for s in shapes) // shards),)]
    params = []
    for s in shapes:
        p = torch.nn.Parameter(torch.randn(s) * 0.02)
        p.grad = torch.randn(s) * 1e-3
        params.append(p)
    opt = make_optimizer(impl, params)
    total = 0.0
    for it in range(iters + 1):  # iteration 0 warms up
        t0 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, MAX_NORM)
        opt.step()
        if it > 0:
            total += time.perf_counter() - t0
    print(json.dumps({"impl": impl, "params": sum(p.numel() for p in params), "seconds_per_step": total / iters,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
