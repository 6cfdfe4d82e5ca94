#!/usr/bin/env python3
"""pretrain_gpt.py: runs zerolm's pretrain_gpt binary (installed beside this file) with the same
arguments, for launchers that start Python scripts: `python -m torch.distributed.launch ...
pretrain_gpt.py <flags>` (which passes --local-rank=N and cannot start a binary without
--use-env), DeepSpeed's `deepspeed pretrain_gpt.py <flags>` (--local_rank=N), accelerate.
The launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...) is kept as it is."""
import os
import sys

binary = os.path.join(os.path.dirname(os.path.realpath(__file__)), "pretrain_gpt")
if not os.access(binary, os.X_OK):
    sys.exit(f"pretrain_gpt.py: no executable {binary} beside this script (build zerolm: make)")
os.execv(binary, [binary] + sys.argv[1:])
