"""pretrain_gpt's TensorBoard event files, read by TensorBoard itself.

1. A tiny GPT-2 trains 6 iterations on 2 ranks (fp32, --log-interval 1, every
   optional logging flag, validation every 3 iterations). TensorBoard's
   EventAccumulator loads --tensorboard-dir, and every tag Megatron writes is
   there, each point equal to the corresponding metrics.jsonl value (to float32,
   the precision of TensorBoard's scalars), at the iteration and, for the
   "vs samples" tags, at the consumed sample count. Every record's two CRC-32C
   checksums equal those of the crc32c package.
2. --tensorboard-log-interval 2: training scalars at even iterations only.
3. The file cut inside its last record (a process killed mid-write): TensorBoard
   still reads every record before it.
4. SIGTERM to one rank of a 2-rank run logging every 1000 iterations (nothing
   flushed yet): both ranks stop after the same iteration N; without
   --exit-signal-handler the rank dies by SIGTERM after flushing, and
   TensorBoard reads lm loss at 1..N; with it, a checkpoint of iteration N is
   saved and the run exits 0.

  tensorboard_reads.py SOURCE_DIR BIN_DIR WORK_DIR
A missing package is a failure, not a skip.
"""
import glob
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

import crc32c
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

SRC, BIN, WORK = sys.argv[1:4]
DATA = os.path.join(SRC, "tests/data/megatron")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def base(name, iters, extra=()):
    d = os.path.join(WORK, name)
    return [os.path.join(BIN, "pretrain_gpt"), "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
            "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "8",
            "--train-iters", str(iters), "--lr", "0.003", "--lr-decay-style", "cosine", "--lr-warmup-iters", "2",
            "--data-path", os.path.join(DATA, "meg-gpt2-openwebtext_text_document"),
            "--vocab-file", os.path.join(DATA, "gpt2-tiny-vocab.json"), "--split", "949,50,1", "--eval-iters", "2",
            "--hidden-dropout", "0", "--attention-dropout", "0", "--distributed-backend", "gloo",
            "--data-cache-path", os.path.join(WORK, "cache"), "--tensorboard-dir", os.path.join(d, "tb"),
            "--metrics-out", os.path.join(d, "metrics.jsonl"), *extra], d


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def accumulate(tb_dir):
    acc = EventAccumulator(tb_dir, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def same(a, b):  # TensorBoard keeps float32
    return np.float32(a) == np.float32(b) or abs(np.float32(a) - np.float32(b)) <= np.spacing(np.float32(b))


def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def check_crcs(path):
    raw = open(path, "rb").read()
    pos = n = 0
    while pos < len(raw):
        (length,) = struct.unpack_from("<Q", raw, pos)
        (lcrc,) = struct.unpack_from("<I", raw, pos + 8)
        (pcrc,) = struct.unpack_from("<I", raw, pos + 12 + length)
        if lcrc != masked(crc32c.crc32c(raw[pos:pos + 8])) or pcrc != masked(crc32c.crc32c(raw[pos + 12:pos + 12 + length])):
            fail(f"{path}: byte {pos}: checksum differs from the crc32c package's")
        pos += 16 + length
        n += 1
    return n


# 1. Every tag against metrics.jsonl.
cmd, d = base("full", 6, ["--nproc-per-node", "2", "--log-interval", "1", "--eval-interval", "3", "--log-batch-size-to-tensorboard",
                          "--log-world-size-to-tensorboard", "--log-timers-to-tensorboard", "--log-validation-ppl-to-tensorboard",
                          "--log-num-zeros-in-grad", "--log-params-norm", "--log-memory-to-tensorboard"])
os.makedirs(d)
subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "train.log"), "w"))
files = glob.glob(os.path.join(d, "tb", "events.out.tfevents.*"))
if len(files) != 1:
    fail(f"expected one event file (rank 0 writes), found {files}")
