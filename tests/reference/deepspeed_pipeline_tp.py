"""Reference test: DeepSpeed's pipeline engine with tensor parallelism, in both
directions. Megatron-DeepSpeed runs GPTModelPipe on a (pipe, data, model) grid,
and its checkpoint then has one layer_XX-model_TT-model_states.pt per layer
and tensor-parallel rank, and the model and ZeRO files of each rank of the
grid's model-parallel group (mp_rank_MM, MM = stage x TP + TT).

DeepSpeed runs on the CPU (DS_ACCELERATOR=cpu, Gloo, four processes: TP 2 x
PP 2) over a PipelineModule laid out as GPTModelPipe, each layer cut as
Megatron cuts it (deepspeed_run.gpt_pipe), with torch's AdamW in Megatron's two
groups, fp32, a constant learning rate, on the samples pretrain_gpt reads. At
ZeRO 0 and 1:
  - reads: the engine trains N iterations, saves, and trains K more;
    convert_gpt --dump-logits of its checkpoint gives the engine's logits at
    the save within 1e-5, and pretrain_gpt --load on one process continues
    with the engine's losses within 1e-5 relative, Adam's moments included
    (each tensor-parallel rank's weights differ, so parts read in the wrong
    order or from the wrong files fail the check);
  - writes: pretrain_gpt at TP 2 x PP 2 with --ckpt-format deepspeed saves
    iteration N, and the engine (other initial weights) load_checkpoint's it
    and continues with pretrain_gpt's losses within 1e-5 relative.

  deepspeed_pipeline_tp.py BIN_DIR DATA_DIR WORK_DIR    (exit 77: a package is missing)
"""
import json
import os
import shutil
import subprocess
import sys
import zlib

from reference_env import check, fresh_dir
from deepspeed_run import GLOBAL, H, L, MICRO, TOKENS, Run, adamw_groups, end_worker, gpt_pipe, megatron_args, pipe_batches, start_worker
import numpy as np
import torch
import torch.multiprocessing as mp
from megatron_samples import sample_reader

BIN, DATA_DIR, WORK = sys.argv[1:4]
N, K, TP, PP = 2, 3, 2, 2
WORLD = TP * PP
RUN = Run(BIN, DATA_DIR, WORK, iters=N + K)
TOLERANCE = 1e-5
TAG = f"global_step{N}"
LAYOUT = ("--nproc-per-node", str(WORLD), "--tensor-model-parallel-size", str(TP), "--pipeline-model-parallel-size", str(PP))


def pipe_engine(rank, zero, seed, out, **config):
    """This rank's pipeline engine at ZeRO `zero`, its weights drawn by name (N(0, 0.02); LayerNorm weights 1 + that):
    the parameters Megatron cuts from a generator of this tensor-parallel rank's (the parts differ), the whole ones
    alike on every rank, as they must be."""
    start_worker(out, rank, WORLD, tp=TP)
    import deepspeed
    from megatron.core import parallel_state
    deepspeed.init_distributed(dist_backend="gloo")
    pipe = gpt_pipe(PP, tp=TP)
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


def reads_worker(rank, zero, out):
    engine, pipe = pipe_engine(rank, zero, 5, out)
    sample = sample_reader(RUN.data, RUN.index)
    losses = {}
    ckpt = os.path.join(out, "ckpt")
    for it in range(1, N + K + 1):
        losses[it] = engine.train_batch(pipe_batches(sample, it)).item()
        if it == N:
            engine.save_checkpoint(ckpt, client_state={"args": megatron_args(N, pp=PP, tp=TP), "iteration": N, "checkpoint_version": 3.0})
            want = logits_at(pipe, rank)
            if rank == WORLD - TP:
                torch.save(want, ckpt + ".logits.pt")
    if rank == WORLD - 1:
        with open(ckpt + ".losses.json", "w") as f:
            json.dump(losses, f)
    end_worker()


