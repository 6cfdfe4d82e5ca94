"""Reference test: a checkpoint in Megatron-LM's layout (--ckpt-format torch)
whose model is megatron-core's own GPTModel loads into convert_gpt with the
same logits as megatron-core computes (fp32, within 1e-5).

  megatron_checkpoint_reads.py BIN_DIR DATA_DIR WORK_DIR

megatron-core's GPTModel (local layer spec, tanh GELU as Megatron's default
--bias-gelu-fusion computes it, tied embeddings, learned positions) is built
and run on the CPU; its state_dict goes into iter_0000007/mp_rank_00/
model_optim_rng.pt with the keys Megatron-LM's checkpointing writes (args as
an argparse.Namespace, checkpoint_version 3.0, an RNG state holding numpy's).
The same weights are also written cut for TP 2 x PP 2 by Megatron's rules
(column-parallel layers cut along their rows, row-parallel along their
columns, each stage numbering its layers from 0, the last stage holding its
copy of the tied embedding as output_layer.weight): that layout is this
script's, from those rules, not megatron-core's own run; so are the legacy
names (language_model.encoder..., nested as Megatron's legacy model saves
them, with Megatron-DeepSpeed's attention.query_key_value). And the other
way: convert_gpt --export-megatron writes a checkpoint that torch.load reads
and a fresh megatron-core GPTModel loads with strict=True, with the same
logits; so does each part of pretrain_gpt --ckpt-format torch at TP 2 x PP
2, joined by Megatron's rules. Also checked: a
checkpoint of erf GELU (--no-bias-gelu-fusion) gives the logits of
megatron-core's model with plain F.gelu, and exports with the flag kept.
Exits 77 (skipped) when megatron-core is not installed.
"""
import argparse
import os
import subprocess
import sys

from reference_env import fresh_dir, missing

try:
    import numpy as np
    import torch
    import megatron_cpu
    from megatron_cpu import causal_mask, positions
except ImportError as e:  # pragma: no cover
    missing(e, "megatron-core")

bin_dir, data_dir, work = sys.argv[1:4]
fresh_dir(work)
LAYERS, HIDDEN, HEADS, SEQ, VOCAB = 2, 64, 4, 16, 50304  # GPT-2's vocabulary padded as Megatron pads it

megatron_cpu.init(work)
model = megatron_cpu.gpt(LAYERS, HIDDEN, HEADS, SEQ, VOCAB, seed=5)
model.eval()
with torch.no_grad():  # biases and LayerNorms away from their zero/one initial values, so that a mix-up shows
    for name, p in model.named_parameters():
        if name.endswith("bias") or "layernorm" in name:
            p.add_(torch.randn_like(p) * 0.1)
tokens = torch.tensor([[5, 17, 3, 99, 42, 0, 50256, 8, 6400, 31]])
T = tokens.shape[1]
with torch.no_grad():
    want = model(tokens, positions(T), causal_mask(T))[0].float()  # (T, V)
state = model.state_dict()


def args(tp, pp, **extra):
    a = dict(num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, max_position_embeddings=SEQ, padded_vocab_size=VOCAB,
             make_vocab_size_divisible_by=64,  # 50257 padded to a multiple of 64 x TP (Megatron saves it with its args)
             tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, bias_gelu_fusion=True, openai_gelu=False,
             position_embedding_type="learned_absolute", normalization="LayerNorm", add_bias_linear=True, swiglu=False,
             untie_embeddings_and_output_weights=False, group_query_attention=False, num_query_groups=None,
             num_layers_per_virtual_pipeline_stage=None, params_dtype=torch.float32, seq_length=SEQ)
    a.update(extra)
    return argparse.Namespace(**a)