records = check_crcs(files[0])
lines = [json.loads(x) for x in open(os.path.join(d, "metrics.jsonl"))]
train = [x for x in lines if "lr" in x]
valid = [x for x in lines if x.get("split") == "valid"]
test = [x for x in lines if x.get("split") == "test"]
if [x["iteration"] for x in train] != list(range(1, 7)) or len(valid) != 3 or len(test) != 1:
    fail(f"metrics.jsonl: {len(train)} training lines, {len(valid)} validation, {len(test)} test")
want = {}  # tag -> [(step, value)]


def add(tag, step, value, samples=None):
    want.setdefault(tag, []).append((step, value))
    if samples is not None:
        want.setdefault(tag + " vs samples", []).append((samples, value))


for x in train:
    it, n = x["iteration"], x["consumed_samples"]
    add("learning-rate", it, x["lr"], n)
    add("batch-size", it, x["batch_size"], n)
    add("lm loss", it, x["lm_loss"], n)
    add("loss-scale", it, x["loss_scale"], n)
    add("world-size", it, x["world_size"], n)
    add("grad-norm", it, x["grad_norm"], n)
    add("num-zeros", it, x["num_zeros"], n)
    add("params-norm", it, x["params_norm"], n)
    add("iteration-time", it, x["seconds_per_iteration"])
for x in valid + test:
    split = "validation" if x["split"] == "valid" else "test"
    add(f"lm loss {split}", x["iteration"], x["lm_loss"], x["consumed_samples"])
    add(f"lm loss {split} ppl", x["iteration"], x["ppl"], x["consumed_samples"])
got = accumulate(os.path.join(d, "tb"))
if sorted(got) != sorted(want):
    fail(f"tags differ:\n  TensorBoard {sorted(got)}\n  expected    {sorted(want)}")
points = 0
for tag, pts in want.items():
    g = got[tag]
    if len(g) != len(pts) or any(gs != ws or not same(gv, wv) for (gs, gv), (ws, wv) in zip(g, pts)):
        fail(f"'{tag}': TensorBoard {g} vs metrics.jsonl {pts}")
    points += len(pts)
if any(x["world_size"] != 2 or x["batch_size"] != 8 for x in train):
    fail("world-size / batch-size values")
print(f"1. {len(want)} tags, {points} points equal metrics.jsonl; {records} records' CRC-32C equal the crc32c package's")

# num-zeros and params-norm count each parameter once in any layout: ZeRO-1 sums
# the shards over the data-parallel ranks (bit-identical to stage 0, so the zero
# count is equal too), TP 2 over the tensor-parallel ranks (LayerNorm weights,
# held by both, counted once), PP 2 over the stages (the tied embedding, held by
# the first and the last, counted once). Under TP and PP the summation order differs, and some
# gradients that are zero only up to rounding (the key bias: softmax ignores a
# shift shared by a row's scores) need not come out exactly 0: the zero count
# is compared for ZeRO-1 only.
for name, layout in (("zero1", ["--zero-stage", "1"]), ("tp2", ["--tensor-model-parallel-size", "2"]),
                     ("pp2", ["--pipeline-model-parallel-size", "2"])):
    cmd, d = base(name, 6, ["--nproc-per-node", "2", "--log-interval", "1", "--eval-interval", "100", "--log-num-zeros-in-grad",
                            "--log-params-norm", *layout])
    os.makedirs(d)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "train.log"), "w"))
    other = [x for x in map(json.loads, open(os.path.join(d, "metrics.jsonl"))) if "lr" in x]
    for a, b in zip(train, other):
        if (name == "zero1" and a["num_zeros"] != b["num_zeros"]) or not np.isclose(a["params_norm"], b["params_norm"], rtol=1e-5, atol=0):
            fail(f"{name}: iteration {a['iteration']}: num zeros {b['num_zeros']} / params norm {b['params_norm']}, "
                 f"2 data-parallel ranks: {a['num_zeros']} / {a['params_norm']}")
    print(f"   {name}: {'num zeros and ' if name == 'zero1' else ''}params norm equal the data-parallel run's (params norm rtol 1e-5)")

