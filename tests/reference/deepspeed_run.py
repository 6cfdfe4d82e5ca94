"""What the DeepSpeed reference tests share: the tiny GPT both sides train
(megatron-core's GPTModel under DeepSpeed's engine on the CPU, pretrain_gpt on
the same samples), pretrain_gpt's command for it, the client state
Megatron-DeepSpeed saves, one data-parallel training iteration of the engine,
and the losses pretrain_gpt logged.

  run = Run(BIN, DATA_DIR, WORK, iters=N + K)
  run.pretrain(save_dir, "--load", ckpt)        # stderr; asserts success
  loss = run.iteration(engine, sample, it, rank, world)
  run.losses(save_dir)                          # {iteration: lm loss}
  run.logits(ckpt)                              # convert_gpt --dump-logits of TOKENS
  worst(ours, theirs, range(N + 1, N + K + 1))  # the largest relative difference of two runs' losses
  ds_to_universal(src, dst, tag)                # DeepSpeed's converter as its users run it
  core_name("3.mlp.dense_h_to_4h.weight")       # a GPTModelPipe parameter's megatron-core name
  start_worker(out, rank, world) ... end_worker()  # a DeepSpeed rank spawned by torch.multiprocessing
"""
import argparse
import json
import os
import subprocess
import sys

from reference_env import missing

os.environ["DS_ACCELERATOR"] = "cpu"
try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import deepspeed  # noqa: F401  (importable: the workers use it)
    import megatron_cpu
    from megatron_cpu import causal_mask, positions
except ImportError as e:  # pragma: no cover
    missing(e, "deepspeed or megatron-core")

L, H, HEADS, SEQ, MICRO, GLOBAL, LR, SEED = 2, 64, 4, 32, 2, 4, 3e-3, 1234
VOCAB = 5120  # the tiny vocabulary (5000 tokens) padded as pretrain_gpt pads it
TOKENS = torch.tensor([[5, 17, 3, 99, 42, 0, 4999, 8, 640, 31]])


class Run:
    def __init__(self, bin_dir, data_dir, work, iters):
        self.bin, self.work, self.iters = bin_dir, work, iters
        self.data = os.path.join(data_dir, "megatron", "meg-gpt2-openwebtext_text_document")
        self.vocab_file = os.path.join(data_dir, "megatron", "gpt2-tiny-vocab.json")
        self.index = os.path.join(work, "cache", os.path.basename(self.data) + "_train_indexmap_%dns_%dsl_%ds" % (iters * GLOBAL, SEQ, SEED))

    def pretrain(self, save, *extra, schedule=("--lr-decay-style", "constant", "--lr-warmup-iters", "0")):
        """pretrain_gpt on the tiny GPT for self.iters iterations, fp32, no dropout or clipping."""
        cmd = [os.path.join(self.bin, "pretrain_gpt"), "--num-layers", str(L), "--hidden-size", str(H), "--num-attention-heads",
               str(HEADS), "--seq-length", str(SEQ), "--max-position-embeddings", str(SEQ), "--micro-batch-size", str(MICRO),
               "--global-batch-size", str(GLOBAL), "--train-iters", str(self.iters), "--lr", str(LR), *schedule, "--weight-decay", "0.01",
               "--clip-grad", "0", "--data-path", self.data, "--vocab-file", self.vocab_file, "--split", "949,50,1", "--log-interval", "1",
               "--eval-interval", "1000", "--eval-iters", "0", "--hidden-dropout", "0", "--attention-dropout", "0", "--seed", str(SEED),
               "--save", save, "--data-cache-path", os.path.join(self.work, "cache"), "--distributed-backend", "gloo", *extra]
        r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert r.returncode == 0, r.stderr[-3000:]
        return r.stderr

    def logits(self, ckpt):
        """convert_gpt --load ckpt --dump-logits of TOKENS: (tokens, vocabulary), fp32."""
        out = os.path.join(self.work, "logits.txt")
        subprocess.run([os.path.join(self.bin, "convert_gpt"), "--load", ckpt, "--dump-logits", out, "--tokens",
                        " ".join(str(int(x)) for x in TOKENS[0]), "-q"], check=True)
        return torch.tensor(np.loadtxt(out, dtype=np.float64), dtype=torch.float32)

    @staticmethod
    def losses(save):
        """The training losses pretrain_gpt logged in save/metrics.jsonl, by iteration."""
        out = {}
        with open(os.path.join(save, "metrics.jsonl")) as f:
            for line in f:
                rec = json.loads(line)
                if "consumed_samples" in rec and "split" not in rec:
                    out[rec["iteration"]] = rec["lm_loss"]
        return out

    @staticmethod
    def iteration(engine, sample, it, rank, world, lr_kwargs=None, tp=1):
        """Iteration `it` (from 1) of the engine on this rank's share of the global batch, in
        pretrain_gpt's order; returns the loss averaged over every rank. With tp > 1 the ranks are
        TP x DP in Megatron's order (the tensor-parallel ones adjacent), each data-parallel rank's
        tensor-parallel ranks take the same samples, and the logits are split by vocabulary."""
        from megatron.core.tensor_parallel import vocab_parallel_cross_entropy
        dp, dp_rank = world // tp, rank // tp
        steps = GLOBAL // (MICRO * dp)  # micro-batches per rank per iteration
        total = torch.zeros(())
        for m in range(steps):
            first = (it - 1) * GLOBAL + dp_rank * steps * MICRO + m * MICRO
            batch = torch.tensor(np.stack([sample(first + b) for b in range(MICRO)]).astype(np.int64))
            logits = engine(batch[:, :-1], positions(SEQ), causal_mask(SEQ))
            if tp > 1:
                loss = vocab_parallel_cross_entropy(logits.float(), batch[:, 1:]).mean()
            else:
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1))
            engine.backward(loss)
            engine.step(lr_kwargs=lr_kwargs)
            total += loss.detach()
        torch.distributed.all_reduce(total)
        return total.item() / (steps * world)


