"""Reference test: pretrain_gpt --load continues a run that megatron-core's own
optimizer saved in Megatron-LM's checkpoint layout (--ckpt-format torch),
with its Adam state.

megatron-core 0.16 trains the tiny GPT on the CPU (megatron_cpu_optimizer.py:
GPTModel in DistributedDataParallel, get_megatron_optimizer, its scheduler)
for N iterations on pretrain_gpt's samples, in fp32, bf16 and fp16 with
FP32Optimizer / Float16OptimizerWithFloat16Params, and in fp32 and bf16 with
--use-distributed-optimizer (also with --overlap-grad-reduce's buckets, whose tails
distrib_optim.pt drops). It saves iter_N/mp_rank_00/model_optim_rng.pt
with the keys Megatron-LM's checkpointing writes (args, checkpoint_version,
iteration, model, optimizer = optimizer.state_dict(), opt_param_scheduler,
rng_state), and distrib_optim.pt beside it (save_parameter_state) for the
distributed optimizer. At the save the optimizer's fp32 weights, moments and
step are taken from the optimizer itself, and the same state is continued
K iterations in fp32 by megatron-core's FP32Optimizer (for the fp32 cases
that is the run itself). pretrain_gpt --load of the checkpoint (fp32)
continues with those losses within 1e-5 relative.

The other way: pretrain_gpt --ckpt-format torch saves iteration N of an N + K
run (fp32, and the layouts of --bf16 and --fp16, trained in fp32 on the CPU;
a cosine schedule whose warm-up ends inside the first iteration; one part, and
TP 2 x PP 2 for fp32 and fp16, where megatron-core builds each part's model
and optimizer on four Gloo processes; with --use-distributed-optimizer in fp32
from DP 2, in fp16, and in bf16 at TP 2 x PP 2, whose stages put the tied
embedding's copies in buckets of their own; and with --overlap-grad-reduce
--ddp-bucket-size on both sides, in fp32 on one part and in bf16 at TP 2 x
PP 2, the first stage's buffer in several buckets), and megatron-core's optimizer of
that precision load_state_dict()s its `optimizer` (and the distributed one
load_parameter_state()s distrib_optim.pt, as Megatron-LM's loader does)
and its scheduler, built from the same flags and asserting as Megatron-LM's
does that the checkpoint's schedule is its own, its `opt_param_scheduler`:
the learning rate is then pretrain_gpt's, the optimizer's fp32 weights,
moments and every parameter's step exactly the run's (its zerolm_optimizer
entry and model), and in fp32 megatron-core continues iterations N+1..N+K
with pretrain_gpt's own losses within 1e-5. Megatron-LM's loader's steps
with the file's rng_state (random.setstate, np.random.set_state,
torch.set_rng_state) restore Python's and numpy's generators as the run's seed
leaves them; the CUDA states (a GPU is needed to set them) carry
megatron-core's seeds.

fp16 skips: pretrain_gpt --fp16 in 16 bits (ZLM_CPU_MIXED_PRECISION=1) from a
loss scale that overflows at first; replaying its log through megatron-core's
DynamicGradScaler and OptimizerParamScheduler, stepped as Megatron-LM's loop
steps them (the scheduler only after an update taken), gives its learning rate
and scale after every iteration exactly, and the saved num_steps and grad
scaler state.

  megatron_optimizer_resume.py BIN_DIR DATA_DIR WORK_DIR    (exit 77: a package is missing)
"""
import json
import os
import sys

from reference_env import check, fresh_dir
from deepspeed_run import GLOBAL, H, HEADS, L, LR, MICRO, SEED, SEQ, VOCAB, Run, megatron_args
import numpy as np
import torch
import torch.multiprocessing as mp
import megatron_cpu
from megatron_samples import sample_reader

BIN, DATA_DIR, WORK = sys.argv[1:4]
N, K = 2, 3
WARMUP_FRACTION = 0.1  # of N + K iterations: half of the first one (pretrain_gpt's checkpoints, megatron-core's scheduler)
RUN = Run(BIN, DATA_DIR, WORK, iters=N + K)
TOLERANCE = 1e-5
# (precision, distributed optimizer, hidden size, bucket size): at hidden 40 the distributed optimizer's buffer has
# gaps (each parameter starts at a multiple of 64 numbers); with a bucket size (--overlap-grad-reduce
# --ddp-bucket-size) its buckets lose their tails in distrib_optim.pt
CASES = [("fp32", False, H, None), ("bf16", False, H, None), ("fp16", False, H, None), ("fp32", True, H, None), ("bf16", True, H, None),
         ("bf16", True, 40, None), ("fp32", True, 40, 20000)]


