"""Predicted peak memory against the CPU allocator's own records, one step each.

For each model and set-up (inference; one training step with SGD and with AdamW), the
prediction is footprint's traced peak above the memory alive before the step (weights,
buffers, inputs); the measurement runs the same step for real on the CPU under
torch.profiler with profile_memory=True and takes the peak of the cumulative sum of its
"[memory]" events (allocations and frees, in time order) above the start.

    python benchmarks/memory_cpu.py [--models resnet18,gpt2-small]

Target (issue 3): within 5% each.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

import torch_footprint as tfp
from torch_footprint.estimate.training import optimizer as make_optimizer
from torch_footprint.measure.measured import allocator_peak, one_step

ROOT = Path(__file__).resolve().parent.parent
GPT2_SMALL = ROOT / "src" / "torch_footprint" / "sources" / "configs" / "gpt2.json"

def tv(name: str) -> nn.Module:
    import torchvision

    return torchvision.models.get_model(name, weights=None)


def gpt2_small() -> nn.Module:
    import transformers

    data = json.loads(GPT2_SMALL.read_text())
    data.pop("model_type")
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**data))


MODELS = {
    "resnet18": ("resnet18", lambda: tv("resnet18"), {"x": ((8, 3, 224, 224), torch.float32)}),
    "mobilenet_v2": ("mobilenet_v2", lambda: tv("mobilenet_v2"), {"x": ((8, 3, 224, 224), torch.float32)}),
    "vit_b_16": ("vit_b_16", lambda: tv("vit_b_16"), {"x": ((2, 3, 224, 224), torch.float32)}),
    "gpt2-small": ("hf:gpt2", gpt2_small, {"input_ids": ((1, 512), torch.int64)}),
}
SETUPS = {"inference": (False, None), "train sgd": (True, "sgd"), "train adamw": (True, "adamw")}


def predict(ref: str, inputs: dict[str, Any], train: bool, opt: str | None) -> int:
    specs: Any
    if "input_ids" in inputs:
        specs = {"input_ids": "{},{}:int64".format(*inputs["input_ids"][0])}
    else:
        specs = ",".join(str(d) for d in inputs["x"][0])
    est = tfp.memory(ref, specs, train=train, optimizer=opt)
    return est.peak.above_baseline


def measure(build: Any, inputs: dict[str, Any], train: bool, opt: str | None) -> int:
    torch.manual_seed(0)
    model = build()
    model.train(train)
    if "input_ids" in inputs:
        args: tuple[Any, ...] = ()
        kwargs = {"input_ids": torch.zeros(inputs["input_ids"][0], dtype=torch.int64), "use_cache": False}
    else:
        args, kwargs = (torch.randn(inputs["x"][0]),), {}
    optimizer = make_optimizer(opt)(list(model.parameters())) if train and opt else None
    gc.collect()
    return allocator_peak(lambda: one_step(model, args, kwargs, optimizer, train))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--setups", default=",".join(SETUPS))
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rows = []
    for name in args.models.split(","):
        ref, build, inputs = MODELS[name]
        for setup in args.setups.split(","):
            train, opt = SETUPS[setup]
            t = time.perf_counter()
            pred = predict(ref, inputs, train, opt)
            tp = time.perf_counter() - t
            meas = measure(build, inputs, train, opt)
            err = (pred - meas) / meas
            rows.append((name, setup, pred, meas, err, tp))
            print(f"{name:14s} {setup:12s} predicted {pred / 2**20:9.1f} MiB  measured {meas / 2**20:9.1f} MiB  "
                  f"error {100 * err:+6.1f}%  ({tp:.1f} s to predict)", flush=True)
    print()
    within = sum(abs(r[4]) <= 0.05 for r in rows)
    print(f"within 5%: {within}/{len(rows)}; median |error| "
          f"{100 * sorted(abs(r[4]) for r in rows)[len(rows) // 2]:.1f}%")


if __name__ == "__main__":
    main()
