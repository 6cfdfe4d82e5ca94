"""Reference test: DeepSpeed's universal-checkpoint converter (ds_to_universal)
reads what pretrain_gpt --ckpt-format deepspeed writes, and DeepSpeed's engine
continues the run from the universal checkpoint.

pretrain_gpt trains the tiny GPT for N + K iterations at ZeRO 1 (1 and 2 ranks),
2 (2 ranks) and 3 (1 and 2 ranks), saving DeepSpeed's checkpoint at N; the same run saved in Megatron's
format (with zerolm's Adam state) gives the truth at N. Then, with DeepSpeed 0.19
on the CPU:
  - `python -m deepspeed.checkpoint.ds_to_universal` (strict, as it runs by default)
    converts global_stepN; every parameter's fp32.pt, exp_avg.pt and exp_avg_sq.pt
    equal pretrain_gpt's weights and moments exactly (tolerance 0);
  - DeepSpeed's engine (megatron-core's GPTModel with other initial weights, torch's
    AdamW in Megatron's two groups, megatron-core's scheduler) with
    "checkpoint": {"load_universal": true} at the same stage and rank count loads it
    and trains K more iterations: pretrain_gpt's losses within 1e-5 relative; so
    does a ZeRO-2 engine on one rank from the 2-rank ZeRO-1 checkpoint. At
    ZeRO 3, DeepSpeed 0.19.8's universal loader hands one step tensor to every
    sub-group (AdamW then counts each step once per group) and gives every group
    the first group's hyperparameters; the test undoes both after the load (each
    state its own step, each group the multipliers the engine was built with, the
    scheduler setting lr and weight decay), as a user must, and says so.
The files of --bf16 and --fp16 runs (ZeRO 1 on one rank, ZeRO 3 on two) convert
too, with the run's fp32 weights and moments exactly.
And tensor parallelism: a TP 2 run's files convert, the converter's merged fp32
weights equal what convert_gpt reads from the same files (the merge patterns of
the row-parallel and replicated tensors are right), and engines at TP 2 (two
processes, megatron-core's TP 2 GPTModel) and at TP 1 load the universal
checkpoint and continue with the uninterrupted TP 2 run's losses.

  deepspeed_universal_checkpoint.py BIN_DIR DATA_DIR WORK_DIR    (exit 77: a package is missing)
"""
import json
import os
import subprocess
import sys

from reference_env import check, fresh_dir
from deepspeed_run import GLOBAL, Run, continue_run, cosine_engine, ds_to_universal, end_worker, spawn_engines, start_worker
import torch
from megatron_samples import sample_reader

BIN, DATA_DIR, WORK = sys.argv[1:4]
N, K, WARMUP, MIN_LR = 3, 3, 2, 3e-4
RUN = Run(BIN, DATA_DIR, WORK, iters=N + K)
SCHEDULE = ("--lr-decay-style", "cosine", "--lr-warmup-iters", str(WARMUP), "--min-lr", str(MIN_LR))
CASES = [(1, 1), (2, 1), (2, 2), (1, 3), (2, 3)]
TOLERANCE = 1e-5
TAG = f"global_step{N}"


def converted(dst, name, state, shape):
    """The converter's tensor for one parameter: a dict with 'param' (ZeRO 1-2) or a flat tensor (ZeRO 3)."""
    t = torch.load(os.path.join(dst, TAG, "zero", name, state + ".pt"), weights_only=False)
    return (t["param"] if isinstance(t, dict) else t).reshape(shape)


def repair_stage3(engine, sched, multipliers):
    """DeepSpeed 0.19.8's ZeRO-3 universal load: one step tensor shared by every sub-group, and the
    first group's hyperparameters in every group. Give each state its own step, each group the
    multipliers the engine was built with (not ours), and let the scheduler set lr and weight decay."""
    opt = engine.optimizer.optimizer
    for st in opt.state.values():
        if torch.is_tensor(st.get("step")):
            st["step"] = st["step"].clone()
    for group, mult in zip(opt.param_groups, multipliers):
        group.update(mult)
    sched.step(increment=0)