def name_of(mode, dist, hidden, bucket):
    return (f"{mode}_{'distributed' if dist else 'plain'}" + ("" if hidden == H else f"_hidden{hidden}")
            + ("" if bucket is None else f"_buckets{bucket}"))


def micro_batches(sample, it):
    """Iteration `it`'s global batch in pretrain_gpt's order, as micro-batches."""
    out = []
    for mb in range(GLOBAL // MICRO):
        first = (it - 1) * GLOBAL + mb * MICRO
        out.append(torch.tensor(np.stack([sample(first + b) for b in range(MICRO)]).astype(np.int64)))
    return out


def save_megatron(opt, sched, model, ckpt, dist, hidden, bucket):
    """The checkpoint of iteration N as Megatron-LM's --ckpt-format torch writes it."""
    part = os.path.join(ckpt, f"iter_{N:07d}", "mp_rank_00")
    os.makedirs(part)
    core = model.module.module if hasattr(model.module, "module") else model.module
    rng = {"random_rng_state": ("state", 3), "np_rng_state": np.random.get_state(), "torch_rng_state": torch.get_rng_state(),
           "rng_tracker_states": {}}
    args = megatron_args(N)
    args.hidden_size = hidden
    args.overlap_grad_reduce, args.ddp_bucket_size, args.data_parallel_size = bucket is not None, bucket, 1
    torch.save({"args": args, "checkpoint_version": 3.0, "iteration": N, "model": core.state_dict_for_save_checkpoint(),
                "optimizer": opt.state_dict(), "opt_param_scheduler": sched.state_dict(), "rng_state": [rng],
                "num_floating_point_operations_so_far": 0}, os.path.join(part, "model_optim_rng.pt"))
    if dist:
        opt.save_parameter_state(os.path.join(part, "distrib_optim.pt"))
    with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(N))


def continue_fp32(state, sample, hidden):
    """The state continued by megatron-core's FP32Optimizer in fp32: losses of iterations N+1..N+K."""
    import megatron_cpu_optimizer as mco
    model, opt, sched = mco.build("fp32", False, L, hidden, HEADS, SEQ, VOCAB, seed=99, lr=LR, iterations=N + K, samples_per_iteration=GLOBAL)
    inner = opt.chained_optimizers[0].optimizer
    with torch.no_grad():
        for name, p in model.named_parameters():
            key = name.removeprefix("module.")
            p.copy_(state["weights"][key])
            inner.state[p] = {"step": torch.tensor(float(state["step"])), "exp_avg": state["exp_avg"][key].clone(),
                              "exp_avg_sq": state["exp_avg_sq"][key].clone()}
    sched.step(increment=N * GLOBAL)
    return {it: mco.step(model, opt, sched, micro_batches(sample, it), VOCAB, GLOBAL) for it in range(N + 1, N + K + 1)}


def worker(rank, mode, dist, hidden, bucket, out):
    megatron_cpu.init(out)
    import megatron_cpu_optimizer as mco
    mco.patch()
    mco.load_fixes()
    torch.set_num_threads(1)
    sample = sample_reader(RUN.data, RUN.index)
    model, opt, sched = mco.build(mode, dist, L, hidden, HEADS, SEQ, VOCAB, seed=5, lr=LR, iterations=N + K, samples_per_iteration=GLOBAL,
                                  bucket=bucket)
    losses = {it: mco.step(model, opt, sched, micro_batches(sample, it), VOCAB, GLOBAL) for it in range(1, N + 1)}
    save_megatron(opt, sched, model, os.path.join(out, "ckpt"), dist, hidden, bucket)
    state = mco.fp32_state(model, opt, dist)
    if mode == "fp32":  # the run itself goes on; the fp32 copy of its state must continue alike
        losses.update({it: mco.step(model, opt, sched, micro_batches(sample, it), VOCAB, GLOBAL) for it in range(N + 1, N + K + 1)})
    again = continue_fp32(state, sample, hidden)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump({"losses": losses, "continued": again, "step": state["step"], "optimizer": type(opt.chained_optimizers[0]).__name__,
                   "buckets": len(model.buffers[0].buckets)}, f)
    torch.distributed.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


