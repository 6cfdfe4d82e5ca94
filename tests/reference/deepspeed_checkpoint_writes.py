"""Reference test: what pretrain_gpt --ckpt-format deepspeed writes, DeepSpeed's
own engine continues.

pretrain_gpt trains the tiny GPT for N + K iterations at ZeRO 0, 1, 2 and 3 on 1
and on 2 ranks (fp32, AdamW, weight decay, Megatron's cosine schedule with
warm-up), saving DeepSpeed's checkpoint every N. Then DeepSpeed 0.19's engine
on the CPU (DS_ACCELERATOR=cpu, Gloo), with megatron-core's GPTModel (other
initial weights), torch's AdamW in Megatron's two groups and megatron-core's
OptimizerParamScheduler as its lr_scheduler, at the same stage and rank count:
  - engine.load_checkpoint(DIR, tag=global_stepN) takes the module, the ZeRO
    partitions (fp32 weights, Adam's moments and step), the scheduler state,
    the step counters and the client state (iteration N);
  - K more iterations on the same samples give pretrain_gpt's losses of
    iterations N+1..N+K within 1e-5 relative (with the moments zeroed in the
    files, the second of them is off by 3e-3: the check can fail);
  - DeepSpeed's get_fp32_state_dict_from_zero_checkpoint reads the weights (ZeRO 1-3).
And pretrain_gpt --load of the same checkpoint continues with those losses too.
Tensor parallelism: pretrain_gpt at TP 2 (TP 2 x DP 1 at ZeRO 0-3, TP 2 x DP 2 at
ZeRO 1 and 3) writes one set of files per tensor-parallel rank, and DeepSpeed's
engine over megatron-core's TP 2 GPTModel (Gloo processes, megatron-core's groups
handed to it as Megatron-DeepSpeed's mpu) loads each rank's files and continues
with pretrain_gpt's losses.
Pipeline parallelism: pretrain_gpt over 2 stages at ZeRO 0 and 1 writes the pipeline
engine's files (layer_XX-model_00-model_states.pt, each stage's model and ZeRO
files), and DeepSpeed's pipeline engine over Megatron-DeepSpeed's GPTModelPipe
layout loads them and continues with pretrain_gpt's losses; so does
pretrain_gpt --load.

  deepspeed_checkpoint_writes.py BIN_DIR DATA_DIR WORK_DIR    (exit 77: a package is missing)
"""
import json
import os
import shutil
import sys

from reference_env import check, fresh_dir
from deepspeed_run import (GLOBAL, LR, MICRO, Run, adamw_groups, continue_run, cosine_engine, end_worker, gpt_pipe, pipe_batches, spawn_engines,
                           start_worker, worst)
import torch
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
from megatron_samples import sample_reader

BIN, DATA_DIR, WORK = sys.argv[1:4]
N, K, WARMUP, MIN_LR = 3, 3, 2, 3e-4
RUN = Run(BIN, DATA_DIR, WORK, iters=N + K)
CONTINUED = range(N + 1, N + K + 1)
SCHEDULE = ("--lr-decay-style", "cosine", "--lr-warmup-iters", str(WARMUP), "--min-lr", str(MIN_LR))
CASES = [(world, stage) for world in (1, 2) for stage in (0, 1, 2, 3)]
TOLERANCE = 1e-5


def ckpt_of(world, stage):
    return os.path.join(WORK, f"ours_w{world}_z{stage}")


def worker(rank, world, stages, out):
    start_worker(out, rank, world)
    sample = sample_reader(RUN.data, RUN.index)
    for stage in stages:
        engine, sched = cosine_engine(world, stage, N + K, WARMUP, MIN_LR)
        loaded = engine.load_checkpoint(ckpt_of(world, stage), tag=f"global_step{N}")
        continue_run(engine, sched, loaded, sample, rank, world, N + 1, K, os.path.join(out, f"{stage}.json"))
    end_worker()



# The TP 2 cases: (ranks, ZeRO stage); 2 ranks are TP 2 x DP 1, 4 ranks TP 2 x DP 2.
TP_CASES = [(2, 0), (2, 1), (2, 2), (2, 3), (4, 1), (4, 3)]


def tp_ckpt_of(world, stage):
    return os.path.join(WORK, f"ours_tp2_w{world}_z{stage}")


def tp_worker(rank, world, stages, out):
    start_worker(out, rank, world, tp=2)
    sample = sample_reader(RUN.data, RUN.index)
    for stage in stages:
        engine, sched = cosine_engine(world, stage, N + K, WARMUP, MIN_LR, tp=2)
        loaded = engine.load_checkpoint(tp_ckpt_of(world, stage), tag=f"global_step{N}")
        continue_run(engine, sched, loaded, sample, rank, world, N + 1, K, os.path.join(out, f"{stage}.json"), tp=2)
    end_worker()