def worker(rank, world, jobs, out):
    start_worker(out, rank, world)
    sample = sample_reader(RUN.data, RUN.index)
    for job in jobs:  # "STAGE-SOURCE": the universal checkpoint of case SOURCE loaded at ZeRO STAGE
        stage, source = int(job.split("-")[0]), job.split("-", 1)[1]
        engine, sched = cosine_engine(world, stage, N + K, WARMUP, MIN_LR, checkpoint={"load_universal": True})
        multipliers = [{k: g[k] for k in ("wd_mult", "lr_mult")} for g in engine.optimizer.optimizer.param_groups]
        loaded = engine.load_checkpoint(os.path.join(WORK, "univ_" + source), tag=TAG)
        if stage == 3:
            repair_stage3(engine, sched, multipliers)
        continue_run(engine, sched, loaded, sample, rank, world, N + 1, K, os.path.join(out, f"{job}.json"))
    end_worker()



def tp_worker(rank, world, _jobs, out):
    """TP 2 x DP 1 at ZeRO 1: the TP 2 run's universal checkpoint loaded by an engine of the same layout."""
    start_worker(out, rank, world, tp=2)
    sample = sample_reader(RUN.data, RUN.index)
    engine, sched = cosine_engine(world, 1, N + K, WARMUP, MIN_LR, tp=2, checkpoint={"load_universal": True})
    loaded = engine.load_checkpoint(os.path.join(WORK, "univ_tp2"), tag=TAG)
    continue_run(engine, sched, loaded, sample, rank, world, N + 1, K, os.path.join(out, "tp2.json"), tp=2)
    end_worker()


def conversions(cases=CASES, precision=None):
    """Every case converted, its tensors against the truth; returns (ok, our losses by case).
    precision: "bf16" or "fp16", the files of DeepSpeed's engine of that precision."""
    ok, ours, truth = True, {}, {}
    for world, stage in cases:
        name = f"w{world}_z{stage}" + (f"_{precision}" if precision else "")
        d, u = os.path.join(WORK, "ours_" + name), os.path.join(WORK, "univ_" + name)
        common = ("--nproc-per-node", str(world), "--zero-stage", str(stage), "--save-interval", str(N)) + ((f"--{precision}",) if precision else ())
        RUN.pretrain(d, *common, "--ckpt-format", "deepspeed", schedule=SCHEDULE)
        ours[name] = Run.losses(d)
        t = os.path.join(WORK, "truth_" + name)  # stages sum gradients in their own order: the truth of the same stage
        RUN.pretrain(t, *common, "--ckpt-format", "torch", schedule=SCHEDULE)
        sd = torch.load(os.path.join(t, f"iter_{N:07d}", "mp_rank_00", "model_optim_rng.pt"), weights_only=False)
        weights = {k: v.float() for k, v in sd["model"].items() if torch.is_tensor(v)}
        want = {"fp32": weights, **{s: {k: sd["zerolm_optimizer"][s][k] for k in weights} for s in ("exp_avg", "exp_avg_sq")}}
        rc, log = ds_to_universal(d, u, TAG)
        if not check(rc == 0, f"{name}: ds_to_universal converts it" + ("" if rc == 0 else f":\n{log}")):
            ok = False
            continue
        diff = max((converted(u, p, s, w.shape) - w).abs().max().item() for s, ws in want.items() for p, w in ws.items())
        ok &= check(diff == 0, f"{name}: its fp32, exp_avg and exp_avg_sq of all {len(want['fp32'])} parameters equal pretrain_gpt's "
                    f"(largest difference {diff:.1e})")
    return ok, ours