# 2. --tensorboard-log-interval 2.
cmd, d = base("interval", 6, ["--log-interval", "3", "--eval-interval", "100", "--tensorboard-log-interval", "2"])
os.makedirs(d)
subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "train.log"), "w"))
got = accumulate(os.path.join(d, "tb"))
if [s for s, _ in got["lm loss"]] != [2, 4, 6] or [s for s, _ in got["learning-rate vs samples"]] != [16, 32, 48]:
    fail(f"--tensorboard-log-interval 2: lm loss at {got['lm loss']}")
print("2. --tensorboard-log-interval 2: lm loss at iterations 2, 4, 6")

# 3. The last record cut short.
full = glob.glob(os.path.join(WORK, "full", "tb", "events.out.tfevents.*"))[0]
raw = open(full, "rb").read()
cut = os.path.join(WORK, "cut", "tb")
os.makedirs(cut)
open(os.path.join(cut, os.path.basename(full)), "wb").write(raw[:-7])
got_cut = accumulate(cut)
want_cut = accumulate(os.path.join(WORK, "full", "tb"))
lost = sum(map(len, want_cut.values())) - sum(map(len, got_cut.values()))
if lost != 1:
    fail(f"cutting 7 bytes lost {lost} points (expected the last one only)")
print("3. a truncated last record: TensorBoard reads every point before it")


# 4. SIGTERM to one rank.
def children(pid):
    try:
        return [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []


def sigterm_one_rank(name, extra):
    cmd, d = base(name, 100000, ["--nproc-per-node", "2", "--log-interval", "1000", "--eval-interval", "100000", *extra])
    os.makedirs(d)
    log = os.path.join(d, "train.log")
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    deadline = time.time() + 120
    while "TensorBoard events" not in open(log).read() or len(children(p.pid)) < 2:
        if time.time() > deadline or p.poll() is not None:
            p.kill()
            fail(f"{name}: the run did not start:\n" + open(log).read())
        time.sleep(0.2)
    time.sleep(3)  # some iterations
    os.kill(children(p.pid)[1], signal.SIGTERM)  # rank 1 only: rank 0 must learn of it
    try:
        rc = p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        fail(f"{name}: the run did not stop after SIGTERM:\n" + open(log).read())
    return rc, d, open(log).read()


rc, d, log = sigterm_one_rank("sigterm", [])
got = accumulate(os.path.join(d, "tb"))
steps = [s for s, _ in got.get("lm loss", [])]
if rc == 0 or "stopping after iteration" not in log or not steps or steps != list(range(1, len(steps) + 1)):
    fail(f"SIGTERM: exit {rc}, lm loss steps {steps[:5]}..{steps[-3:]}\n{log[-2000:]}")
n = len(steps)
if f"stopping after iteration {n} on SIGTERM" not in log:
    fail(f"SIGTERM: TensorBoard has {n} iterations, the log says otherwise:\n{log[-2000:]}")
print(f"4. SIGTERM to rank 1: both ranks stopped after iteration {n}, exit {rc}; TensorBoard reads lm loss 1..{n}")

rc, d, log = sigterm_one_rank("exit_handler", ["--exit-signal-handler", "--save", os.path.join(WORK, "exit_handler", "ckpt")])
saved = open(os.path.join(d, "ckpt", "latest_checkpointed_iteration.txt")).read().strip()
steps = [s for s, _ in accumulate(os.path.join(d, "tb")).get("lm loss", [])]
if rc != 0 or not steps or saved != str(steps[-1]) or f"exiting program after receiving SIGTERM at iteration {saved}" not in log:
    fail(f"--exit-signal-handler: exit {rc}, checkpoint {saved}, TensorBoard up to {steps[-1:]}\n{log[-2000:]}")
print(f"   with --exit-signal-handler: checkpoint of iteration {saved} saved, exit 0")
