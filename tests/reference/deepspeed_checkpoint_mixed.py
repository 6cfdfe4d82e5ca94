"""Reference test: DeepSpeed's checkpoints of fp16 and bf16 runs, both ways.

DeepSpeed's mixed-precision engines keep fp32 master weights and Adam's state
in other files than its fp32 engine: without ZeRO, FP16_Optimizer (over a
fused Adam, as Megatron-DeepSpeed's) or FP16_UnfusedOptimizer (over torch's)
in the model file; with ZeRO and bf16, bf16_zero_pp_rank_* files, which
BF16_Optimizer (ZeRO 1 with fp32 gradient accumulation, or a pipeline) also
writes, without a stage. DeepSpeed 0.19 runs here on the CPU (DS_ACCELERATOR=
cpu, Gloo) with megatron-core's GPTModel and torch's AdamW in Megatron's two
groups; fp16 with its accelerator's fp16 check answered yes, and its fused
path with torch's AdamW standing in for FusedAdam (FP16_Optimizer's own code
then runs over it).

Reading (each layout DeepSpeed writes, 1 or 2 ranks): the engine trains N
iterations and saves; its fp32 master weights, moments and step at the save
are taken from the engine itself. Then
  - convert_gpt --load gives the logits of those master weights within 1e-5;
  - pretrain_gpt --load (fp32) continues with the losses of the same state
    continued in fp32 by torch (megatron-core's model, torch's AdamW) within
    1e-5 relative.
Writing (pretrain_gpt --bf16 / --fp16 --ckpt-format deepspeed, ZeRO 0-3):
  - the engine of the same precision load_checkpoints it and then holds
    exactly pretrain_gpt's fp32 master weights and moments (those of the same
    run saved in Megatron's format) and step;
  - zero_to_fp32 reads the same master weights (ZeRO 1-3);
  - the engine continues K iterations with pretrain_gpt's losses within
    MIXED_TOLERANCE relative (two bf16/fp16 implementations: the bound is
    measured, and zeroed moments exceed it);
  - pretrain_gpt --load of it continues with its own losses within 1e-5.
FP16_ZERO0: DeepSpeed's fp16 engine without ZeRO (FP16_Optimizer and
FP16_UnfusedOptimizer alike) trains otherwise than its own bf16 engine and its
fp16 engine at ZeRO 2 from the same start on this CPU (iteration 4's loss
8.464 against 8.394 and 8.370, measured), so its continuation is not
compared with pretrain_gpt's; the state it loads is.

  deepspeed_checkpoint_mixed.py BIN_DIR DATA_DIR WORK_DIR    (exit 77: a package is missing)
"""
import os
import shutil
import sys

from reference_env import check, fresh_dir
from deepspeed_run import GLOBAL, H, HEADS, L, LR, MICRO, SEQ, TOKENS, VOCAB, Run, adamw_groups, end_worker, megatron_args, start_worker, worst
import numpy as np
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
import megatron_cpu
from megatron_cpu import causal_mask, positions
from megatron_samples import sample_reader

BIN, DATA_DIR, WORK = sys.argv[1:4]
N, K = 2, 3
RUN = Run(BIN, DATA_DIR, WORK, iters=N + K)
CONTINUED = range(N + 1, N + K + 1)
TOLERANCE = 1e-5
MIXED_TOLERANCE = 1e-4
# (name, precision, ranks, ZeRO stage, DeepSpeed's optimizer wrapper)
READS = [("bf16_z0_fused", "bf16", 1, 0, "fused"), ("bf16_z0_unfused", "bf16", 1, 0, "unfused"), ("fp16_z0_fused", "fp16", 1, 0, "fused"),
         ("fp16_z0_unfused", "fp16", 1, 0, "unfused"), ("bf16_optimizer", "bf16", 2, 1, "bf16_optimizer"), ("bf16_z1", "bf16", 2, 1, ""),
         ("bf16_z2", "bf16", 2, 2, ""), ("bf16_z3", "bf16", 2, 3, ""), ("fp16_z2", "fp16", 2, 2, "")]
WRITES = [("w_bf16_z0", "bf16", 1, 0), ("w_bf16_z1", "bf16", 2, 1), ("w_bf16_z2", "bf16", 2, 2), ("w_bf16_z3", "bf16", 2, 3),
          ("w_fp16_z0", "fp16", 1, 0), ("w_fp16_z2", "fp16", 2, 2)]


