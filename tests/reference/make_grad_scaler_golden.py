#!/usr/bin/env python3
"""Golden of tests/data/grad_scaler/dynamic.json: megatron-core's own
DynamicGradScaler (megatron/core/optimizer/grad_scaler.py) stepped over
sequences of overflow / clean steps; tests/unit/loss_scaler_test.cpp holds
trainer/zero/loss_scaler.h to the scale after every step.

megatron-core puts its tensors on 'cuda'; this script runs the same code on the
CPU by giving the module a torch whose tensor() ignores the device.

  .venv/bin/python tests/reference/make_grad_scaler_golden.py tests/data/grad_scaler/dynamic.json
"""
import json
import random
import sys

import torch
from megatron.core.optimizer import grad_scaler


class CpuTorch:
    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def tensor(*args, **kwargs):
        kwargs["device"] = "cpu"
        return torch.tensor(*args, **kwargs)


grad_scaler.torch = CpuTorch()


def run(initial, min_scale, window, hysteresis, found_inf):
    s = grad_scaler.DynamicGradScaler(initial_scale=initial, min_scale=min_scale, growth_factor=2.0,
                                      backoff_factor=0.5, growth_interval=window, hysteresis=hysteresis)
    scales = []
    for inf in found_inf:
        s.update(bool(inf))
        scales.append(float(s.scale.item()))
    return {"initial": initial, "min_scale": min_scale, "window": window, "hysteresis": hysteresis,
            "found_inf": found_inf, "scale": scales}


def main():
    rng = random.Random(1234)
    cases = []
    # Megatron's defaults (--initial-loss-scale 2^32, --min-loss-scale 1, window 1000, hysteresis 2):
    # an overflow burst at the start (the scale falls from 2^32), then mostly clean with rare overflows.
    seq = [1] * 40 + [1 if rng.random() < 0.002 else 0 for _ in range(4000)]
    cases.append(run(2.0**32, 1.0, 1000, 2, seq))
    # A short window and hysteresis 3, random overflows: every branch many times, the minimum reached.
    seq = [1 if rng.random() < 0.3 else 0 for _ in range(3000)]
    cases.append(run(2.0**16, 256.0, 7, 3, seq))
    # Hysteresis 1: every overflow halves at once.
    seq = [1 if rng.random() < 0.5 else 0 for _ in range(500)]
    cases.append(run(1024.0, 1.0, 3, 1, seq))
    with open(sys.argv[1], "w") as f:
        json.dump({"generator": "tests/reference/make_grad_scaler_golden.py", "cases": cases}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
