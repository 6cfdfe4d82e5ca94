"""Reference test: DeepSpeed's pipeline engine with tensor parallelism, in both
directions. Megatron-DeepSpeed runs GPTModelPipe on a (pipe, data, model) grid,
and its checkpoint then has one layer_XX-model_TT-model_states.pt per layer
and tensor-parallel rank, and the model and ZeRO files of each rank of the
grid's model-parallel group (mp_rank_MM, MM = stage x TP + TT).

DeepSpeed runs on the CPU (DS_ACCELERATOR=cpu, Gloo, four processes: TP 2 x
PP 2) over a PipelineModule laid out as GPTModelPipe, each layer cut as
Megatron cuts it (deepspeed_run.gpt_pipe), with torch's AdamW in Megatron's two
groups, fp32 unless said, a constant learning rate, on the samples pretrain_gpt
reads. At ZeRO 0 and 1:
  - reads: the engine trains N iterations, saves, and trains K more;
    convert_gpt --dump-logits of its checkpoint gives the engine's logits at
    the save within 1e-5, and pretrain_gpt --load on one process continues
    with the engine's losses within 1e-5 relative, Adam's moments included
    (each tensor-parallel rank's weights differ, so parts read in the wrong
    order or from the wrong files fail the check);
  - writes: pretrain_gpt at TP 2 x PP 2 with --ckpt-format deepspeed saves
    iteration N, and the engine (other initial weights) load_checkpoint's it
    and continues with pretrain_gpt's losses within 1e-5 relative;
  - universal: DeepSpeed's ds_to_universal (strict) converts pretrain_gpt's
    ZeRO-1 files, its merged fp32 weights equal convert_gpt's reading of
    them exactly, and the engine continues from the universal checkpoint
    with pretrain_gpt's losses within 1e-5 relative, at TP 2 x PP 2 and in
    two other layouts, TP 1 x PP 2 and TP 2 x PP 1 (each cutting the
    tensors by the patterns in the files);
  - bf16 and fp16 (ZeRO 1): the 16-bit engine's own checkpoint (bf16:
    BF16_Optimizer's bf16_zero_pp_rank_* files; fp16: ZeRO 1's with its loss
    scaler, the CPU accelerator's fp16 check answered yes), converted by
    ds_to_universal, gives the fp32 master weights convert_gpt reads,
    exactly; pretrain_gpt --load takes its moments; the engine loads
    pretrain_gpt's files of that precision and saves them again alike (fp32
    partitions, moments, step), and continues within 1e-4 relative of
    pretrain_gpt's losses in that precision (bf16 with the moments zeroed in
    the files: 4.6e-3, measured once);
  - fp16 at ZeRO 0: FP16_Optimizer's state in each stage's model file (flat
    fp32 groups, moments, loss scale), both ways within 1e-4 relative, the
    engine saving pretrain_gpt's files again alike. DeepSpeed 0.19.8 does not
    scale the loss on this path but unscales the gradients all the same
    (upstream pull request 8393): the test applies that pull request's fix;
    without it the two sides parted by 3.2e-3 and 1.3e-2.

With TP = PP = 2 a file named by stage x PP + TT instead of stage x TP + TT
would be the same file; the one-TP pipeline cases of deepspeed_checkpoint_reads
and _writes (TP 1 x PP 2, ZeRO 1) tell the two apart (with the rule changed to
stage x PP + TT in reader and writer, both fail: Adam starts afresh on reading,
and DeepSpeed's engine finds no zero_pp_rank_0_mp_rank_01 file).

  deepspeed_pipeline_tp.py BIN_DIR DATA_DIR WORK_DIR    (exit 77: a package is missing)
"""
import json
import os
import shutil
import subprocess
import sys
import zlib

from reference_env import check, fresh_dir
from deepspeed_run import (GLOBAL, H, L, MICRO, TOKENS, Run, adamw_groups, core_name, ds_to_universal, end_worker, gpt_pipe, megatron_args,
                           pipe_batches, start_worker, worst)
import torch
import torch.multiprocessing as mp
from megatron_samples import sample_reader