def ds_config(precision, world, stage, wrapper=""):
    cfg = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GLOBAL // (MICRO * world),
           "zero_optimization": {"stage": stage}, "gradient_clipping": 0.0, "steps_per_print": 10 ** 9, precision: {"enabled": True}}
    if wrapper == "bf16_optimizer":
        cfg["data_types"] = {"grad_accum_dtype": "fp32"}
    return cfg


def engine_for(model, precision, world, stage, wrapper=""):
    """DeepSpeed's engine over the model; fused: FP16_Optimizer (torch's AdamW taken for a fused Adam)."""
    import deepspeed
    import deepspeed.runtime.engine as engine_module
    from deepspeed.accelerator import get_accelerator
    type(get_accelerator()).is_fp16_supported = lambda self: True  # the CPU accelerator says no (no mkldnn fp16); the math runs
    if not hasattr(engine_module, "_zerolm_fused_adam"):
        engine_module._zerolm_fused_adam = engine_module.FusedAdam
    engine_module.FusedAdam = torch.optim.AdamW if wrapper == "fused" else engine_module._zerolm_fused_adam
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=adamw_groups(model), config=ds_config(precision, world, stage, wrapper),
                                           dist_init_required=False)
    return engine


def engine_state(engine):
    """The engine's fp32 master weights and Adam's moments by parameter name, and Adam's step (collective)."""
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state
    opt = engine.optimizer
    names = {id(p): n for n, p in engine.module.named_parameters()}
    w, m, v = {}, {}, {}
    if hasattr(opt, "fp32_groups_flat"):  # FP16_Optimizer: one flat vector per group
        for params, flat in zip(opt.fp16_groups, opt.fp32_groups_flat):
            st, off = opt.optimizer.state[flat], 0
            for p in params:
                n = p.numel()
                w[names[id(p)]], m[names[id(p)]], v[names[id(p)]] = (t.detach()[off:off + n].view(p.shape).clone()
                                                                      for t in (flat, st["exp_avg"], st["exp_avg_sq"]))
                off += n
        step = opt.optimizer.state[opt.fp32_groups_flat[0]]["step"]
    elif type(opt).__name__ == "FP16_UnfusedOptimizer":  # one fp32 copy per parameter
        for params, masters in zip(opt.fp16_groups, opt.fp32_groups):
            for p, master in zip(params, masters):
                st = opt.optimizer.state[master]
                w[names[id(p)]], m[names[id(p)]], v[names[id(p)]] = master.detach().clone(), st["exp_avg"].clone(), st["exp_avg_sq"].clone()
        step = opt.optimizer.state[opt.fp32_groups[0][0]]["step"]
    else:  # ZeRO 1-3 and BF16_Optimizer: their own accessors, over Adam's state as it is now (linked afresh)
        if hasattr(opt, "_hp_optimizer_states_linked"):
            opt._hp_optimizer_states_linked = False
            opt._lazy_init_hp_params_optimizer_state()
        for name, p in engine.module.named_parameters():
            w[name] = safe_get_full_fp32_param(p).clone()
            m[name] = safe_get_full_optimizer_state(p, "exp_avg").clone()
            v[name] = safe_get_full_optimizer_state(p, "exp_avg_sq").clone()
        step = next(iter(opt.optimizer.state.values()))["step"]
    return {"weights": w, "exp_avg": m, "exp_avg_sq": v, "step": int(float(step))}


def read_worker(rank, world, cases, out):
    start_worker(out, rank, world)
    sample = sample_reader(RUN.data, RUN.index)
    for name, precision, _, stage, wrapper in cases:
        model = megatron_cpu.gpt(L, H, HEADS, SEQ, VOCAB, seed=5)
        engine = engine_for(model, precision, world, stage, wrapper)
        kind = type(engine.optimizer).__name__
        for it in range(1, N + 1):
            Run.iteration(engine, sample, it, rank, world)
        ckpt = os.path.join(out, name)
        engine.save_checkpoint(ckpt, client_state={"args": megatron_args(N), "iteration": N, "checkpoint_version": 3.0})
        state = engine_state(engine)
        if rank == 0:
            state["optimizer"] = kind
            torch.save(state, ckpt + ".state.pt")
    end_worker()


