"""pretrain_gpt's training step against PyTorch and Megatron's own code.

pretrain_gpt trains a tiny GPT-2 on the OpenWebText fixture for 6 iterations
(fp32, 2 micro-batches per step, clipping active, cosine schedule with
warm-up), saving a checkpoint after every iteration. From its iteration-1
checkpoint (weights, Adam moments, step), this script continues in Python with
  - the same GPT-2 written in PyTorch (parameter names as in our checkpoints),
  - torch.optim.AdamW (decay on weights only),
  - megatron.core's OptimizerParamScheduler for the learning rate,
  - torch.nn.utils.clip_grad_norm_,
  - the samples Megatron's GPTDataset yields (our cached doc/sample/shuffle
    index arrays, which other tests check against Megatron's, over documents
    read by megatron.core's IndexedDataset),
and checks the losses of iterations 2-6 and the weights and Adam moments
after iteration 6 against pretrain_gpt's (rtol 1e-5, atol 1e-5).

  train_vs_pytorch.py SOURCE_DIR BIN_DIR WORK_DIR     (exit 77: a package is missing)
"""
import json
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron_samples import sample_reader
except ImportError as e:  # pragma: no cover
    print("skipped:", e)
    sys.exit(1 if os.environ.get("CI") else 77)  # CI never goes green by skipping

SRC, BIN, WORK = sys.argv[1:4]
DATA = os.path.join(SRC, "tests/data/megatron/meg-gpt2-openwebtext_text_document")
L, H, HEADS, SEQ, MICRO, GLOBAL, ITERS = 2, 64, 4, 32, 4, 8, 6
LR, MIN_LR, WARMUP, CLIP, WD, SEED = 3e-3, 3e-4, 2, 0.5, 0.01, 1234

shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
cmd = [os.path.join(BIN, "pretrain_gpt"), "--num-layers", str(L), "--hidden-size", str(H), "--num-attention-heads", str(HEADS),
       "--seq-length", str(SEQ), "--max-position-embeddings", str(SEQ), "--micro-batch-size", str(MICRO),
       "--global-batch-size", str(GLOBAL), "--train-iters", str(ITERS), "--lr", str(LR), "--min-lr", str(MIN_LR),
       "--lr-decay-style", "cosine", "--lr-warmup-iters", str(WARMUP), "--weight-decay", str(WD), "--clip-grad", str(CLIP),
       "--data-path", DATA, "--vocab-file", os.path.join(SRC, "tests/data/megatron/gpt2-tiny-vocab.json"),
       "--split", "949,50,1", "--log-interval", "1", "--eval-interval", "1000", "--eval-iters", "0", "--hidden-dropout", "0",
       "--attention-dropout", "0", "--seed", str(SEED), "--save", os.path.join(WORK, "ckpt"), "--save-interval", "1",
       "--data-cache-path", os.path.join(WORK, "cache"), "--distributed-backend", "gloo"]
subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=open(os.path.join(WORK, "train.log"), "w"))


def checkpoint(it):
    m = torch.jit.load(os.path.join(WORK, "ckpt", "iter_%07d" % it, "mp_rank_00", "model_optim_rng.pt"))
    return (dict(m.model.named_parameters()), dict(m.optimizer.exp_avg.named_parameters()),
            dict(m.optimizer.exp_avg_sq.named_parameters()), int(m.optimizer.step))


weights, exp_avg, exp_avg_sq, step = checkpoint(1)
params = {k: torch.nn.Parameter(v.detach().clone()) for k, v in weights.items()}


