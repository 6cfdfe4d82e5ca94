"""Reference test: pretrain_gpt's initial weights against Megatron's initialisation,
drawn with megatron-core's own init functions.

  init_vs_core.py BIN_DIR DATA_DIR WORK_DIR

Megatron's GPT (megatron-core's GPTModel and its TransformerLayer spec; the
legacy model alike) draws every weight matrix with
`init_method_normal(--init-method-std)`, except the two that write into the
residual stream, the attention output projection (linear_proj) and the MLP's
second layer (linear_fc2), which use
`scaled_init_method_normal(std, num_layers)` (std / sqrt(2 L)); biases start at
zero, LayerNorm weights at one. The word embedding (tied with the output
layer) and the position embedding use init_method_normal too.

pretrain_gpt runs one iteration at learning rate 0 (a 1-iteration warm-up) and
saves; that checkpoint is its initial model. For every tensor, a tensor of the
same shape is drawn with core's function, and the two must agree: zeros and
ones exactly; otherwise mean, standard deviation and kurtosis of ours within 5
standard errors of the normal law core's function samples (the std it was
given), and within 5 standard errors (of the difference) of core's sample.
A weight drawn with the wrong std (0.02 instead of 0.02 / sqrt(8) here) is 100+
standard errors off.
"""
import math
import os
import subprocess
import sys

from reference_env import fresh_dir, missing

try:
    import torch
    from megatron.core.utils import init_method_normal, scaled_init_method_normal
except ImportError as e:  # pragma: no cover
    missing(e, "megatron-core")

bin_dir, data_dir, work = sys.argv[1:4]
fresh_dir(work)
L, H, HEADS, SEQ, STD = 4, 256, 4, 64, 0.02
cmd = [os.path.join(bin_dir, "pretrain_gpt"), "--num-layers", str(L), "--hidden-size", str(H), "--num-attention-heads", str(HEADS),
       "--seq-length", str(SEQ), "--max-position-embeddings", str(SEQ), "--micro-batch-size", "1", "--global-batch-size", "1",
       "--train-iters", "1", "--lr", "1e-4", "--lr-warmup-iters", "1", "--init-method-std", str(STD),
       "--data-path", os.path.join(data_dir, "megatron", "meg-gpt2-openwebtext_text_document"),
       "--vocab-file", os.path.join(data_dir, "gpt2", "gpt2-vocab.json"), "--split", "949,50,1", "--eval-iters", "0",
       "--save", os.path.join(work, "ckpt"), "--data-cache-path", os.path.join(work, "cache"), "--distributed-backend", "gloo"]
subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "train.log"), "w"),
               env=dict(os.environ, OMP_NUM_THREADS="1"))
m = torch.jit.load(os.path.join(work, "ckpt", "iter_0000001", "mp_rank_00", "model_optim_rng.pt"))
ours = {k: v.detach().double() for k, v in m.model.named_parameters()}

init = init_method_normal(STD)
scaled = scaled_init_method_normal(STD, L)
SCALED_STD = STD / math.sqrt(2 * L)


def megatron_init(name):
    """(core's init function, its std) for a weight, or the constant Megatron starts it at."""
    if name.endswith(".bias"):
        return 0.0
    if name.startswith("ln_f.") or ".ln" in name:
        return 1.0
    if name.endswith("attn_proj.weight") or name.endswith("mlp_proj.weight"):  # core: linear_proj, linear_fc2
        return scaled, SCALED_STD
    return init, STD  # wte, wpe, attn_qkv (linear_qkv), mlp_fc (linear_fc1)


def moments(t):
    n = t.numel()
    mean = t.mean().item()
    std = t.std(unbiased=False).item()
    kurt = (((t - mean) / std) ** 4).mean().item()
    return n, mean, std, kurt


torch.manual_seed(1234)
checked = 0
for name, t in sorted(ours.items()):
    rule = megatron_init(name)
    if isinstance(rule, float):
        assert torch.equal(t, torch.full_like(t, rule)), f"{name}: Megatron starts it at {rule}"
        checked += 1
        continue
    fn, std = rule
    core = torch.empty(t.shape, dtype=torch.float32)
    fn(core)
    n, mean, s, kurt = moments(t)
    _, cmean, cs, ckurt = moments(core.double())
    se_mean, se_std, se_kurt = std / math.sqrt(n), std / math.sqrt(2 * n), math.sqrt(24 / n)
    checks = [("mean", mean, 0.0, se_mean), ("std", s, std, se_std), ("kurtosis", kurt, 3.0, se_kurt),
              ("mean vs core's", mean, cmean, se_mean * math.sqrt(2)), ("std vs core's", s, cs, se_std * math.sqrt(2)),
              ("kurtosis vs core's", kurt, ckurt, se_kurt * math.sqrt(2))]
    for what, got, want, se in checks:
        assert abs(got - want) <= 5 * se, f"{name}: {what} {got:.6g}, expected {want:.6g} (5 standard errors: {5 * se:.2g})"
    print(f"ok: {name} {tuple(t.shape)}: std {s:.6f} (core's function: std {std:.6f}, its sample {cs:.6f}), "
          f"mean {mean:+.1e}, kurtosis {kurt:.3f}")
    checked += 1
assert checked == len(ours) and any(n.endswith("mlp_proj.weight") for n in ours), sorted(ours)
print(f"ok: all {checked} tensors of the initial model follow Megatron's initialisation")