def write_worker(rank, world, cases, out):
    """The engine loads pretrain_gpt's checkpoint (other initial weights), reports its state, trains K more."""
    start_worker(out, rank, world)
    sample = sample_reader(RUN.data, RUN.index)
    for name, precision, _, stage in cases:
        model = megatron_cpu.gpt(L, H, HEADS, SEQ, VOCAB, seed=77)
        engine = engine_for(model, precision, world, stage, "fused")
        path, client = engine.load_checkpoint(os.path.join(WORK, name), tag=f"global_step{N}")
        state = engine_state(engine)
        state.update(loaded=path is not None, iteration=client.get("iteration") if client else None, optimizer=type(engine.optimizer).__name__,
                     losses={it: Run.iteration(engine, sample, it, rank, world) for it in range(N + 1, N + K + 1)})
        if rank == 0:
            torch.save(state, os.path.join(out, name + ".state.pt"))
    end_worker()


def continue_fp32(state):
    """The state continued K iterations by torch in fp32 (pretrain_gpt's samples on one rank): the losses."""
    torch.manual_seed(0)
    model = megatron_cpu.gpt(L, H, HEADS, SEQ, VOCAB, seed=5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(state["weights"][name])
    opt = adamw_groups(model)
    for name, p in model.named_parameters():
        opt.state[p] = {"step": torch.tensor(float(state["step"])), "exp_avg": state["exp_avg"][name].clone().float(),
                        "exp_avg_sq": state["exp_avg_sq"][name].clone().float()}
    sample = sample_reader(RUN.data, RUN.index)
    losses, steps = {}, GLOBAL // MICRO
    for it in range(N + 1, N + K + 1):
        total = 0.0
        for mb in range(steps):
            first = (it - 1) * GLOBAL + mb * MICRO
            batch = torch.tensor(np.stack([sample(first + b) for b in range(MICRO)]).astype(np.int64))
            logits = model(batch[:, :-1], positions(SEQ), causal_mask(SEQ))
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
            (loss / steps).backward()
            total += loss.item()
        opt.step()
        opt.zero_grad()
        losses[it] = total / steps
    return losses


def logits_of_weights(weights):
    model = megatron_cpu.gpt(L, H, HEADS, SEQ, VOCAB, seed=5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(weights[name])
        return model(TOKENS, positions(TOKENS.shape[1]), causal_mask(TOKENS.shape[1]))[0].float()



def same_state(a, b, names):
    """Whether two states' weights and moments are equal, and the largest difference."""
    diff = max((a[k][n].float() - b[k][n].float()).abs().max().item() for k in ("weights", "exp_avg", "exp_avg_sq") for n in names)
    return diff == 0.0, diff


def spawn(fn, world, cases, out):
    mp.spawn(fn, args=(world, cases, out), nprocs=world, join=True)


def reads():
    ok = True
    for world in (1, 2):
        spawn(read_worker, world, [c for c in READS if c[2] == world], fresh_dir(os.path.join(WORK, f"reads{world}")))
    for name, precision, world, stage, _ in READS:
        ckpt = os.path.join(WORK, f"reads{world}", name)
        state = torch.load(ckpt + ".state.pt")
        diff = (RUN.logits(ckpt) - logits_of_weights(state["weights"])).abs().max().item()
        ok &= check(diff <= TOLERANCE, f"read {name} ({state['optimizer']}, {world} rank(s)): convert_gpt --load gives the logits of the "
                    f"engine's fp32 master weights within {diff:.1e}")
        resumed = os.path.join(WORK, "resumed_" + name)
        log = RUN.pretrain(resumed, "--load", ckpt)
        ours, theirs = Run.losses(resumed), continue_fp32(state)
        diff = worst(ours, theirs, CONTINUED) if sorted(ours) == sorted(theirs) else float("inf")
        ok &= check("Adam's moments and step" in log and diff <= TOLERANCE,
                    f"read {name}: pretrain_gpt --load continues with the losses of the engine's state (step {state['step']}) continued "
                    f"in fp32 by torch within {diff:.1e}")
    return ok


def precision_flags(precision):
    """pretrain_gpt's flags for the precision; fp16 from a scale that does not overflow, so every step counts."""
    return ("--" + precision,) + (("--initial-loss-scale", "1024") if precision == "fp16" else ())


def writes():
    ok = True
    truth = {}
    for name, precision, world, stage in WRITES:
        flag = precision_flags(precision)
        d = os.path.join(WORK, name)
        RUN.pretrain(d, *flag, "--nproc-per-node", str(world), "--zero-stage", str(stage), "--ckpt-format", "deepspeed", "--save-interval", str(N))
        if (precision, world) not in truth:  # the same run saved in Megatron's format: pretrain_gpt's state at N
            t = os.path.join(WORK, f"truth_{precision}_{world}")
            RUN.pretrain(t, *flag, "--nproc-per-node", str(world), "--ckpt-format", "torch", "--save-interval", str(N))
            sd = torch.load(os.path.join(t, f"iter_{N:07d}", "mp_rank_00", "model_optim_rng.pt"), weights_only=False)
            opt = sd["zerolm_optimizer"]
            truth[(precision, world)] = ({"weights": {k: v for k, v in sd["model"].items() if torch.is_tensor(v)}, "exp_avg": opt["exp_avg"],
                                          "exp_avg_sq": opt["exp_avg_sq"], "step": opt["step"]}, Run.losses(t))
        files = sorted(os.listdir(os.path.join(d, f"global_step{N}")))
        prefix = "bf16_zero_pp_rank_" if precision == "bf16" else "zero_pp_rank_"
        optim = [f for f in files if f.endswith("optim_states.pt")]
        ok &= check(len(optim) == (world if stage else 0) and all(f.startswith(prefix) for f in optim),
                    f"write {name}: pretrain_gpt wrote {', '.join(files)}")
    for world in (1, 2):
        spawn(write_worker, world, [c for c in WRITES if c[2] == world], fresh_dir(os.path.join(WORK, f"writes{world}")))
    for name, precision, world, stage in WRITES:
        ds = torch.load(os.path.join(WORK, f"writes{world}", name + ".state.pt"))
        want, our_losses = truth[(precision, world)]
        names = sorted(want["weights"])
        equal, diff = same_state(ds, want, names)
        ok &= check(ds["loaded"] and ds["iteration"] == N and equal and ds["step"] == want["step"],
                    f"write {name}: DeepSpeed's {precision} engine ({ds['optimizer']}) load_checkpoint takes it: master weights and moments "
                    f"{'equal' if equal else f'differ by {diff:.1e} from'} pretrain_gpt's, step {ds['step']} (ours {want['step']})")
        if stage > 0:
            sd = get_fp32_state_dict_from_zero_checkpoint(os.path.join(WORK, name), tag=f"global_step{N}")
            same = set(sd) == set(names) and all(torch.equal(sd[n].float(), want["weights"][n].float()) for n in names)
            ok &= check(same, f"write {name}: zero_to_fp32 reads pretrain_gpt's master weights {'exactly' if same else 'otherwise'}")
        diff = worst(ds["losses"], our_losses, CONTINUED)
        if (precision, stage) == ("fp16", 0):  # see FP16_ZERO0 above
            print(f"skip write {name}: the engine's own fp16 losses without ZeRO are not compared ({diff:.1e} from pretrain_gpt's)")
        else:
            ok &= check(diff <= MIXED_TOLERANCE, f"write {name}: the engine continues with pretrain_gpt's {precision} losses within {diff:.1e} "
                        f"(relative; bound {MIXED_TOLERANCE:.0e})")
        copy = os.path.join(WORK, "resume_src_" + name)
        shutil.copytree(os.path.join(WORK, name), copy)
        with open(os.path.join(copy, "latest"), "w") as f:
            f.write(f"global_step{N}")
        os.remove(os.path.join(copy, "latest_checkpointed_iteration.txt"))
        resumed = os.path.join(WORK, "resumed_" + name)
        RUN.pretrain(resumed, *precision_flags(precision), "--load", copy, "--nproc-per-node", str(world), "--zero-stage", str(stage))
        diff = worst(Run.losses(resumed), our_losses, CONTINUED)
        ok &= check(diff <= TOLERANCE, f"write {name}: pretrain_gpt --load of it continues with its own losses within {diff:.1e}")
    return ok


def main():
    os.environ["ZLM_CPU_MIXED_PRECISION"] = "1"  # pretrain_gpt --bf16/--fp16 trains in 16 bits on the CPU too, as on a GPU
    fresh_dir(WORK)
    torch.set_num_threads(1)
    megatron_cpu.init(fresh_dir(os.path.join(WORK, "main")))  # this process builds megatron-core's model too
    RUN.pretrain(os.path.join(WORK, "index_run"))  # caches the sample index the engines train on
    ok = reads()
    ok &= writes()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
