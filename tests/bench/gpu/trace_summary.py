"""Where a training step's time goes, from the Chrome trace that
`pretrain_gpt --profile --use-pytorch-profiler` (LibTorch's profiler) writes,
as Markdown tables:

  - per profiled step: the step's wall time (its "ProfilerStep#N" range: pretrain_gpt's
    train_step, without the logging, evaluation and saving around it), the time
    the GPU was busy (the union of its kernels, copies and sets) and so how long it
    sat idle waiting for the host;
  - the device's time by kind of work (matrix products, attention, layer norm, GELU,
    the loss, the optimizer, other element-wise work, copies, NCCL), per step;
  - the kernels (or, in a CPU run, the operators by self time) that take the most.

  trace_summary.py TRACE.json [--top 15]
"""
import argparse
import collections
import json
import re
import sys

# Kinds of work, first match wins; applied to kernel names on the GPU and to operator names on the CPU.
KINDS = [
    ("loss (fused cross-entropy)", r"row_stats_kernel|grad_kernel|cross_entropy|nll_loss|log_softmax"),
    ("attention", r"flash|fmha|sdpa|scaled_dot_product|attention|cudnn"),
    ("matrix products", r"gemm|cutlass|xmma|nvjet|cublas|aten::(mm|addmm|bmm|matmul|linear)\b|sm\d+_.*_(tn|nt|nn|tt)"),
    ("layer norm", r"layer_norm|layernorm|LayerNorm|GammaBeta"),
    ("column sums (bias gradients)", r"reduce_kernel.*sum_functor|aten::sum\b"),
    ("concatenation (stack, cat)", r"CatArray|aten::cat\b|aten::stack\b"),
    ("GELU", r"gelu|Gelu"),
    ("optimizer (AdamW, norms, clipping)", r"adam|Adam|multi_tensor|foreach|norm|lpnorm"),
    ("NCCL", r"nccl|c10d"),
    ("copies, casts, fills", r"[Mm]emcpy|[Mm]emset|copy|fill|_to_copy|aten::to\b|cast"),
    ("other element-wise and reductions", r"elementwise|vectorized|reduce|aten::"),
]
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name):
            return kind
    return "other"


def busy_time(intervals):
    """The union's length of [start, end) intervals, in the trace's microseconds."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def self_times(events):
    """CPU operators' self time (their duration less their children's), per thread."""
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    out = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= e["ts"]:
                out.append(stack.pop())
            if stack:
                stack[-1][1] -= e["dur"]
            stack.append([e, float(e["dur"])])
        out.extend(stack)
    return [(e["name"], max(s, 0.0)) for e, s in out]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    try:
        events = [e for e in json.load(open(args.trace))["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    except (OSError, ValueError, KeyError) as err:
        sys.exit(f"trace_summary: cannot read {args.trace}: {err}")
    steps = sorted((e for e in events if re.fullmatch(r"ProfilerStep#\d+", e["name"]) and e.get("cat") == "user_annotation"),
                   key=lambda e: e["ts"])
    if not steps:
        sys.exit(f"trace_summary: {args.trace} has no ProfilerStep#N range (not a pretrain_gpt --profile trace?)")
    n = len(steps)

    def in_steps(e):  # work that overlaps a profiled step (not what ran between or after them)
        return any(e["ts"] < s["ts"] + s["dur"] and e["ts"] + e["dur"] > s["ts"] for s in steps)

    device = [e for e in events if e.get("cat") in DEVICE_CATS and in_steps(e)]
    print(f"{n} profiled steps ({', '.join(s['name'] for s in steps)})\n")
    print("| step | wall (ms) | device busy (ms) | device idle (ms) |")
    print("|---|---|---|---|")
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        busy = busy_time((max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in device if e["ts"] < hi and e["ts"] + e["dur"] > lo)
        print(f"| {s['name']} | {s['dur'] / 1e3:.2f} | {busy / 1e3:.2f} | {(s['dur'] - busy) / 1e3:.2f} |")
    if device:
        items, what = [(e["name"], float(e["dur"])) for e in device], "kernel"
    else:  # a CPU run: the operators' self time
        ops = [e for e in events if e.get("cat") == "cpu_op" and in_steps(e)]
        items, what = self_times(ops), "operator (self time)"
    total = sum(d for _, d in items) or 1.0
    by_kind, by_name, calls = collections.Counter(), collections.Counter(), collections.Counter()
    for name, d in items:
        by_kind[kind_of(name)] += d
        by_name[name] += d
        calls[name] += 1
    print(f"\n| kind of work | ms per step | share of {'device' if device else 'operator'} time |")
    print("|---|---|---|")
    for kind, d in by_kind.most_common():
        print(f"| {kind} | {d / n / 1e3:.2f} | {100 * d / total:.1f}% |")
    print(f"\n| {what} | calls per step | ms per step | share |")
    print("|---|---|---|---|")
    for name, d in by_name.most_common(args.top):
        short = name if len(name) <= 90 else name[:87] + "..."
        print(f"| `{short.replace('|', '/')}` | {calls[name] / n:g} | {d / n / 1e3:.3f} | {100 * d / total:.1f}% |")


if __name__ == "__main__":
    main()