def worst(ours, theirs, iterations):
    """The largest difference of two runs' losses over `iterations`, relative to theirs."""
    return max(abs(ours[it] - theirs[it]) / abs(theirs[it]) for it in iterations)


def ds_to_universal(src, dst, tag):
    """DeepSpeed's universal-checkpoint converter on src/tag into dst/tag, as its users run it (strict); returns
    (its exit status, the tail of its output)."""
    r = subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", os.path.join(src, tag), "--output_folder",
                        os.path.join(dst, tag), "--num_extract_workers", "1", "--num_merge_workers", "1"],
                       capture_output=True, text=True, env=dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1"))
    return r.returncode, (r.stderr + r.stdout)[-1500:]


# A GPTModelPipe layer's parameter names (the legacy ones) -> megatron-core's.
CORE_NAMES = {"input_layernorm": "input_layernorm", "self_attention.query_key_value": "self_attention.linear_qkv",
              "self_attention.dense": "self_attention.linear_proj", "post_attention_layernorm": "pre_mlp_layernorm",
              "mlp.dense_h_to_4h": "mlp.linear_fc1", "mlp.dense_4h_to_h": "mlp.linear_fc2"}


def core_name(pipe_name):
    """megatron-core's name of a gpt_pipe parameter ("tied_modules.embed.word_embeddings.weight", "3.mlp.dense_h_to_4h.weight",
    "{2 + L}.weight")."""
    head, rest = pipe_name.split(".", 1)
    if head == "tied_modules":
        return "embedding." + rest.split(".", 1)[1]
    if int(head) == 2 + L:
        return "decoder.final_layernorm." + rest
    sub, kind = rest.rsplit(".", 1)
    return f"decoder.layers.{int(head) - 2}.{CORE_NAMES[sub]}.{kind}"


def megatron_args(iteration, pp=1, tp=1):
    """What Megatron-DeepSpeed keeps in the engine's client state."""
    return argparse.Namespace(num_layers=L, hidden_size=H, num_attention_heads=HEADS, max_position_embeddings=SEQ, seq_length=SEQ,
                              padded_vocab_size=VOCAB, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                              bias_gelu_fusion=True, openai_gelu=False, position_embedding_type="learned_absolute",
                              normalization="LayerNorm", add_bias_linear=True, swiglu=False, untie_embeddings_and_output_weights=False,
                              global_batch_size=GLOBAL, consumed_train_samples=iteration * GLOBAL, consumed_valid_samples=0,
                              iteration=iteration, deepspeed=True, zero_stage=None)