BIN, DATA_DIR, WORK = sys.argv[1:4]
N, K, TP, PP = 2, 3, 2, 2
WORLD = TP * PP
RUN = Run(BIN, DATA_DIR, WORK, iters=N + K)
TOLERANCE = 1e-5
MIXED_TOLERANCE = 1e-4  # two bf16 implementations (deepspeed_checkpoint_mixed.py's bound)
TAG = f"global_step{N}"
CONTINUED = range(N + 1, N + K + 1)
FP16_ZERO0 = "ZLM_TEST_FP16_ZERO0"  # set: the workers' engines run fp16 without ZeRO as on a GPU (fused_fp16_zero0)
LAYOUT = ("--nproc-per-node", str(WORLD), "--tensor-model-parallel-size", str(TP), "--pipeline-model-parallel-size", str(PP))


def pipe_engine(rank, zero, seed, out, layout=(TP, PP), **config):
    """This rank's pipeline engine at ZeRO `zero` in `layout` (TP, PP), its weights drawn by name (N(0, 0.02); LayerNorm weights 1 + that):
    the parameters Megatron cuts from a generator of this tensor-parallel rank's (the parts differ), the whole ones
    alike on every rank, as they must be."""
    tp, pp = layout
    start_worker(out, rank, tp * pp, tp=tp)
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    from megatron.core import parallel_state
    type(get_accelerator()).is_fp16_supported = lambda self: True  # the CPU accelerator says no (no mkldnn fp16); the math runs
    if os.environ.get(FP16_ZERO0):
        import deepspeed.runtime.engine as ds_engine
        ds_engine.FusedAdam = torch.optim.AdamW  # FP16_Optimizer is built over a fused Adam only: told that torch's AdamW is one
        # DeepSpeed 0.19.8 scales the loss before backward for its ZeRO optimizers only, while FP16_Optimizer.step divides
        # the gradients by the scale all the same: without ZeRO its fp16 updates use gradients 1/scale of the true ones
        # (upstream pull request 8393, open). The fix that pull request makes: the loss scaled for FP16_Optimizer too.
        plain_backward = ds_engine.DeepSpeedEngine.backward

        def backward(self, loss, *args, **kwargs):
            if self.fp16_enabled() and not self.zero_optimization():
                loss = loss * self.optimizer.loss_scale_config.cur_scale
            return plain_backward(self, loss, *args, **kwargs)
        ds_engine.DeepSpeedEngine.backward = backward
    deepspeed.init_distributed(dist_backend="gloo")
    pipe = gpt_pipe(pp, tp=tp)
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    with torch.no_grad():
        for name, p in pipe.named_parameters():
            whole = ("layernorm" in name or "position_embeddings" in name or name.startswith(f"{2 + L}.")  # the final LayerNorm
                     or name.endswith(("dense.bias", "dense_4h_to_h.bias")))
            g = torch.Generator().manual_seed(zlib.crc32(name.encode()) + seed + (0 if whole else 1000 * (tp_rank + 1)))
            p.copy_(0.02 * torch.randn(p.shape, generator=g))
            if p.dim() == 1 and ("layernorm.weight" in name or name == f"{2 + L}.weight"):
                p.add_(1.0)
    cfg = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GLOBAL // MICRO, "zero_optimization": {"stage": zero},
           "gradient_clipping": 0.0, "steps_per_print": 10 ** 9, **config}
    engine, _, _, _ = deepspeed.initialize(model=pipe, optimizer=adamw_groups(pipe), config=cfg, dist_init_required=False)
    return engine, pipe


def logits_at(pipe, rank):
    """The logits of TOKENS, each stage running its layers (the activation goes to the same tensor-parallel rank of
    the next stage), the last stage's vocabulary parts gathered; on the last stage, else None."""
    from megatron.core import parallel_state
    stage = rank // TP
    with torch.no_grad():
        h = TOKENS if stage == 0 else torch.empty(1, TOKENS.shape[1], H)
        if stage > 0:
            torch.distributed.recv(h, rank - TP)
        h = pipe(h)
        if stage < PP - 1:
            torch.distributed.send(h.contiguous(), rank + TP)
            return None
        parts = [torch.empty_like(h) for _ in range(TP)]
        torch.distributed.all_gather(parts, h.contiguous(), group=parallel_state.get_tensor_model_parallel_group())
        return torch.cat(parts, dim=-1)[0].float()