def megatron_lm_restores_rng(sd, tp, pp):
    """Megatron-LM's loader's steps with rng_state (without --no-load-rng), and what they restore:
    Python's and numpy's generators as Megatron's seeding (--seed + 100 x stage) leaves them, torch's
    CPU generator from the file; its CUDA calls need a GPU, so their states are decoded instead
    (seed, Philox offset) and compared with megatron-core's seeds. Returns what differs."""
    import random
    state = sd["rng_state"][0]
    random.setstate(state["random_rng_state"])
    np.random.set_state(state["np_rng_state"])
    torch.set_rng_state(state["torch_rng_state"])
    restored = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    seed = SEED + 100 * pp
    random.seed(seed)
    np.random.seed(seed)
    differ = []
    if restored[0] != random.getstate():
        differ.append("random")
    seeded = np.random.get_state()
    if restored[1][0] != seeded[0] or not np.array_equal(restored[1][1], seeded[1]) or restored[1][2:] != seeded[2:]:
        differ.append("numpy")
    if not torch.equal(restored[2], sd["rng_state"][0]["torch_rng_state"]):
        differ.append("torch")

    def cuda(t):
        b = t.numpy().tobytes()
        return (int.from_bytes(b[:8], "little"), int.from_bytes(b[8:], "little")) if len(b) == 16 else None
    want = {"data-parallel-rng": seed, "model-parallel-rng": seed + 2718 + tp, "expert-parallel-rng": seed + 1024}
    got = {k: cuda(v) for k, v in state["rng_tracker_states"].items()}
    if got != {k: (v, 0) for k, v in want.items()} or cuda(state["cuda_rng_state"]) != (seed, 0):
        differ.append(f"cuda {got}")
    return differ


def load_ours(rank, mode, dist, saved, out, tp, pp, bucket, hidden):
    """megatron-core's optimizer of `mode` (`dist`: its distributed optimizer; `bucket`: its bucket size
    with --overlap-grad-reduce, or None), on its part of a TP x PP model, loading pretrain_gpt's
    checkpoint of that part as Megatron-LM does (and, on one part in fp32, continuing it)."""
    megatron_cpu.init(out, rank, tp * pp, tp, pp)
    import megatron_cpu_optimizer as mco
    from megatron.core import parallel_state
    mco.patch()
    if dist:
        mco.load_fixes()
    torch.set_num_threads(1)
    tp_rank, pp_rank = parallel_state.get_tensor_model_parallel_rank(), parallel_state.get_pipeline_model_parallel_rank()
    part = f"mp_rank_{tp_rank:02d}" + (f"_{pp_rank:03d}" if pp > 1 else "")
    sd = torch.load(os.path.join(saved, f"iter_{N:07d}", part, "model_optim_rng.pt"), weights_only=False)
    sample = sample_reader(RUN.data, RUN.index)
    total = (N + K) * GLOBAL
    schedule = {"init_lr": 0.0, "max_lr": LR, "min_lr": LR / 10, "lr_warmup_steps": WARMUP_FRACTION * total, "lr_decay_steps": total,
                "lr_decay_style": "cosine"}
    model, opt, sched = mco.build(mode, dist, L, hidden, HEADS, SEQ, sd["args"].padded_vocab_size, seed=7, lr=LR, iterations=N + K,
                                  samples_per_iteration=GLOBAL, schedule=schedule, tp=tp, pp=pp, bucket=bucket)
    core = model.module.module if hasattr(model.module, "module") else model.module
    core.load_state_dict(sd["model"], strict=True)
    opt.load_state_dict(sd["optimizer"])
    if dist:  # Megatron-LM's loader: distrib_optim.pt beside the part (torch.load's default, weights_only)
        opt.load_parameter_state(os.path.join(saved, f"iter_{N:07d}", part, "distrib_optim.pt"))
    sched.load_state_dict(sd["opt_param_scheduler"])
    rng_differ = megatron_lm_restores_rng(sd, tp_rank, pp_rank)
    lr = opt.param_groups[0]["lr"]  # the rate of iteration N + 1, before the steps below move it
    state = mco.fp32_state(model, opt, dist)
    inner = opt.chained_optimizers[0].optimizer
    steps = sorted({float(st["step"]) for st in inner.state.values()})
    ours = sd["zerolm_optimizer"]
    tensors = [(sd["model"], state["weights"]), (ours["exp_avg"], state["exp_avg"]), (ours["exp_avg_sq"], state["exp_avg_sq"])]
    differ = [k for want, got in tensors for k, t in want.items() if torch.is_tensor(t) and not torch.equal(t.float(), got[k])]
    scale = opt.chained_optimizers[0].grad_scaler.scale.item() if mode == "fp16" else None
    one_part = tp * pp == 1
    losses = {it: mco.step(model, opt, sched, micro_batches(sample, it), VOCAB, GLOBAL) for it in range(N + 1, N + K + 1)} if mode == "fp32" and one_part else {}
    with open(os.path.join(out, f"result_{rank}.json"), "w") as f:
        json.dump({"part": part, "differ": differ, "steps": steps, "states": len(inner.state), "params": sum(torch.is_tensor(t) for t in sd["model"].values()),
                   "our_step": ours["step"], "losses": losses, "scale": scale, "rng_differ": rng_differ,
                   "lr": lr, "optimizer": type(opt.chained_optimizers[0]).__name__, "buckets": len(model.buffers[0].buckets)}, f)
    torch.distributed.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