def forward(tokens):
    B, T = tokens.shape
    x = params["wte.weight"][tokens] + params["wpe.weight"][:T]
    for l in range(L):
        p = lambda n: params[f"blocks.{l}.{n}"]
        h = F.layer_norm(x, (H,), p("ln1.weight"), p("ln1.bias"), 1e-5)
        q, k, v = F.linear(h, p("attn_qkv.weight"), p("attn_qkv.bias")).view(B, T, 3, HEADS, H // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, H)
        x = x + F.linear(y, p("attn_proj.weight"), p("attn_proj.bias"))
        h = F.gelu(F.linear(F.layer_norm(x, (H,), p("ln2.weight"), p("ln2.bias"), 1e-5), p("mlp_fc.weight"), p("mlp_fc.bias")),
                   approximate="tanh")
        x = x + F.linear(h, p("mlp_proj.weight"), p("mlp_proj.bias"))
    x = F.layer_norm(x, (H,), params["ln_f.weight"], params["ln_f.bias"], 1e-5)
    return x @ params["wte.weight"].t()


decay = [p for n, p in params.items() if p.dim() >= 2]
no_decay = [p for n, p in params.items() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "wd_mult": 1.0}, {"params": no_decay, "wd_mult": 0.0}], lr=LR, weight_decay=WD)
for n, p in params.items():
    opt.state[p] = {"step": torch.tensor(float(step)), "exp_avg": exp_avg[n].detach().clone(),
                    "exp_avg_sq": exp_avg_sq[n].detach().clone()}
# Megatron counts scheduler steps in samples when training by iterations.
sched = OptimizerParamScheduler(opt, init_lr=0.0, max_lr=LR, min_lr=MIN_LR, lr_warmup_steps=WARMUP * GLOBAL,
                                lr_decay_steps=ITERS * GLOBAL, lr_decay_style="cosine", start_wd=WD, end_wd=WD,
                                wd_incr_steps=ITERS * GLOBAL, wd_incr_style="constant")
sched.step(increment=GLOBAL)  # iteration 1 is done

# Megatron's GPTDataset samples, from the index arrays pretrain_gpt cached.
sample = sample_reader(DATA, os.path.join(WORK, "cache", os.path.basename(DATA) + "_train_indexmap_%dns_%dsl_%ds" % (ITERS * GLOBAL, SEQ, SEED)))


losses = {}
consumed = GLOBAL
for it in range(2, ITERS + 1):
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for m in range(GLOBAL // MICRO):
        batch = torch.tensor(np.stack([sample(consumed + m * MICRO + b) for b in range(MICRO)]).astype(np.int64))
        logits = forward(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        (loss / (GLOBAL // MICRO)).backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(list(params.values()), CLIP)
    opt.step()
    sched.step(increment=GLOBAL)
    consumed += GLOBAL
    losses[it] = total / (GLOBAL // MICRO)

ours = {}
for line in open(os.path.join(WORK, "ckpt", "metrics.jsonl")):
    rec = json.loads(line)
    if "consumed_samples" in rec:
        ours[rec["iteration"]] = rec["lm_loss"]
ok = True
for it, ref in losses.items():
    good = abs(ours[it] - ref) <= 1e-5 * abs(ref)
    ok &= good
    print(f"{'ok  ' if good else 'FAIL'} iteration {it}: lm loss {ours[it]:.9f} (pretrain_gpt) vs {ref:.9f} (PyTorch)")
w6, m6, v6, step6 = checkpoint(ITERS)
ok &= step6 == opt.state[decay[0]]["step"].item()
for name, ref_map, got_map in (("weights", {n: p.detach() for n, p in params.items()}, w6),
                               ("exp_avg", {n: opt.state[p]["exp_avg"] for n, p in params.items()}, m6),
                               ("exp_avg_sq", {n: opt.state[p]["exp_avg_sq"] for n, p in params.items()}, v6)):
    worst, where = 0.0, ""
    for n, r in ref_map.items():
        excess = ((got_map[n] - r).abs() / (1e-5 + 1e-5 * r.abs())).max().item()
        if excess > worst:
            worst, where = excess, n
    good = worst <= 1
    ok &= good
    print(f"{'ok  ' if good else 'FAIL'} {name} after iteration {ITERS}: worst {where} at {worst:.3f} of the tolerance")
sys.exit(0 if ok else 1)