def pipe_universal_info():
    """What Megatron-DeepSpeed's GPTModelPipe adds to the client state for DeepSpeed's universal-checkpoint converter,
    written for this layout: the tensors every tensor-parallel rank holds whole, those cut along their inputs, and the
    tied embedding, which the first and the last stage both hold."""
    from deepspeed.checkpoint import constants as c
    return {c.UNIVERSAL_CHECKPOINT_VERSION_KEY: c.UNIVERSAL_CHECKPOINT_VERSION_VALUE,
            c.TP_REPLICATED_PARAMETER_PATTERNS: [r"tied_modules\.embed\.position_embeddings\.weight", r"\d+\.input_layernorm\.",
                                                 r"\d+\.post_attention_layernorm\.", r"\d+\.self_attention\.dense\.bias",
                                                 r"\d+\.mlp\.dense_4h_to_h\.bias", r"\d+\.(weight|bias)$"],
            c.PARAMETER_WITH_ROW_PARALLELISM_PATTERNS: [r"\d+\.self_attention\.dense\.weight", r"\d+\.mlp\.dense_4h_to_h\.weight"],
            c.PIPELINE_REPLICATED_PARAMETER_PATTERNS: [r"tied_modules\.embed\."]}


def reads_worker(rank, zero, out, config):
    engine, pipe = pipe_engine(rank, zero, 5, out, **config)
    sample = sample_reader(RUN.data, RUN.index)
    losses = {}
    ckpt = os.path.join(out, "ckpt")
    for it in range(1, N + K + 1):
        losses[it] = engine.train_batch(pipe_batches(sample, it)).item()
        if it == N:
            engine.save_checkpoint(ckpt, client_state={"args": megatron_args(N, pp=PP, tp=TP), "iteration": N, "checkpoint_version": 3.0,
                                                       "universal_checkpoint_info": pipe_universal_info()})
            want = None if config else logits_at(pipe, rank)  # (fp32 only: compared with the fp32 weights read)
            if rank == WORLD - TP and want is not None:
                torch.save(want, ckpt + ".logits.pt")
    if rank == WORLD - 1:
        with open(ckpt + ".losses.json", "w") as f:
            json.dump(losses, f)
    end_worker()


def writes_worker(rank, zero, out, ckpt, config, layout):
    engine, _ = pipe_engine(rank, zero, 99, out, layout, **config)
    where, client = engine.load_checkpoint(ckpt, tag=TAG)
    engine.save_checkpoint(os.path.join(out, "resaved"), tag=TAG)  # what it loaded, as it writes it
    sample = sample_reader(RUN.data, RUN.index)
    state = {"loaded": where is not None, "iteration": client.get("iteration") if client else None, "global_steps": engine.global_steps,
             "losses": {it: engine.train_batch(pipe_batches(sample, it)).item() for it in range(N + 1, N + K + 1)}}
    if rank == layout[0] * layout[1] - 1:
        with open(os.path.join(out, "state.json"), "w") as f:
            json.dump(state, f)
    end_worker()


def continued(ckpt, name, zero, config=None, layout=(TP, PP)):
    """The state of the engine at ZeRO `zero` (DeepSpeed `config` added) in `layout` (TP, PP) after loading `ckpt` (TAG), and
    its losses of iterations N+1..N+K; it saves what it loaded into WORK/name/resaved first."""
    out = fresh_dir(os.path.join(WORK, name))
    mp.spawn(writes_worker, args=(zero, out, ckpt, config or {}, layout), nprocs=layout[0] * layout[1], join=True)
    with open(os.path.join(out, "state.json")) as f:
        ds = json.load(f)
    ds["losses"] = {int(k): v for k, v in ds["losses"].items()}
    return ds


def ours_ckpt(zero):
    return os.path.join(WORK, f"ours_tp{TP}_pp{PP}_z{zero}")


