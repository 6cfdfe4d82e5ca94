"""Compare pretrain_gpt runs: per-iteration training losses (metrics.jsonl) and
the final checkpoint (weights and Adam moments, read with torch.jit.load).

  compare_runs.py --rtol R --atol A REF_DIR RUN_DIR [RUN_DIR ...]

Each DIR is a --save directory. Prints the largest differences; exits 1 when
any value is outside |x - ref| <= atol + rtol * |ref|.
"""
import argparse
import json
import os
import sys

import torch


def losses(run):
    out = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if "lr" in rec:  # training lines (validation lines have a "split")
                out[rec["iteration"]] = rec["lm_loss"]
    return out


def join(parts, dim, groups):
    """The whole tensor from its tensor-parallel parts (see trainer/model/tensor_parallel.h, TpSplit)."""
    if dim < 0 or len(parts) == 1:
        return parts[0]
    shape = list(parts[0].shape)
    m = shape[dim]
    view = shape[:dim] + [groups, 1, m // groups] + shape[dim + 1:]
    whole = torch.cat([p.reshape(view) for p in parts], dim + 1)
    shape[dim] = m * len(parts)
    return whole.reshape(shape)


def checkpoint(run):
    """Iteration and whole-model tensors of the latest checkpoint, any TP/PP layout."""
    it = open(os.path.join(run, "latest_checkpointed_iteration.txt")).read().strip()
    d = os.path.join(run, "iter_%07d" % int(it))
    pieces = {}  # key -> {tp rank: tensor}
    for sub in sorted(os.listdir(d)):
        m = torch.jit.load(os.path.join(d, sub, "model_optim_rng.pt"))
        tp = int(sub.split("_")[2])
        parts = {k: tuple(v.tolist()) for k, v in m.partition.named_parameters()} if hasattr(m, "partition") else {}
        for prefix, mod in (("param/", m.model), ("exp_avg/", m.optimizer.exp_avg), ("exp_avg_sq/", m.optimizer.exp_avg_sq)):
            for k, v in mod.named_parameters():
                pieces.setdefault(prefix + k, ({}, parts.get(k, (-1, 1))))[0][tp] = v.detach().clone()
    state = {k: join([by_tp[t] for t in sorted(by_tp)], *split) for k, (by_tp, split) in pieces.items()}
    return int(it), state


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rtol", type=float, required=True)
    ap.add_argument("--atol", type=float, required=True)
    ap.add_argument("--losses-only", action="store_true")
    ap.add_argument("ref")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    ref_loss = losses(a.ref)
    ref_it, ref_state = (None, None) if a.losses_only else checkpoint(a.ref)
    ok = True
    for run in a.runs:
        got = losses(run)
        common = sorted(set(got) & set(ref_loss))
        if not common:
            print(f"FAIL {run}: no iterations in common with {a.ref}")
            ok = False
            continue
        # null: no iteration of that interval advanced (fp16 overflow); must be so in both.
        nulls = [i for i in common if got[i] is None or ref_loss[i] is None]
        both = [i for i in common if i not in nulls]
        bad = any(got[i] is not ref_loss[i] for i in nulls)
        worst_loss = max((abs(got[i] - ref_loss[i]) / max(1e-30, a.atol + a.rtol * abs(ref_loss[i])) for i in both), default=0.0)
        max_loss = max((abs(got[i] - ref_loss[i]) for i in both), default=0.0)
        line = f"{run}: {len(both)} losses, max |diff| {max_loss:.3g}" + (f" ({len(nulls)} skipped intervals)" if nulls else "")
        bad = bad or worst_loss > 1
        if not a.losses_only:
            it, state = checkpoint(run)
            if it != ref_it or set(state) != set(ref_state):
                print(f"FAIL {run}: checkpoint iteration {it} / tensors differ from {a.ref}")
                ok = False
                continue
            worst, max_abs, where = 0.0, 0.0, ""
            for k, r in ref_state.items():
                d = (state[k] - r).abs()
                ratio = (d / (a.atol + a.rtol * r.abs()).clamp_min(1e-30)).max().item()
                if ratio > worst:
                    worst, where = ratio, k
                max_abs = max(max_abs, d.max().item())
            line += f"; {len(state)} tensors, max |diff| {max_abs:.3g} (worst vs tolerance: {where}, {worst:.2f})"
            bad = bad or worst > 1
        print(("FAIL " if bad else "ok   ") + line)
        ok = ok and not bad
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