def save(dir_, parts, tp, pp, **extra):
    it = os.path.join(dir_, "iter_0000007")
    for (t, p), sd in parts.items():
        name = f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "")
        os.makedirs(os.path.join(it, name))
        torch.save({"args": args(tp, pp, **extra), "checkpoint_version": 3.0, "iteration": 7, "model": sd,
                    "rng_state": [{"random_rng_state": ("state", 3), "np_rng_state": np.random.get_state(),
                                   "torch_rng_state": torch.get_rng_state(), "rng_tracker_states": {}}],
                    "num_floating_point_operations_so_far": 0},
                   os.path.join(it, name, "model_optim_rng.pt"))
    with open(os.path.join(dir_, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("7")


def cut(sd, tp, pp):
    """Megatron's TP x PP parts of a TP 1 state dict."""
    per = LAYERS // pp
    parts = {}
    for t in range(tp):
        for p in range(pp):
            out = {}
            for k, v in sd.items():
                if k.startswith("decoder.layers."):
                    layer = int(k.split(".")[2])
                    if layer // per != p:
                        continue
                    k = "decoder.layers." + str(layer % per) + "." + k.split(".", 3)[3]
                elif k.startswith("embedding."):
                    if p != 0:
                        continue
                elif k.startswith("decoder.final_layernorm") or k.startswith("output_layer"):
                    if p != pp - 1:
                        continue
                if v is None or not torch.is_tensor(v):
                    out[k] = v
                elif "linear_qkv" in k or "linear_fc1" in k or "word_embeddings" in k:
                    out[k] = v.chunk(tp, 0)[t].clone()
                elif ("linear_proj" in k or "linear_fc2" in k) and k.endswith("weight"):
                    out[k] = v.chunk(tp, 1)[t].clone()
                else:
                    out[k] = v.clone()
            if p == pp - 1 and pp > 1:
                out["output_layer.weight"] = sd["embedding.word_embeddings.weight"].chunk(tp, 0)[t].clone()
            parts[(t, p)] = out
    return parts


def legacy(sd):
    """The same weights under Megatron's legacy GPT names, nested as its state_dict_for_save_checkpoint
    nests them (language_model / embedding / encoder), Megatron-DeepSpeed's attention.* spelling."""
    rename = [("input_layernorm", "input_layernorm"), ("self_attention.linear_qkv", "attention.query_key_value"),
              ("self_attention.linear_proj", "attention.dense"), ("pre_mlp_layernorm", "post_attention_layernorm"),
              ("mlp.linear_fc1", "mlp.dense_h_to_4h"), ("mlp.linear_fc2", "mlp.dense_4h_to_h")]
    emb = {"word_embeddings": {"weight": sd["embedding.word_embeddings.weight"]},
           "position_embeddings": {"weight": sd["embedding.position_embeddings.weight"]}}
    enc = {}
    for k, v in sd.items():
        if k.startswith("decoder.layers.") and not k.endswith("_extra_state"):
            rest = k[len("decoder.layers."):]
            for a, b in rename:
                rest = rest.replace("." + a + ".", "." + b + ".")
            enc["layers." + rest] = v
        elif k.startswith("decoder.final_layernorm."):
            enc["final_layernorm." + k.split(".")[-1]] = v
    return {"language_model": {"embedding": emb, "encoder": enc}}


def logits_of(dir_):
    out = os.path.join(work, "logits.txt")
    subprocess.run([os.path.join(bin_dir, "convert_gpt"), "--load", dir_, "--dump-logits", out, "--tokens",
                    " ".join(str(int(x)) for x in tokens[0]), "-q"], check=True)
    return torch.tensor(np.loadtxt(out, dtype=np.float64), dtype=torch.float32)


for tp, pp in [(1, 1), (2, 2)]:
    d = os.path.join(work, f"tp{tp}pp{pp}")
    save(d, cut(state, tp, pp) if (tp, pp) != (1, 1) else {(0, 0): state}, tp, pp)
    got = logits_of(d)
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = (got - want).abs().max().item()
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), f"TP {tp} x PP {pp}: logits differ by {diff}"
    print(f"ok   TP {tp} x PP {pp}: logits of megatron-core's GPTModel within {diff:.1e}")

ours = os.path.join(work, "ours")  # converted to our format: the same model
subprocess.run([os.path.join(bin_dir, "convert_gpt"), "--load", os.path.join(work, "tp2pp2"), "--save", ours, "-q"], check=True)
diff = (logits_of(ours) - want).abs().max().item()
assert diff <= 1e-5, f"converted with convert_gpt --save: logits differ by {diff}"
print(f"ok   convert_gpt --load (Megatron) --save: within {diff:.1e}")

# pretrain_gpt --load on the Megatron directory itself: one iteration at a learning rate of 1e-30 from
# iteration 7 (1e-30: no weight moves in fp32), saved as iteration 8, is still megatron-core's model.
# pretrain_gpt's own rendezvous (its launcher binds a free port and hands it to rank 0).
child_env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
child_env["OMP_NUM_THREADS"] = "1"
for name, layout in [("one process", []), ("TP 2 on 2 processes", ["--nproc-per-node", "2", "--tensor-model-parallel-size", "2"])]:
    resumed = os.path.join(work, "resumed" + str(len(layout)))
    r = subprocess.run([os.path.join(bin_dir, "pretrain_gpt")] + layout +
                       ["--num-layers", str(LAYERS), "--hidden-size", str(HIDDEN),
                        "--num-attention-heads", str(HEADS), "--seq-length", str(SEQ), "--max-position-embeddings", str(SEQ),
                        "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters", "8", "--lr", "1e-30",
                        "--data-path", os.path.join(data_dir, "megatron", "meg-gpt2-openwebtext_text_document"),
                        "--vocab-file", os.path.join(data_dir, "gpt2", "gpt2-vocab.json"),
                        "--merge-file", os.path.join(data_dir, "gpt2", "gpt2-merges.txt"), "--split", "949,50,1",
                        "--eval-iters", "0", "--hidden-dropout", "0", "--attention-dropout", "0", "--log-interval", "1",
                        "--load", os.path.join(work, "tp2pp2"), "--save", resumed, "--data-cache-path", os.path.join(work, "cache")],
                       capture_output=True, text=True, env=child_env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Megatron-LM checkpoint" in r.stderr and "iteration 7" in r.stderr, r.stderr[-2000:]
    with open(os.path.join(resumed, "latest_checkpointed_iteration.txt")) as f:
        assert f.read().strip() == "8"
    got = logits_of(resumed)[:, :VOCAB]  # TP 2 pads the vocabulary further (to 50432): its extra rows are padding
    diff = (got - want).abs().max().item()
    assert diff <= 1e-5, f"pretrain_gpt --load (Megatron), {name}, one step at lr 1e-30: logits differ by {diff}"
    print(f"ok   pretrain_gpt --load (Megatron, TP 2 x PP 2), {name}: resumed at iteration 7, saved 8, within {diff:.1e}")

# The other way: convert_gpt --export-megatron writes Megatron's format, which torch.load reads (also
# with weights_only and the Namespace allowed, as megatron-core registers it) and a fresh megatron-core
# GPTModel loads strictly, giving the same logits.
exported = os.path.join(work, "exported")
subprocess.run([os.path.join(bin_dir, "convert_gpt"), "--load", ours, "--export-megatron", exported, "-q"], check=True)
with open(os.path.join(exported, "latest_checkpointed_iteration.txt")) as f:
    it = int(f.read())
path = os.path.join(exported, f"iter_{it:07d}", "mp_rank_00", "model_optim_rng.pt")
ck = torch.load(path, map_location="cpu", weights_only=False)
with torch.serialization.safe_globals([argparse.Namespace]):
    torch.load(path, map_location="cpu", weights_only=True)
assert ck["args"].num_layers == LAYERS and ck["args"].padded_vocab_size == VOCAB and ck["checkpoint_version"] == 3.0, ck["args"]
fresh = megatron_cpu.gpt(LAYERS, HIDDEN, HEADS, SEQ, VOCAB, seed=99)  # other initial weights: everything must come from the file
fresh.load_state_dict(ck["model"], strict=True)
fresh.eval()
with torch.no_grad():
    back = fresh(tokens, positions(T), causal_mask(T))[0].float()
diff = (back - want).abs().max().item()
assert diff <= 1e-5, f"--export-megatron: megatron-core's logits of the exported model differ by {diff}"
print(f"ok   convert_gpt --export-megatron: megatron-core loads it strictly, logits within {diff:.1e}")

d = os.path.join(work, "legacy")
save(d, {(0, 0): legacy(state)}, 1, 1)
diff = (logits_of(d) - want).abs().max().item()
assert diff <= 1e-5, f"legacy names: logits differ by {diff}"
print(f"ok   legacy (nested, Megatron-DeepSpeed) names: within {diff:.1e}")

# pretrain_gpt --ckpt-format torch, TP 2 x PP 2 on four processes: Megatron's files, per part. Joined by
# Megatron's rules (the inverse of cut() above), megatron-core's GPTModel loads them strictly and computes
# the logits convert_gpt computes from the same directory.
saved = os.path.join(work, "ckpt_format_torch")
r = subprocess.run([os.path.join(bin_dir, "pretrain_gpt"), "--nproc-per-node", "4", "--tensor-model-parallel-size", "2",
                    "--pipeline-model-parallel-size", "2", "--num-layers", str(LAYERS), "--hidden-size", str(HIDDEN),
                    "--num-attention-heads", str(HEADS), "--seq-length", str(SEQ), "--max-position-embeddings", str(SEQ),
                    "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "2", "--lr", "3e-3",
                    "--data-path", os.path.join(data_dir, "megatron", "meg-gpt2-openwebtext_text_document"),
                    "--vocab-file", os.path.join(data_dir, "gpt2", "gpt2-vocab.json"),
                    "--merge-file", os.path.join(data_dir, "gpt2", "gpt2-merges.txt"), "--split", "949,50,1", "--eval-iters", "0",
                    "--hidden-dropout", "0", "--attention-dropout", "0", "--save", saved, "--ckpt-format", "torch",
                    "--data-cache-path", os.path.join(work, "cache")], capture_output=True, text=True, env=child_env)
assert r.returncode == 0, r.stderr[-3000:]
parts = {(t, p): torch.load(os.path.join(saved, "iter_0000002", f"mp_rank_{t:02d}_{p:03d}", "model_optim_rng.pt"), weights_only=False)
         for t in range(2) for p in range(2)}
a = parts[(0, 0)]["args"]
assert (a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.num_layers, a.iteration) == (2, 2, LAYERS, 2), a
joined = {}
for (t, p), part in sorted(parts.items(), key=lambda kv: (kv[0][1], kv[0][0])):  # each stage's TP ranks in order
    for k, v in part["model"].items():
        if k.startswith("decoder.layers."):
            k = "decoder.layers." + str(int(k.split(".")[2]) + p * (LAYERS // 2)) + "." + k.split(".", 3)[3]
        elif k == "output_layer.weight":
            continue  # the last stage's copy of the tied embedding
        if not torch.is_tensor(v):
            joined[k] = v
            continue
        dim = 0 if ("linear_qkv" in k or "linear_fc1" in k or "word_embeddings" in k) else \
            1 if (("linear_proj" in k or "linear_fc2" in k) and k.endswith("weight")) else None
        joined.setdefault(k, []).append(v) if dim is not None else joined.setdefault(k, v)
        if dim is not None and len(joined[k]) == 2:
            joined[k] = torch.cat(joined[k], dim)
padded = joined["embedding.word_embeddings.weight"].shape[0]
core = megatron_cpu.gpt(LAYERS, HIDDEN, HEADS, SEQ, padded, seed=99)
core.load_state_dict(joined, strict=True)
core.eval()
with torch.no_grad():
    theirs = core(tokens, positions(T), causal_mask(T))[0].float()
diff = (logits_of(saved)[:, :padded] - theirs).abs().max().item()
assert diff <= 1e-5, f"--ckpt-format torch: megatron-core's logits differ from ours by {diff}"
print(f"ok   pretrain_gpt --ckpt-format torch (TP 2 x PP 2): megatron-core loads the joined parts strictly, logits within {diff:.1e}")

# erf GELU (--no-bias-gelu-fusion): megatron-core's model with plain F.gelu. With GPT-2's small
# initial weights the two GELUs' logits would differ by less than the tolerance: the MLP's input
# and output and the embeddings are made larger, where they part.
SCALE = {"linear_fc1.weight": 30.0, "linear_fc2.weight": 10.0, "word_embeddings.weight": 5.0}
erf_state = {k: v * next((f for s, f in SCALE.items() if k.endswith(s)), 1.0) if torch.is_tensor(v) else v for k, v in state.items()}


def logits_with(erf):
    m = megatron_cpu.gpt(LAYERS, HIDDEN, HEADS, SEQ, VOCAB, seed=99, erf=erf)
    m.load_state_dict(erf_state, strict=True)
    m.eval()
    with torch.no_grad():
        return m(tokens, positions(T), causal_mask(T))[0].float()


want_erf = logits_with(True)
gap = (want_erf - logits_with(False)).abs().max().item()
assert gap > 1e-4, f"tanh and erf GELU give logits only {gap} apart"  # ten times the tolerance: the test tells them apart
d = os.path.join(work, "erf")
save(d, {(0, 0): erf_state}, 1, 1, bias_gelu_fusion=False)
diff = (logits_of(d) - want_erf).abs().max().item()
assert diff <= 1e-5, f"erf GELU: logits differ by {diff}"
print(f"ok   erf GELU (--no-bias-gelu-fusion): megatron-core's logits within {diff:.1e} (tanh's are {gap:.1e} away)")
erf_export = os.path.join(work, "erf_exported")
subprocess.run([os.path.join(bin_dir, "convert_gpt"), "--load", d, "--export-megatron", erf_export, "-q"], check=True)
ck = torch.load(os.path.join(erf_export, "iter_0000007", "mp_rank_00", "model_optim_rng.pt"), map_location="cpu", weights_only=False)
assert ck["args"].bias_gelu_fusion is False and ck["args"].openai_gelu is False, ck["args"]
print("ok   erf GELU exported with bias_gelu_fusion False")
torch.distributed.destroy_process_group()