def reads(zero):
    out = fresh_dir(os.path.join(WORK, f"ds_reads_z{zero}"))
    mp.spawn(reads_worker, args=(zero, out, {}), nprocs=WORLD, join=True)
    ckpt = os.path.join(out, "ckpt")
    files = sorted(os.listdir(os.path.join(ckpt, TAG)))
    diff = (RUN.logits(ckpt) - torch.load(ckpt + ".logits.pt")).abs().max().item()
    ok = check(diff <= TOLERANCE, f"z{zero}: convert_gpt --load of the engine's TP {TP} x PP {PP} checkpoint ({', '.join(files)}): logits "
               f"within {diff:.1e} of the engine's")
    with open(ckpt + ".losses.json") as f:
        theirs = {int(k): v for k, v in json.load(f).items()}
    resumed = os.path.join(WORK, f"resumed_z{zero}")
    log = RUN.pretrain(resumed, "--load", ckpt, "--zero-stage", str(zero))
    ours = Run.losses(resumed)
    diff = worst(ours, theirs, CONTINUED)
    return ok & check("DeepSpeed checkpoint" in log and "Adam's moments and step" in log and sorted(ours) == list(range(N + 1, N + K + 1))
                      and diff <= TOLERANCE, f"z{zero}: pretrain_gpt --load of it on one process continues iterations {N + 1}-{N + K} with "
                      f"the engine's losses within {diff:.1e} (relative), Adam's moments read")


def writes(zero):
    RUN.pretrain(ours_ckpt(zero), *LAYOUT, "--zero-stage", str(zero), "--ckpt-format", "deepspeed", "--save-interval", str(N))
    ours = Run.losses(ours_ckpt(zero))
    files = sorted(os.listdir(os.path.join(ours_ckpt(zero), TAG)))
    ds = continued(ours_ckpt(zero), f"ds_writes_z{zero}", zero)
    diff = worst(ds["losses"], ours, CONTINUED)
    return check(ds["loaded"] and ds["iteration"] == N and ds["global_steps"] == N and diff <= TOLERANCE,
                 f"z{zero}: the engine at TP {TP} x PP {PP} loads pretrain_gpt's {', '.join(files)} and continues iterations {N + 1}-{N + K} "
                 f"with pretrain_gpt's losses within {diff:.1e} (relative)")


def converted_equals_ours(src, name, what):
    """DeepSpeed's ds_to_universal (strict, as it runs by default) of src's TAG into WORK/name: whether it converts, and
    whether its merged fp32 weights of every parameter equal convert_gpt's reading of the same files exactly."""
    dst, merged, at_n = (os.path.join(WORK, name + x) for x in ("", "_merged", "_at_n"))
    rc, log = ds_to_universal(src, dst, TAG)
    if not check(rc == 0, f"{name}: ds_to_universal converts {what}" + ("" if rc == 0 else ":\n" + log)):
        return False
    with open(os.path.join(dst, "latest"), "w") as f:
        f.write(TAG)
    shutil.copytree(src, at_n)  # `latest` naming iteration N's save, for convert_gpt
    with open(os.path.join(at_n, "latest"), "w") as f:
        f.write(TAG)
    if os.path.exists(os.path.join(at_n, "latest_checkpointed_iteration.txt")):
        os.remove(os.path.join(at_n, "latest_checkpointed_iteration.txt"))
    subprocess.run([os.path.join(BIN, "convert_gpt"), "--load", at_n, "--vocab-file", RUN.vocab_file, "--export-megatron", merged, "-q"], check=True)
    want = torch.load(os.path.join(merged, f"iter_{N:07d}", "mp_rank_00", "model_optim_rng.pt"), weights_only=False)["model"]
    names = sorted(n for n in os.listdir(os.path.join(dst, TAG, "zero")) if os.path.isdir(os.path.join(dst, TAG, "zero", n)))
    got = {core_name(n): torch.load(os.path.join(dst, TAG, "zero", n, "fp32.pt"), weights_only=False)["param"] for n in names}
    same = set(got) == {k for k, v in want.items() if torch.is_tensor(v) and not k.endswith("_extra_state")}
    diff = max((got[k].reshape(want[k].shape) - want[k]).abs().max().item() for k in got) if same else float("inf")
    return check(same and diff == 0, f"{name}: its merged fp32 weights of all {len(names)} parameters (the tied embedding from the first "
                 f"stage; row-parallel, replicated and column-parallel parts) equal convert_gpt's reading (largest difference {diff:.1e})")