def adamw_groups(model, weight_decay=0.01):
    """torch's AdamW in Megatron's two groups (decay on matrices, none on biases and LayerNorms), with
    the multipliers Megatron's scheduler reads."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay, "wd_mult": 1.0, "lr_mult": 1.0},
                              {"params": no_decay, "weight_decay": 0.0, "wd_mult": 0.0, "lr_mult": 1.0}], lr=LR)


def gpt_pipe(stages, tp=1):
    """DeepSpeed's PipelineModule laid out as Megatron-DeepSpeed's GPTModelPipe over `stages` stages: spec
    0 a function, 1 the tied embedding, 2 + l transformer layer l with ParallelTransformerLayerPipe's
    parameter names in its order, 2 + L the final LayerNorm, 3 + L the tied head; torch's default
    initial weights; its layers cut uniformly over the specs, which is GPTModelPipe's cut of the tests'
    2 layers over 2 stages (its own counts transformer layers only). With tp > 1 the grid is
    Megatron-DeepSpeed's (pipe, data, model) topology and each layer is this rank's tensor-parallel
    part as Megatron cuts it: the embedding and head by vocabulary rows, QKV (its heads) and
    dense_h_to_4h by output rows, dense and dense_4h_to_h by input columns (their biases whole,
    added after the sum), LayerNorms whole; the loss is megatron-core's vocab-parallel cross
    entropy. The caller has initialised DeepSpeed's distributed backend and, with tp > 1,
    megatron-core's tensor-parallel groups (start_worker)."""
    import torch.nn as nn
    from deepspeed.pipe import LayerSpec, PipelineModule, TiedLayerSpec
    if tp > 1:
        from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
        from megatron.core import parallel_state
        from megatron.core.tensor_parallel import vocab_parallel_cross_entropy
        from megatron.core.tensor_parallel.mappings import copy_to_tensor_model_parallel_region as copy_in
        from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region as reduce_out
        first_row = parallel_state.get_tensor_model_parallel_rank() * (VOCAB // tp)
    else:
        copy_in = reduce_out = lambda x: x
        first_row = 0

    class EmbeddingPipe(nn.Module):
        def __init__(self):
            super().__init__()
            self.word_embeddings = nn.Embedding(VOCAB // tp, H)
            self.position_embeddings = nn.Embedding(SEQ, H)

        @property
        def word_embeddings_weight(self):
            return self.word_embeddings.weight

        def forward(self, tokens):
            outside = (tokens < first_row) | (tokens >= first_row + VOCAB // tp)
            words = self.word_embeddings((tokens - first_row).masked_fill(outside, 0)).masked_fill(outside[..., None], 0)
            return reduce_out(words) + self.position_embeddings(torch.arange(tokens.shape[1]))

    class Column(nn.Linear):  # output rows cut
        def __init__(self, n_in, n_out):
            super().__init__(n_in, n_out // tp)

        def forward(self, x):
            return super().forward(copy_in(x))

    class Row(nn.Linear):  # input columns cut
        def __init__(self, n_in, n_out):
            super().__init__(n_in // tp, n_out)

        def forward(self, x):
            return super().forward(x) if tp == 1 else reduce_out(F.linear(x, self.weight)) + self.bias

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = nn.LayerNorm(H)
            self.self_attention = nn.Module()
            self.self_attention.query_key_value, self.self_attention.dense = Column(H, 3 * H), Row(H, H)
            self.post_attention_layernorm = nn.LayerNorm(H)
            self.mlp = nn.Module()
            self.mlp.dense_h_to_4h, self.mlp.dense_4h_to_h = Column(H, 4 * H), Row(4 * H, H)

        def forward(self, x):
            B, T, _ = x.shape  # Megatron's fused QKV: per head, its q, k and v rows
            qkv = self.self_attention.query_key_value(self.input_layernorm(x)).view(B, T, HEADS // tp, 3, H // HEADS)
            q, k, v = (qkv[..., i, :].transpose(1, 2) for i in range(3))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, H // tp)
            x = x + self.self_attention.dense(y)
            return x + self.mlp.dense_4h_to_h(F.gelu(self.mlp.dense_h_to_4h(self.post_attention_layernorm(x)), approximate="tanh"))

    def loss(logits, labels):
        if tp > 1:
            return vocab_parallel_cross_entropy(logits, labels).mean()
        return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))

    specs = [lambda t: t, TiedLayerSpec("embed", EmbeddingPipe, tied_weight_attr="word_embeddings_weight")]
    specs += [LayerSpec(Layer) for _ in range(L)] + [LayerSpec(nn.LayerNorm, H)]
    specs += [TiedLayerSpec("embed", EmbeddingPipe, forward_fn=lambda e, x: copy_in(x) @ e.word_embeddings.weight.t(),
                            tied_weight_attr="word_embeddings_weight")]
    grid = {"num_stages": stages} if tp == 1 else {
        "topology": PipeModelDataParallelTopology(num_pp=stages, num_mp=tp, num_dp=torch.distributed.get_world_size() // (stages * tp))}
    return PipelineModule(layers=specs, partition_method="uniform", loss_fn=loss, **grid)


def pipe_batches(sample, it):
    """Iteration `it`'s global batch in pretrain_gpt's order as the pipeline engine takes it: (inputs, labels) per micro-batch."""
    for m in range(GLOBAL // MICRO):
        first = (it - 1) * GLOBAL + m * MICRO
        b = torch.tensor(np.stack([sample(first + i) for i in range(MICRO)]).astype(np.int64))
        yield b[:, :-1], b[:, 1:]


class TensorParallelMpu:
    """megatron-core's process groups as DeepSpeed's engine asks for them (Megatron-DeepSpeed's
    mpu): its model parallelism is the tensor parallelism here."""

    def __init__(self):
        from megatron.core import parallel_state as ps
        self.get_model_parallel_rank = ps.get_tensor_model_parallel_rank
        self.get_model_parallel_world_size = ps.get_tensor_model_parallel_world_size
        self.get_model_parallel_group = ps.get_tensor_model_parallel_group
        self.get_model_parallel_src_rank = ps.get_tensor_model_parallel_src_rank
        for name in ("rank", "world_size", "group", "src_rank"):
            setattr(self, f"get_tensor_model_parallel_{name}", getattr(ps, f"get_tensor_model_parallel_{name}"))
        for name in ("rank", "world_size", "group"):
            setattr(self, f"get_data_parallel_{name}", getattr(ps, f"get_data_parallel_{name}"))
            setattr(self, f"get_pipeline_model_parallel_{name}", getattr(ps, f"get_pipeline_model_parallel_{name}"))


def cosine_engine(world, stage, iters, warmup, min_lr, tp=1, **config):
    """DeepSpeed's engine over megatron-core's GPTModel (other initial weights than pretrain_gpt's, so a
    load must replace them), torch's AdamW in Megatron's groups and megatron-core's cosine scheduler
    with warm-up over `iters` iterations (it counts samples), at ZeRO `stage`; with tp > 1 this rank's
    tensor-parallel part (start_worker's groups); returns (engine, scheduler)."""
    import deepspeed
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    model = megatron_cpu.gpt(L, H, HEADS, SEQ, VOCAB, seed=77, tp=tp)
    opt = adamw_groups(model)
    steps = iters * GLOBAL
    sched = OptimizerParamScheduler(opt, init_lr=0.0, max_lr=LR, min_lr=min_lr, lr_warmup_steps=warmup * GLOBAL, lr_decay_steps=steps,
                                    lr_decay_style="cosine", start_wd=0.01, end_wd=0.01, wd_incr_steps=steps, wd_incr_style="constant")
    cfg = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GLOBAL // (MICRO * (world // tp)),
           "zero_optimization": {"stage": stage}, "gradient_clipping": 0.0, "steps_per_print": 10 ** 9, **config}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, lr_scheduler=sched, config=cfg, dist_init_required=False,
                                           mpu=TensorParallelMpu() if tp > 1 else None)
    return engine, sched


def continue_run(engine, sched, loaded, sample, rank, world, first, count, path, tp=1):
    """After engine.load_checkpoint returned `loaded` (its path and client state): the load's
    outcome and the losses of iterations first..first+count-1, written by rank 0 to `path` as JSON."""
    where, client = loaded
    state = {"loaded": where is not None, "iteration": client.get("iteration") if client else None, "global_steps": engine.global_steps,
             "scheduler_steps": sched.num_steps, "losses": {}}
    for it in range(first, first + count):
        state["losses"][it] = Run.iteration(engine, sample, it, rank, world, lr_kwargs={"increment": GLOBAL}, tp=tp)
    if rank == 0:
        with open(path, "w") as f:
            json.dump(state, f)


def spawn_engines(worker, cases, work):
    """worker(rank, world, jobs, out) spawned once per rank count of `cases` ((world, job) pairs),
    each job's continue_run written to out/{job}.json; returns those states by case, the losses
    keyed by iteration."""
    import torch.multiprocessing as mp
    from reference_env import fresh_dir
    states = {}
    for world in sorted({w for w, _ in cases}):
        out = fresh_dir(os.path.join(work, f"ds{world}"))
        mp.spawn(worker, args=(world, [j for w, j in cases if w == world], out), nprocs=world, join=True)
        for stage in (j for w, j in cases if w == world):
            with open(os.path.join(out, f"{stage}.json")) as f:
                st = json.load(f)
            st["losses"] = {int(k): v for k, v in st["losses"].items()}
            states[(world, stage)] = st
    return states


def start_worker(out, rank, world, tp=1):
    """A spawned rank: its environment for DeepSpeed, one thread, and the Gloo group (megatron_cpu,
    with tp-way tensor parallelism)."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    megatron_cpu.init(out, rank, world, tp)


def end_worker():
    torch.distributed.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # past DeepSpeed's and Gloo's teardown: everything is on disk
