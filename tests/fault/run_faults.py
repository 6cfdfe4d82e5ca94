#!/usr/bin/env python3
"""The fault matrix: every case of tests/fault/cases.toml run against the built
binaries, each in a fresh directory.

A case gives the command (`run`, a bash snippet), how to make its input
(`setup`), the expected exit code, fragments the output must and must not
contain (`stderr`, `stderr_absent`),
files that must and must not exist afterwards, and optionally a tmpfs of a
given size mounted at $FULL (disk-full cases; they need root and are skipped,
with a message, elsewhere). After every case no temporary file (`*.tmp.*`) may
be left anywhere in its directory or on its tmpfs, unless the case says a
temporary is expected (SIGKILL).

  run_faults.py SOURCE_DIR BIN_DIR [NAME_FRAGMENT]
Environment of each case: BIN, DATA (tests/data), FIX (the small fixtures
below, copied into the case directory), TRAIN (a tiny pretrain_gpt run's flags).
"""
import collections
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib

SRC, BIN = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
ONLY = sys.argv[3] if len(sys.argv) > 3 else ""
DATA = os.path.join(SRC, "tests/data")
MEG = os.path.join(DATA, "megatron")
TRAIN = (f"--num-layers 2 --hidden-size 64 --num-attention-heads 4 --micro-batch-size 4 --global-batch-size 8 "
         f"--seq-length 32 --max-position-embeddings 32 --lr 0.003 --split 949,50,1 --eval-iters 1 --eval-interval 1000 "
         f"--log-interval 1 --hidden-dropout 0 --attention-dropout 0 --distributed-backend gloo --data-cache-path cache "
         f"--data-path {MEG}/meg-gpt2-openwebtext_text_document --vocab-file {MEG}/gpt2-tiny-vocab.json "
         f"--merge-file {MEG}/gpt2-tiny-merges.txt")
FIXTURES = {
    "in.json": '{"text": "The first document, long enough to say something.", "url": "http://a.com/x"}\n'
               '{"text": "The second document says something else entirely.", "url": "http://b.com/y"}\n',
    "groups.json": '{"0": ["http://a.com/x", "http://b.com/y"]}\n',
    "urls/a.txt": "http://a.com/page\nhttp://b.org/other\n",
}

cases = tomllib.load(open(os.path.join(SRC, "tests/fault/cases.toml"), "rb"))["case"]
can_mount = os.geteuid() == 0 and shutil.which("mount") is not None
failures, skipped = [], []
by_category = collections.Counter()
root = tempfile.mkdtemp(prefix="zlm_fault_")
t_all = time.time()
for n, case in enumerate(cases):
    name = case["name"]
    if ONLY and ONLY not in name:
        continue
    if case.get("trainer") and not os.path.exists(os.path.join(BIN, "pretrain_gpt")):
        skipped.append(f"{name} (no pretrain_gpt in this build)")
        continue
    d = os.path.join(root, f"case{n:03d}")
    os.makedirs(d)
    for rel, text in FIXTURES.items():
        os.makedirs(os.path.dirname(os.path.join(d, rel)) or d, exist_ok=True)
        open(os.path.join(d, rel), "w").write(text)
    env = dict(os.environ, BIN=BIN, DATA=DATA, MEG=MEG, TRAIN=TRAIN, SRC=SRC)
    full = None
    if "tmpfs" in case:
        if not can_mount:
            skipped.append(f"{name} (a tmpfs needs root)")
            continue
        full = os.path.join(d, "full")
        os.makedirs(full)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={case['tmpfs']}", "tmpfs", full]).returncode != 0:
            skipped.append(f"{name} (mounting a tmpfs failed here)")
            continue
        env["FULL"] = full
    problems = []
    t0 = time.time()
    try:
        if case.get("setup"):
            s = subprocess.run(["bash", "-euo", "pipefail", "-c", case["setup"]], cwd=d, env=env, capture_output=True, text=True, timeout=300)
            if s.returncode != 0:
                problems.append(f"setup failed ({s.returncode}): {s.stderr[-1500:]}")
        if not problems:
            r = subprocess.run(["bash", "-c", case["run"]], cwd=d, env=env, capture_output=True, text=True, timeout=case.get("timeout", 300))
            out = r.stdout + r.stderr
            if r.returncode != case["exit"]:
                problems.append(f"exit {r.returncode}, expected {case['exit']}")
            for frag in case.get("stderr", []):
                if frag not in out:
                    problems.append(f"output lacks '{frag}'")
            for frag in case.get("stderr_absent", []):
                if frag in out:
                    problems.append(f"output has '{frag}'")
            for pat in case.get("exists", []):
                if not glob.glob(os.path.join(d, pat)):
                    problems.append(f"missing {pat}")
            for pat in case.get("absent", []):
                if glob.glob(os.path.join(d, pat)):
                    problems.append(f"should not exist: {pat}")
            if not case.get("temporaries_expected"):
                left = [os.path.relpath(p, d) for p in glob.glob(os.path.join(d, "**", "*.tmp.*"), recursive=True)]
                if left:
                    problems.append(f"temporaries left behind: {left}")
            if problems:
                problems.append("output:\n" + out[-2500:])
    except subprocess.TimeoutExpired:
        problems.append("timed out")
    finally:
        if full:
            subprocess.run(["umount", "-l", full])
    by_category[case["category"]] += 1
    status = "FAIL" if problems else "ok"
    print(f"{status:4} [{case['category']}] {name} ({time.time() - t0:.1f} s)", flush=True)
    if problems:
        failures.append((name, problems))
shutil.rmtree(root, ignore_errors=True)
print()
print(f"{sum(by_category.values())} cases in {time.time() - t_all:.0f} s: " +
      ", ".join(f"{c} {k}" for k, c in sorted(by_category.items())))
for s in skipped:
    print("skipped:", s)
for name, problems in failures:
    print(f"\nFAIL: {name}")
    for p in problems:
        print("   ", p)
sys.exit(1 if failures else 0)