def writes_worker(rank, zero, out, ckpt, universal):
    engine, _ = pipe_engine(rank, zero, 99, out, **({"checkpoint": {"load_universal": True}} if universal else {}))
    where, client = engine.load_checkpoint(ckpt, tag=TAG)
    sample = sample_reader(RUN.data, RUN.index)
    state = {"loaded": where is not None, "iteration": client.get("iteration") if client else None, "global_steps": engine.global_steps,
             "losses": {it: engine.train_batch(pipe_batches(sample, it)).item() for it in range(N + 1, N + K + 1)}}
    if rank == WORLD - 1:
        with open(os.path.join(out, "state.json"), "w") as f:
            json.dump(state, f)
    end_worker()


def continued(ckpt, name, zero, universal=False):
    """The state of the engine at ZeRO `zero` after loading `ckpt` (TAG), and its losses of iterations N+1..N+K."""
    out = fresh_dir(os.path.join(WORK, name))
    mp.spawn(writes_worker, args=(zero, out, ckpt, universal), nprocs=WORLD, join=True)
    with open(os.path.join(out, "state.json")) as f:
        ds = json.load(f)
    ds["losses"] = {int(k): v for k, v in ds["losses"].items()}
    return ds


def ours_ckpt(zero):
    return os.path.join(WORK, f"ours_tp{TP}_pp{PP}_z{zero}")


def worst(ours, theirs):
    return max(abs(ours[it] - theirs[it]) / abs(theirs[it]) for it in range(N + 1, N + K + 1))


def logits_of(dir_):
    out = os.path.join(WORK, "logits.txt")
    subprocess.run([os.path.join(BIN, "convert_gpt"), "--load", dir_, "--dump-logits", out, "--tokens",
                    " ".join(str(int(x)) for x in TOKENS[0]), "-q"], check=True)
    return torch.tensor(np.loadtxt(out, dtype=np.float64), dtype=torch.float32)


def reads(zero):
    out = fresh_dir(os.path.join(WORK, f"ds_reads_z{zero}"))
    mp.spawn(reads_worker, args=(zero, out), nprocs=WORLD, join=True)
    ckpt = os.path.join(out, "ckpt")
    files = sorted(os.listdir(os.path.join(ckpt, TAG)))
    diff = (logits_of(ckpt) - torch.load(ckpt + ".logits.pt")).abs().max().item()
    ok = check(diff <= TOLERANCE, f"z{zero}: convert_gpt --load of the engine's TP {TP} x PP {PP} checkpoint ({', '.join(files)}): logits "
               f"within {diff:.1e} of the engine's")
    with open(ckpt + ".losses.json") as f:
        theirs = {int(k): v for k, v in json.load(f).items()}
    resumed = os.path.join(WORK, f"resumed_z{zero}")
    log = RUN.pretrain(resumed, "--load", ckpt, "--zero-stage", str(zero))
    ours = Run.losses(resumed)
    diff = worst(ours, theirs)
    return ok & check("DeepSpeed checkpoint" in log and "Adam's moments and step" in log and sorted(ours) == list(range(N + 1, N + K + 1))
                      and diff <= TOLERANCE, f"z{zero}: pretrain_gpt --load of it on one process continues iterations {N + 1}-{N + K} with "
                      f"the engine's losses within {diff:.1e} (relative), Adam's moments read")


def writes(zero):
    RUN.pretrain(ours_ckpt(zero), *LAYOUT, "--zero-stage", str(zero), "--ckpt-format", "deepspeed", "--save-interval", str(N))
    ours = Run.losses(ours_ckpt(zero))
    files = sorted(os.listdir(os.path.join(ours_ckpt(zero), TAG)))
    ds = continued(ours_ckpt(zero), f"ds_writes_z{zero}", zero)
    diff = worst(ds["losses"], ours)
    return check(ds["loaded"] and ds["iteration"] == N and ds["global_steps"] == N and diff <= TOLERANCE,
                 f"z{zero}: the engine at TP {TP} x PP {PP} loads pretrain_gpt's {', '.join(files)} and continues iterations {N + 1}-{N + K} "
                 f"with pretrain_gpt's losses within {diff:.1e} (relative)")