def megatron_loads_ours():
    """pretrain_gpt's --ckpt-format torch files, loaded part by part by megatron-core's own
    optimizer on that part (one part, and TP 2 x PP 2 on four Gloo processes), and on one part in
    fp32 continued."""
    ok = True
    # (precision, TP, PP, pretrain_gpt's DP, --use-distributed-optimizer, --overlap-grad-reduce's --ddp-bucket-size or None,
    # hidden size); megatron-core loads each part at DP 1. With a bucket size the first stage's buffer has several buckets
    # (the others one, as Megatron-LM makes them), whose tails distrib_optim.pt leaves out; at hidden 40 those tails move the
    # parameters after them (at 64 every size is a multiple of 64, and buckets would leave the file as one bucket does)
    for mode, tp, pp, dp, dist, bucket, hidden in [
            ("fp32", 1, 1, 1, False, None, H), ("bf16", 1, 1, 1, False, None, H), ("fp16", 1, 1, 1, False, None, H),
            ("fp32", 2, 2, 1, False, None, H), ("fp16", 2, 2, 1, False, None, H), ("fp32", 1, 1, 2, True, None, H),
            ("fp16", 1, 1, 1, True, None, H), ("bf16", 2, 2, 1, True, None, H), ("fp32", 1, 1, 1, True, 20000, 40),
            ("bf16", 2, 2, 1, True, 9000, 40)]:
        layout = (f"{mode}, TP {tp} x PP {pp}" + (f" x DP {dp}" if dp > 1 else "") + (", distributed optimizer" if dist else "")
                  + (f", buckets of {bucket}" if bucket else ""))
        name = f"{mode}_tp{tp}pp{pp}dp{dp}" + ("_dist" if dist else "") + (f"_buckets{bucket}" if bucket else "") + (
            f"_hidden{hidden}" if hidden != H else "")
        saved = os.path.join(WORK, f"ours_{name}")
        flags = ([] if mode == "fp32" else ["--" + mode]) + (["--use-distributed-optimizer"] if dist else []) + ([] if tp * pp * dp == 1 else [
            "--nproc-per-node", str(tp * pp * dp), "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp)]) + [
            "--hidden-size", str(hidden)]
        buckets = ["--overlap-grad-reduce", "--ddp-bucket-size", str(bucket)] if bucket else []
        schedule = ("--lr-decay-style", "cosine", "--lr-warmup-fraction", str(WARMUP_FRACTION), "--min-lr", str(LR / 10))
        RUN.pretrain(saved, "--ckpt-format", "torch", "--save-interval", str(N), *flags, *buckets, schedule=schedule)
        out = fresh_dir(os.path.join(WORK, f"megatron_loads_{name}"))
        if bucket:  # the buckets must change the file, else this case could not tell them from one bucket
            one = os.path.join(WORK, f"ours_{name}_one_bucket")
            RUN.pretrain(one, "--ckpt-format", "torch", "--save-interval", str(N), *flags, schedule=schedule)
            part = "mp_rank_00" + ("_000" if pp > 1 else "")
            numel = [next(v["numel_unpadded"] for k, v in torch.load(os.path.join(d, f"iter_{N:07d}", part, "distrib_optim.pt"))[0].items())
                     for d in (saved, one)]
            ok &= check(numel[0] != numel[1], f"{layout}: distrib_optim.pt of {part} holds {numel[0]} numbers in its buckets, "
                        f"{numel[1]} as one bucket")
        mp.spawn(load_ours, args=(mode, dist, saved, out, tp, pp, bucket, hidden), nprocs=tp * pp, join=True)
        with open(os.path.join(saved, "metrics.jsonl")) as f:
            our_lr = next(rec["lr"] for rec in map(json.loads, f) if rec.get("iteration") == N and "split" not in rec)
        for rank in range(tp * pp):
            with open(os.path.join(out, f"result_{rank}.json")) as f:
                r = json.load(f)
            ok &= check(not r["differ"] and r["steps"] == [N] == [r["our_step"]] and r["states"] == r["params"] and r["lr"] == our_lr
                        and (mode != "fp16" or r["scale"] == 2.0 ** 32) and not r["rng_differ"]
                        and (not bucket or r["part"].endswith("_001") or r["buckets"] > 1),  # the first stage's buckets are several
                        f"{layout}, {r['part']}: megatron-core's {r['optimizer']} ({r['buckets']} bucket(s)) and scheduler load pretrain_gpt's: "
                        f"learning rate {r['lr']} "
                        f"(pretrain_gpt's {our_lr}), fp32 weights and moments exactly the run's, step {r['steps']} in all {r['states']} "
                        "parameters" + (f", loss scale {r['scale']:g}" if r["scale"] else "")
                        + (f" (differ: {r['differ'][:3]})" if r["differ"] else "")
                        + "; Megatron-LM's rng_state steps restore " + (f"all but {r['rng_differ']}" if r["rng_differ"] else
                                                                         "Python's and numpy's seeded generators, torch's and the CUDA seeds"))
            if r["losses"]:
                ours = Run.losses(saved)
                theirs = {int(k): v for k, v in r["losses"].items()}
                diff = max(abs(ours[it] - theirs[it]) / abs(ours[it]) for it in theirs)
                ok &= check(diff <= TOLERANCE, f"{layout}: megatron-core continues iterations {N + 1}-{N + K} from it with pretrain_gpt's "
                                               f"own losses within {diff:.1e} (relative)")
    return ok


def replay_fp16(rank, saved, iters, warmup, out):
    """Megatron-LM's training loop's bookkeeping over pretrain_gpt's fp16 iterations (from its
    metrics.jsonl): megatron-core's DynamicGradScaler updated with each iteration's overflow, and
    its OptimizerParamScheduler stepped by the global batch only after an update taken. Writes
    the iterations whose logged learning rate or scale differ, and whether the checkpoint's
    scheduler and grad scaler state are the replay's."""
    import megatron_cpu_optimizer as mco
    mco.patch()  # the grad scaler's tensors live on the CPU
    from megatron.core.optimizer.grad_scaler import DynamicGradScaler
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    with open(os.path.join(saved, "metrics.jsonl")) as f:
        records = [r for r in map(json.loads, f) if "consumed_samples" in r and "split" not in r]
    total = iters * GLOBAL
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
    sched = OptimizerParamScheduler(opt, init_lr=0.0, max_lr=LR, min_lr=LR / 10, lr_warmup_steps=warmup * GLOBAL, lr_decay_steps=total,
                                    lr_decay_style="cosine", start_wd=0.01, end_wd=0.01, wd_incr_steps=total, wd_incr_style="constant")
    scaler = DynamicGradScaler(initial_scale=2.0 ** 20, min_scale=1.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=1000,
                               hysteresis=2)
    differ, updates = [], 0
    for r in records:
        skipped = r["skipped_iterations"] == 1
        scaler.update(skipped)
        if not skipped:
            sched.step(increment=GLOBAL)
            updates += 1
        if r["lr"] != opt.param_groups[0]["lr"] or r["loss_scale"] != scaler.scale.item():
            differ.append([r["iteration"], r["lr"], opt.param_groups[0]["lr"], r["loss_scale"], scaler.scale.item()])
    sd = torch.load(os.path.join(saved, f"iter_{iters:07d}", "mp_rank_00", "model_optim_rng.pt"), weights_only=False)
    saved_scaler, want = sd["optimizer"]["grad_scaler"], scaler.state_dict()
    same_state = (sd["opt_param_scheduler"]["num_steps"] == sched.num_steps and saved_scaler["scale"].item() == want["scale"].item()
                  and saved_scaler["growth_tracker"] == want["growth_tracker"] and saved_scaler["hysteresis_tracker"] == want["hysteresis_tracker"])
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump({"differ": differ, "updates": updates, "iterations": len(records), "same_state": same_state,
                   "num_steps": sd["opt_param_scheduler"]["num_steps"], "hysteresis": saved_scaler["hysteresis_tracker"]}, f)


def fp16_skips_hold_the_schedule():
    """pretrain_gpt --fp16 training in 16 bits (ZLM_CPU_MIXED_PRECISION=1) from a loss scale that
    overflows at first: its logged learning rate and scale follow megatron-core's scheduler and
    grad scaler as Megatron-LM steps them (no scheduler step on a skipped iteration), and its
    Megatron checkpoint keeps their state."""
    saved, iters, warmup = os.path.join(WORK, "fp16_skips"), 10, 2
    os.environ["ZLM_CPU_MIXED_PRECISION"] = "1"
    try:
        RUN.pretrain(saved, "--fp16", "--initial-loss-scale", str(2 ** 20), "--train-iters", str(iters), "--ckpt-format", "torch",
                     "--save-interval", str(iters), schedule=("--lr-decay-style", "cosine", "--lr-warmup-iters", str(warmup), "--min-lr", str(LR / 10)))
    finally:
        del os.environ["ZLM_CPU_MIXED_PRECISION"]
    out = fresh_dir(os.path.join(WORK, "fp16_replay"))
    mp.spawn(replay_fp16, args=(saved, iters, warmup, out), nprocs=1, join=True)
    with open(os.path.join(out, "result.json")) as f:
        r = json.load(f)
    skipped = r["iterations"] - r["updates"]
    return check(not r["differ"] and skipped > 0 and r["updates"] > warmup and r["same_state"],
                 f"fp16: {skipped} of {r['iterations']} iterations skipped on overflow; pretrain_gpt's learning rate and loss scale after every "
                 f"iteration are megatron-core's scheduler and grad scaler stepped as Megatron-LM steps them"
                 + (f" (differ: {r['differ'][:3]})" if r["differ"] else "")
                 + f"; the checkpoint's num_steps {r['num_steps']} and grad scaler (hysteresis tracker {r['hysteresis']}) are theirs"
                 + ("" if r["same_state"] else ": NOT"))


def main():
    fresh_dir(WORK)
    RUN.pretrain(os.path.join(WORK, "index_run"))  # caches the sample index megatron-core trains on
    ok = True
    for mode, dist, hidden, bucket in CASES:
        name = name_of(mode, dist, hidden, bucket)
        out = fresh_dir(os.path.join(WORK, name))
        mp.spawn(worker, args=(mode, dist, hidden, bucket, out), nprocs=1, join=True)
        with open(os.path.join(out, "result.json")) as f:
            r = json.load(f)
        ref = {int(k): v for k, v in r["continued"].items()}
        if mode == "fp32":
            own = {int(k): v for k, v in r["losses"].items() if int(k) > N}
            diff = max(abs(own[it] - ref[it]) / abs(ref[it]) for it in ref)
            ok &= check(diff <= TOLERANCE, f"{name}: megatron-core's own continuation and its state continued afresh agree within {diff:.1e}")
        resumed = os.path.join(WORK, "resumed_" + name)
        log = RUN.pretrain(resumed, "--load", os.path.join(out, "ckpt"), "--hidden-size", str(hidden))
        ours = Run.losses(resumed)
        diff = max(abs(ours[it] - ref[it]) / abs(ref[it]) for it in ref) if sorted(ours) == sorted(ref) else float("inf")
        ok &= check("Adam's moments and step" in log and "not read" not in log and diff <= TOLERANCE and (bucket is None or r["buckets"] > 1),
                    f"{name} ({r['optimizer']}, step {r['step']}, {r['buckets']} bucket(s)): pretrain_gpt --load continues iterations {N + 1}-{N + K} with the "
                    f"losses of megatron-core's state continued in fp32 within {diff:.1e} (relative)")
    ok &= megatron_loads_ours()
    ok &= fp16_skips_hold_the_schedule()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
