"""Writes the torch.save fixtures of tests/unit/trainer/torch_pickle_test.cpp with
the project's torch (scripts/requirements.txt): every value kind a Megatron-LM
or DeepSpeed checkpoint holds, and one file whose pickle calls os.system.

  .venv/bin/python tests/data/checkpoint/make_fixtures.py tests/data/checkpoint
"""
import argparse
import collections
import os
import sys

import numpy as np
import torch


class Evil:
    def __reduce__(self):
        return (os.system, ("echo this must never run",))


def main(out):
    d = collections.OrderedDict()
    d["f32"] = torch.arange(12, dtype=torch.float32).view(3, 4) * 0.5
    d["bf16"] = (torch.arange(6, dtype=torch.float32) - 2.5).to(torch.bfloat16)
    d["f16"] = (torch.arange(5, dtype=torch.float32) / 4).half()
    d["i64"] = torch.tensor([-3, 0, 2**40])
    d["bool"] = torch.tensor([True, False, True])
    d["u8"] = torch.arange(4, dtype=torch.uint8)
    base = torch.arange(20, dtype=torch.float32)
    d["view_t"] = base.view(4, 5).t()  # not contiguous; shares its storage with "slice"
    d["slice"] = base[7:12]
    d["scalar"] = torch.tensor(3.25, dtype=torch.float64)
    d["empty"] = torch.zeros(0, 3)
    d["param"] = torch.nn.Parameter(torch.ones(2, 2))
    d["nested"] = {"list": [1, -1, 255, 256, 65535, 65536, -2**31, 2**31, -2**63, 2**63 - 1],
                   "tuple": (1.5, "x"), "none": None, "t": True, "f": False, "str": "h\u00e9llo \u2713"}
    d["args"] = argparse.Namespace(num_layers=2, hidden_size=64, params_dtype=torch.bfloat16, name="gpt")
    d["np"] = np.arange(3, dtype=np.int64)
    d["size"] = torch.Size([2, 3])
    d["bytes"] = b"\x00\xffabc"
    d["iteration"] = 150
    d["lr"] = 1.5e-4
    torch.save(d, os.path.join(out, "values.pt"))
    torch.save({"model": {"w": torch.ones(2)}, "hook": Evil()}, os.path.join(out, "evil.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