def universal():
    """ds_to_universal of pretrain_gpt's TP 2 x PP 2 ZeRO-1 files; the engine loading the universal checkpoint continues with
    pretrain_gpt's losses, in the layout the files were written in and in two others (what universal checkpoints are for: the
    patterns in the files tell the loader which tensors to cut how, and a wrong one changes the losses)."""
    if not converted_equals_ours(ours_ckpt(1), "universal", f"pretrain_gpt's TP {TP} x PP {PP} checkpoint"):
        return False
    ok = True
    for tp, pp in ((TP, PP), (1, PP), (TP, 1)):
        ds = continued(os.path.join(WORK, "universal"), f"ds_universal_tp{tp}_pp{pp}", 1, {"checkpoint": {"load_universal": True}}, (tp, pp))
        diff = worst(ds["losses"], Run.losses(ours_ckpt(1)), CONTINUED)
        ok &= check(ds["loaded"] and ds["iteration"] == N and diff <= TOLERANCE, f"universal: the engine at TP {tp} x PP {pp} loads it "
                    f"and continues iterations {N + 1}-{N + K} with pretrain_gpt's losses within {diff:.1e} (relative)")
    return ok


def tensors_of(x, path=""):
    """Every tensor in a nest of dicts, lists and tuples, by its path."""
    if torch.is_tensor(x):
        return {path: x}
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, (list, tuple)) else ()
    return {p: t for k, v in items for p, t in tensors_of(v, f"{path}.{k}").items()}


def tensors_alike(a, b):
    """(tensors compared, what differs): a and b must hold tensors at the same paths, each equal in dtype and value."""
    ta, tb = tensors_of(a), tensors_of(b)
    bad = [f"{p} (one side only)" for p in sorted(set(ta) ^ set(tb))]
    bad += [p for p in sorted(set(ta) & set(tb)) if ta[p].dtype != tb[p].dtype or not torch.equal(ta[p], tb[p])]
    return len(set(ta) & set(tb)), bad


def resaved_alike(ours, name, files, key):
    """(tensors compared, what differs) between `key` of each of pretrain_gpt's `files` (TAG) and of the engine's saving
    them again (continued(..., name) keeps that in WORK/name/resaved)."""
    count, bad = 0, []
    for f in files:
        c, d = tensors_alike(*(torch.load(os.path.join(d_, TAG, f), weights_only=False)[key]
                               for d_ in (ours, os.path.join(WORK, name, "resaved"))))
        count, bad = count + c, bad + [f"{f}: {p}" for p in d]
    return count, bad


# DeepSpeed's config and pretrain_gpt's flags of each 16-bit precision: fp16 from a scale of 1024 on both sides (no
# overflow, so every step counts).
PRECISIONS = {"bf16": ({"bf16": {"enabled": True}}, ("--bf16",)),
              "fp16": ({"fp16": {"enabled": True, "initial_scale_power": 10}}, ("--fp16", "--initial-loss-scale", "1024"))}


def mixed(precision):
    """DeepSpeed's 16-bit pipeline engine at TP 2 x PP 2, ZeRO 1 (bf16: BF16_Optimizer and its bf16_zero_pp_rank_* files; fp16:
    ZeRO 1's partitions with the loss scaler): convert_gpt reads its fp32 master weights as its own converter does, pretrain_gpt
    --load takes its moments; and it loads pretrain_gpt's files of that precision exactly (saving again what it loaded gives
    their fp32 weights, moments and step) and continues within MIXED_TOLERANCE of pretrain_gpt's losses."""
    config, flags = PRECISIONS[precision]
    out = fresh_dir(os.path.join(WORK, f"ds_reads_{precision}"))
    mp.spawn(reads_worker, args=(1, out, config), nprocs=WORLD, join=True)
    theirs = os.path.join(out, "ckpt")
    ok = converted_equals_ours(theirs, f"universal_{precision}", f"the {precision} engine's TP {TP} x PP {PP} checkpoint")
    log = RUN.pretrain(os.path.join(WORK, f"resumed_{precision}"), "--load", theirs, "--zero-stage", "1")
    ok &= check("Adam's moments and step" in log, f"{precision}: pretrain_gpt --load of it reads Adam's moments and step")

    ours = os.path.join(WORK, f"ours_{precision}")
    os.environ["ZLM_CPU_MIXED_PRECISION"] = "1"  # pretrain_gpt trains in 16 bits on the CPU too, as on a GPU
    RUN.pretrain(ours, *LAYOUT, *flags, "--zero-stage", "1", "--ckpt-format", "deepspeed", "--save-interval", str(N))
    del os.environ["ZLM_CPU_MIXED_PRECISION"]
    ds = continued(ours, f"ds_writes_{precision}", 1, config)
    files = sorted(f for f in os.listdir(os.path.join(ours, TAG)) if f.endswith("optim_states.pt"))
    count, bad = resaved_alike(ours, f"ds_writes_{precision}", files, "optimizer_state_dict")
    ok &= check(ds["loaded"] and count == 8 * len(files) and not bad, f"{precision}: the {precision} engine loads pretrain_gpt --{precision}'s "
                f"{', '.join(files)} and saves them again alike ({count} tensors: each file's fp32 partitions, moments and steps of its two groups"
                f"{'; differ: ' + ', '.join(bad[:5]) if bad else ''})")
    diff = worst(ds["losses"], Run.losses(ours), CONTINUED)
    return ok & check(diff <= MIXED_TOLERANCE, f"{precision}: it continues iterations {N + 1}-{N + K} within {diff:.1e} (relative) of "
                      f"pretrain_gpt --{precision}'s losses")