def tensor_parallel_cases():
    """DeepSpeed's engine at TP 2 continues pretrain_gpt's TP 2 checkpoints (one set of files per tensor-parallel rank)."""
    import torch.multiprocessing as mp
    ok = True
    ours = {}
    for world, stage in TP_CASES:
        RUN.pretrain(tp_ckpt_of(world, stage), "--nproc-per-node", str(world), "--tensor-model-parallel-size", "2", "--zero-stage", str(stage),
                     "--ckpt-format", "deepspeed", "--save-interval", str(N), schedule=SCHEDULE)
        ours[(world, stage)] = Run.losses(tp_ckpt_of(world, stage))
    for world in sorted({w for w, _ in TP_CASES}):
        stages = [s for w, s in TP_CASES if w == world]
        out = fresh_dir(os.path.join(WORK, f"ds_tp2_w{world}"))
        mp.spawn(tp_worker, args=(world, stages, out), nprocs=world, join=True)
        for stage in stages:
            with open(os.path.join(out, f"{stage}.json")) as f:
                ds = json.load(f)
            theirs = {int(k): v for k, v in ds["losses"].items()}
            files = [f for f in os.listdir(os.path.join(tp_ckpt_of(world, stage), f"global_step{N}")) if f.endswith(".pt")]
            diff = worst(theirs, ours[(world, stage)], CONTINUED)
            ok &= check(ds["loaded"] and ds["iteration"] == N and ds["scheduler_steps"] == N * GLOBAL and diff <= TOLERANCE,
                        f"tp2_w{world}_z{stage}: DeepSpeed's engine at TP 2 x DP {world // 2} loads its {len(files)} files and continues "
                        f"iterations {N + 1}-{N + K} with pretrain_gpt's losses within {diff:.1e} (relative)")
    return ok


PIPE_STAGES = 2


def pipe_ckpt(zero):
    return os.path.join(WORK, f"ours_pp{PIPE_STAGES}_z{zero}")


def pipe_worker(rank, stages, zero, out):
    """DeepSpeed's pipeline engine (ZeRO `zero`) over Megatron-DeepSpeed's GPTModelPipe layout (other initial
    weights), torch's AdamW in Megatron's groups and megatron-core's cosine scheduler, stepped by the
    engine once per global batch of samples: loads pretrain_gpt's pipeline checkpoint and continues."""
    start_worker(out, rank, stages)
    import deepspeed
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(99)
    pipe = gpt_pipe(stages)
    opt = adamw_groups(pipe)
    steps = (N + K) * GLOBAL

    class PerSamples(OptimizerParamScheduler):  # the pipeline engine steps its scheduler without arguments
        def step(self, increment=GLOBAL):
            super().step(increment)
    sched = PerSamples(opt, init_lr=0.0, max_lr=LR, min_lr=MIN_LR, lr_warmup_steps=WARMUP * GLOBAL, lr_decay_steps=steps,
                       lr_decay_style="cosine", start_wd=0.01, end_wd=0.01, wd_incr_steps=steps, wd_incr_style="constant")
    cfg = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GLOBAL // MICRO, "zero_optimization": {"stage": zero},
           "gradient_clipping": 0.0, "steps_per_print": 10 ** 9}
    engine, _, _, _ = deepspeed.initialize(model=pipe, optimizer=opt, lr_scheduler=sched, config=cfg, dist_init_required=False)
    where, client = engine.load_checkpoint(pipe_ckpt(zero), tag=f"global_step{N}")
    sample = sample_reader(RUN.data, RUN.index)
    state = {"loaded": where is not None, "iteration": client.get("iteration") if client else None, "global_steps": engine.global_steps,
             "scheduler_steps": sched.num_steps, "losses": {it: engine.train_batch(pipe_batches(sample, it)).item() for it in range(N + 1, N + K + 1)}}
    if rank == stages - 1:
        with open(os.path.join(out, "pipe.json"), "w") as f:
            json.dump(state, f)
    end_worker()