# The pipeline module's names of a layer's parameters -> megatron-core's.
CORE_NAMES = {"input_layernorm": "input_layernorm", "self_attention.query_key_value": "self_attention.linear_qkv",
              "self_attention.dense": "self_attention.linear_proj", "post_attention_layernorm": "pre_mlp_layernorm",
              "mlp.dense_h_to_4h": "mlp.linear_fc1", "mlp.dense_4h_to_h": "mlp.linear_fc2"}


def core_name(pipe_name):
    head, rest = pipe_name.split(".", 1)
    if head == "tied_modules":
        return "embedding." + rest.split(".", 1)[1]
    if int(head) == 2 + L:
        return "decoder.final_layernorm." + rest
    sub, kind = rest.rsplit(".", 1)
    return f"decoder.layers.{int(head) - 2}.{CORE_NAMES[sub]}.{kind}"


def universal():
    """DeepSpeed's ds_to_universal (strict, as it runs by default) on pretrain_gpt's TP 2 x PP 2 ZeRO-1 files: its merged fp32
    weights equal convert_gpt's reading of the same files, and the engine at TP 2 x PP 2 loading the universal checkpoint
    continues with pretrain_gpt's losses."""
    src, dst, merged = ours_ckpt(1), os.path.join(WORK, "universal"), os.path.join(WORK, "merged")
    r = subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", os.path.join(src, TAG), "--output_folder",
                        os.path.join(dst, TAG), "--num_extract_workers", "1", "--num_merge_workers", "1"],
                       capture_output=True, text=True, env=dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1"))
    if not check(r.returncode == 0, "universal: ds_to_universal converts pretrain_gpt's TP 2 x PP 2 checkpoint" +
                 ("" if r.returncode == 0 else ":\n" + (r.stderr + r.stdout)[-1500:])):
        return False
    with open(os.path.join(dst, "latest"), "w") as f:
        f.write(TAG)
    at_n = os.path.join(WORK, "ours_at_n")  # the run's files with `latest` naming iteration N's save, for convert_gpt
    shutil.copytree(src, at_n)
    with open(os.path.join(at_n, "latest"), "w") as f:
        f.write(TAG)
    os.remove(os.path.join(at_n, "latest_checkpointed_iteration.txt"))
    subprocess.run([os.path.join(BIN, "convert_gpt"), "--load", at_n, "--vocab-file", RUN.vocab_file, "--export-megatron", merged, "-q"], check=True)
    want = torch.load(os.path.join(merged, f"iter_{N:07d}", "mp_rank_00", "model_optim_rng.pt"), weights_only=False)["model"]
    names = sorted(n for n in os.listdir(os.path.join(dst, TAG, "zero")) if os.path.isdir(os.path.join(dst, TAG, "zero", n)))
    got = {core_name(n): torch.load(os.path.join(dst, TAG, "zero", n, "fp32.pt"), weights_only=False)["param"] for n in names}
    same = set(got) == {k for k, v in want.items() if torch.is_tensor(v) and not k.endswith("_extra_state")}
    diff = max((got[k].reshape(want[k].shape) - want[k]).abs().max().item() for k in got) if same else float("inf")
    ok = check(same and diff == 0, f"universal: its merged fp32 weights of all {len(names)} parameters (the tied embedding from the first "
               f"stage; row-parallel, replicated and column-parallel parts) equal convert_gpt's reading (largest difference {diff:.1e})")
    ds = continued(dst, "ds_universal", 1, universal=True)
    diff = worst(ds["losses"], Run.losses(src))
    return ok & check(ds["loaded"] and ds["iteration"] == N and diff <= TOLERANCE, f"universal: the engine at TP {TP} x PP {PP} loads it and "
                      f"continues iterations {N + 1}-{N + K} with pretrain_gpt's losses within {diff:.1e} (relative)")


def main():
    fresh_dir(WORK)
    RUN.pretrain(os.path.join(WORK, "index_run"))  # caches the sample index of N + K iterations, which DeepSpeed trains on
    ok = True
    for zero in (0, 1):
        ok &= reads(zero)
        ok &= writes(zero)
    ok &= universal()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