def fused_fp16_zero0():
    """fp16 at ZeRO 0: each stage's mp_rank_MM_model_states.pt holds FP16_Optimizer's state (the loss scale, one flat fp32
    vector per parameter group, the inner Adam's state over them), the wrapper DeepSpeed's engine builds over a fused Adam, as
    Megatron-DeepSpeed's on a GPU. On the CPU the engine's check is told that torch's AdamW is one (the same update), and
    DeepSpeed 0.19.8's missing loss scaling on that path is mended (FP16_ZERO0, pipe_engine). Both ways at TP 2 x PP 2,
    within MIXED_TOLERANCE of the other side's fp16 losses: pretrain_gpt --load of the engine's checkpoint (master weights,
    moments and scale read), and the engine loading pretrain_gpt --fp16's files, which it saves again alike."""
    config, flags = PRECISIONS["fp16"]
    os.environ[FP16_ZERO0] = os.environ["ZLM_CPU_MIXED_PRECISION"] = "1"
    try:
        out = fresh_dir(os.path.join(WORK, "ds_reads_fp16_z0"))
        mp.spawn(reads_worker, args=(0, out, config), nprocs=WORLD, join=True)
        theirs = os.path.join(out, "ckpt")
        with open(theirs + ".losses.json") as f:
            engine_losses = {int(k): v for k, v in json.load(f).items()}
        resumed = os.path.join(WORK, "resumed_fp16_z0")
        log = RUN.pretrain(resumed, *LAYOUT, *flags, "--load", theirs, "--zero-stage", "0")
        diff = worst(Run.losses(resumed), engine_losses, CONTINUED)
        ok = check("Adam's moments and step" in log and diff <= MIXED_TOLERANCE, f"fp16 z0: pretrain_gpt --load of the engine's "
                   f"FP16_Optimizer checkpoint reads Adam's moments and step and continues within {diff:.1e} of its losses (relative)")
        ours = os.path.join(WORK, "ours_fp16_z0")
        RUN.pretrain(ours, *LAYOUT, *flags, "--zero-stage", "0", "--ckpt-format", "deepspeed", "--save-interval", str(N))
        ds = continued(ours, "ds_writes_fp16_z0", 0, config)
    finally:
        del os.environ[FP16_ZERO0], os.environ["ZLM_CPU_MIXED_PRECISION"]
    files = sorted(f for f in os.listdir(os.path.join(ours, TAG)) if f.startswith("mp_rank_"))
    count, bad = resaved_alike(ours, "ds_writes_fp16_z0", files, "optimizer")
    diff = worst(ds["losses"], Run.losses(ours), CONTINUED)
    return ok & check(ds["loaded"] and count == 8 * len(files) and not bad and diff <= MIXED_TOLERANCE, f"fp16 z0: the engine loads pretrain_gpt --fp16's "
                      f"{', '.join(files)}, saves them again alike ({count} tensors: the flat fp32 groups, the moments and steps"
                      f"{'; differ: ' + ', '.join(bad[:5]) if bad else ''}) and continues within {diff:.1e} of its losses (relative)")


def main():
    fresh_dir(WORK)
    RUN.pretrain(os.path.join(WORK, "index_run"))  # caches the sample index of N + K iterations, which DeepSpeed trains on
    ok = True
    for zero in (0, 1):
        ok &= reads(zero)
        ok &= writes(zero)
    ok &= universal()
    ok &= mixed("bf16")
    ok &= mixed("fp16")
    ok &= fused_fp16_zero0()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