def pipeline_case(zero):
    """DeepSpeed's pipeline engine continues pretrain_gpt's pipeline checkpoint (layer files, each stage's model file and, at
    ZeRO 1, its optimizer files), at ZeRO `zero` (0 or 1, what that engine runs)."""
    import torch.multiprocessing as mp
    RUN.pretrain(pipe_ckpt(zero), "--nproc-per-node", str(PIPE_STAGES), "--pipeline-model-parallel-size", str(PIPE_STAGES), "--zero-stage",
                 str(zero), "--ckpt-format", "deepspeed", "--save-interval", str(N), schedule=SCHEDULE)
    ours = Run.losses(pipe_ckpt(zero))
    files = sorted(os.listdir(os.path.join(pipe_ckpt(zero), f"global_step{N}")))
    out = fresh_dir(os.path.join(WORK, f"ds_pipe_z{zero}"))
    mp.spawn(pipe_worker, args=(PIPE_STAGES, zero, out), nprocs=PIPE_STAGES, join=True)
    with open(os.path.join(out, "pipe.json")) as f:
        ds = json.load(f)
    theirs = {int(k): v for k, v in ds["losses"].items()}
    diff = worst(theirs, ours, CONTINUED)
    ok = check(ds["loaded"] and ds["iteration"] == N and ds["global_steps"] == N and ds["scheduler_steps"] == N * GLOBAL and diff <= TOLERANCE,
               f"pp{PIPE_STAGES}_z{zero}: DeepSpeed's pipeline engine over {PIPE_STAGES} stages loads {', '.join(files)} and continues iterations "
               f"{N + 1}-{N + K} with pretrain_gpt's losses within {diff:.1e} (relative)")
    copy = save_of_iteration_n(pipe_ckpt(zero), f"pipe_z{zero}")
    resumed = os.path.join(WORK, f"resumed_pipe_z{zero}")
    log = RUN.pretrain(resumed, "--load", copy, "--nproc-per-node", str(PIPE_STAGES), "--pipeline-model-parallel-size", str(PIPE_STAGES),
                       "--zero-stage", str(zero), schedule=SCHEDULE)
    again = Run.losses(resumed)
    diff = worst(again, ours, CONTINUED)
    ok &= check("Adam's moments and step" in log and sorted(again) == list(range(N + 1, N + K + 1)) and diff <= TOLERANCE,
                f"pp{PIPE_STAGES}_z{zero}: pretrain_gpt --load of it continues with the same losses within {diff:.1e}")
    one = os.path.join(WORK, f"resumed_pipe_z{zero}_one_process")  # in another layout: the stages joined
    log = RUN.pretrain(one, "--load", copy, "--zero-stage", str(zero), schedule=SCHEDULE)
    diff = worst(Run.losses(one), ours, CONTINUED)
    return ok & check("Adam's moments and step" in log and diff <= TOLERANCE,
                      f"pp{PIPE_STAGES}_z{zero}: pretrain_gpt --load of it on one process continues with the same losses within {diff:.1e}")


def save_of_iteration_n(ckpt, name):
    """A copy of pretrain_gpt's DeepSpeed-format run directory whose `latest` names the save of
    iteration N (and no Megatron tracker), for pretrain_gpt to resume its own save."""
    copy = os.path.join(WORK, "resume_src_" + name)
    shutil.copytree(ckpt, copy)
    with open(os.path.join(copy, "latest"), "w") as f:
        f.write(f"global_step{N}")
    os.remove(os.path.join(copy, "latest_checkpointed_iteration.txt"))
    return copy


def main():
    fresh_dir(WORK)
    ok = True
    ours = {}
    for world, stage in CASES:
        d = ckpt_of(world, stage)
        RUN.pretrain(d, "--nproc-per-node", str(world), "--zero-stage", str(stage), "--ckpt-format", "deepspeed", "--save-interval", str(N),
                     schedule=SCHEDULE)
        ours[(world, stage)] = Run.losses(d)
        tag = os.path.join(d, f"global_step{N}")
        files = sorted(os.listdir(tag))
        ok &= check(os.path.exists(os.path.join(d, "latest")) and len([f for f in files if f.endswith("optim_states.pt")]) == (world if stage else 0),
                    f"w{world}_z{stage}: pretrain_gpt wrote {', '.join(files)}")
    engines = spawn_engines(worker, CASES, WORK)
    for world, stage in CASES:
        name = f"w{world}_z{stage}"
        ds = engines[(world, stage)]
        theirs = ds["losses"]
        ok &= check(ds["loaded"] and ds["iteration"] == N and ds["global_steps"] == N and ds["scheduler_steps"] == N * GLOBAL,
                    f"{name}: DeepSpeed's load_checkpoint took it (client iteration {ds['iteration']}, global_steps {ds['global_steps']}, "
                    f"scheduler at {ds['scheduler_steps']} samples)")
        diff = worst(theirs, ours[(world, stage)], CONTINUED)
        ok &= check(diff <= TOLERANCE, f"{name}: DeepSpeed's engine continues iterations {N + 1}-{N + K} with pretrain_gpt's losses "
                    f"within {diff:.1e} (relative)")
        if stage > 0:  # zero_to_fp32 reads ZeRO's partitions (a ZeRO-0 checkpoint has the weights in its model file)
            sd = get_fp32_state_dict_from_zero_checkpoint(ckpt_of(world, stage), tag=f"global_step{N}")
            ok &= check(len(sd) > 0 and "embedding.word_embeddings.weight" in sd,
                        f"{name}: zero_to_fp32 reads {len(sd)} tensors, the embedding {tuple(sd['embedding.word_embeddings.weight'].shape)}")
        copy = save_of_iteration_n(ckpt_of(world, stage), name)
        resumed = os.path.join(WORK, "resumed_" + name)
        log = RUN.pretrain(resumed, "--load", copy, "--nproc-per-node", str(world), "--zero-stage", str(stage), schedule=SCHEDULE)
        again = Run.losses(resumed)
        diff = worst(again, ours[(world, stage)], CONTINUED)
        ok &= check("Adam's moments and step" in log and sorted(again) == list(range(N + 1, N + K + 1)) and diff <= TOLERANCE,
                    f"{name}: pretrain_gpt --load of it continues with the same losses within {diff:.1e}")
    ok &= tensor_parallel_cases()
    ok &= pipeline_case(0)
    ok &= pipeline_case(1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