def tensor_parallel(ours):
    """TP 2: the converter's merged weights against convert_gpt's reading of the same files, and a
    TP 2 engine continuing from it; ours["tp2"]: the uninterrupted TP 2 run's losses."""
    d, u, m = (os.path.join(WORK, x) for x in ("ours_tp2", "univ_tp2", "merged_tp2"))
    RUN.pretrain(d, "--nproc-per-node", "2", "--tensor-model-parallel-size", "2", "--zero-stage", "1", "--exit-interval", str(N),
                 "--ckpt-format", "deepspeed", schedule=SCHEDULE)  # saved at N, which `latest` names
    rc, log = ds_to_universal(d, u, TAG)
    if not check(rc == 0, "tp2: ds_to_universal converts a TP 2 checkpoint" + ("" if rc == 0 else f":\n{log}")):
        return False
    r = subprocess.run([os.path.join(BIN, "convert_gpt"), "--load", d, "--vocab-file", RUN.vocab_file, "--export-megatron", m, "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    sd = torch.load(os.path.join(m, f"iter_{N:07d}", "mp_rank_00", "model_optim_rng.pt"), weights_only=False)["model"]
    want = {k: v for k, v in sd.items() if torch.is_tensor(v)}
    diff = max((converted(u, p, "fp32", w.shape) - w).abs().max().item() for p, w in want.items())
    ok = check(diff == 0, f"tp2: its merged fp32 weights of all {len(want)} parameters (row-parallel, replicated, column-parallel) equal "
               f"convert_gpt's reading of the same files (largest difference {diff:.1e})")
    # DeepSpeed's engine at TP 2 loads it (each rank cutting its part) and continues as the uninterrupted TP 2 run.
    whole = os.path.join(WORK, "ours_tp2_whole")
    RUN.pretrain(whole, "--nproc-per-node", "2", "--tensor-model-parallel-size", "2", "--zero-stage", "1", schedule=SCHEDULE)
    want = ours["tp2"] = Run.losses(whole)
    import torch.multiprocessing as mp
    out = fresh_dir(os.path.join(WORK, "ds_tp2"))
    mp.spawn(tp_worker, args=(2, None, out), nprocs=2, join=True)
    with open(os.path.join(out, "tp2.json")) as f:
        ds = json.load(f)
    got = {int(k): v for k, v in ds["losses"].items()}
    diff = max(abs(got[it] - want[it]) / abs(want[it]) for it in range(N + 1, N + K + 1))
    return ok & check(ds["loaded"] and ds["iteration"] == N and ds["scheduler_steps"] == N * GLOBAL and diff <= TOLERANCE,
                      f"tp2: DeepSpeed's engine at TP 2 loads the universal checkpoint and continues iterations {N + 1}-{N + K} with "
                      f"pretrain_gpt's losses within {diff:.1e} (relative)")


def main():
    fresh_dir(WORK)
    ok, ours = conversions()
    for precision in ("bf16", "fp16"):  # the files of DeepSpeed's engines of those precisions (trained in fp32 on the CPU)
        ok &= conversions([(1, 1), (2, 3)], precision)[0]
    ok &= tensor_parallel(ours)
    if not ok:
        sys.exit(1)
    # Each case at its own layout, w2_z1's on one rank at ZeRO 2 (what universal checkpoints are for), and the TP 2 run's on
    # one rank (TP 1; the tiny vocabulary is padded alike at TP 1 and 2).
    jobs = [(world, f"{stage}-w{world}_z{stage}") for world, stage in CASES] + [(1, "2-w2_z1"), (1, "1-tp2")]
    for (world, job), ds in spawn_engines(worker, jobs, WORK).items():
        stage, source = int(job.split("-")[0]), job.split("-", 1)[1]
        want = ours[source]
        diff = max(abs(ds["losses"][it] - want[it]) / abs(want[it]) for it in range(N + 1, N + K + 1))
        ok &= check(ds["loaded"] and ds["iteration"] == N and ds["global_steps"] == N and ds["scheduler_steps"] == N * GLOBAL and diff <= TOLERANCE,
                    f"{source} at ZeRO {stage} on {world} rank(s): DeepSpeed's engine loads the universal checkpoint"
                    f"{' (its ZeRO-3 step and groups repaired)' if stage == 3 else ''} and continues iterations {N + 1}-{N + K} with "
                    f"pretrain_gpt's losses within {diff:.1e} (relative)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
