"""GPU validation in one command: latency, batch search with an out-of-memory on purpose,
and predicted memory against torch.cuda.max_memory_allocated. Writes one JSON file.

    PYTHONPATH=src python3 benchmarks/gpu_validate.py [--out benchmarks/results/gpu-validate.json]

Checks: the timer on CUDA (events, synchronised); the batch search
recovers from a real CUDA out-of-memory and memory returns to its baseline afterwards;
the predicted peak (footprint memory, for cuda) against max_memory_allocated, reset
before each step, for inference and a training step with SGD and AdamW: target 5%;
`footprint calibrate --device cuda`, then the latency (per-kernel model over the calibrated
plateaus and host costs, and over the datasheet row) against the measured latency of twelve
torchvision models at batch 1 and 16, the four the datasheet's host cost was read from
reported apart: target 20% (median).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

import torch_footprint as tfp
from torch_footprint.measure.measured import one_step
from torch_footprint.measure.search import largest_runnable_batch
from torch_footprint.trace.setups import optimizer as make_optimizer


def memory_check(name: str, build: Any, inputs: dict[str, Any], spec: Any, train: bool, opt: str | None) -> dict:
    torch.manual_seed(0)
    model = build().cuda().train(train)
    optimizer = make_optimizer(opt)(list(model.parameters())) if train and opt else None
    kwargs = {k: v.cuda() for k, v in inputs.items()}
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    one_step(model, (), kwargs, optimizer, train)
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated() - base
    est = tfp.memory(name, spec, train=train, optimizer=opt, device="cuda")
    pred = est.peak.above_baseline
    del model, optimizer
    gc.collect()
    torch.cuda.empty_cache()
    return {"model": name, "train": train, "optimizer": opt, "predicted": pred, "measured": measured,
            "error": (pred - measured) / measured if measured else None}


# the models HOST_OP_S (estimate/kernels/roofline.py) was read from; the others were not looked at
SEEN = ("resnet18", "resnet50", "mobilenet_v2", "vit_b_16")
NOT_SEEN = ("efficientnet_b0", "convnext_tiny", "densenet121", "regnet_y_400mf", "shufflenet_v2_x1_0",
            "swin_t", "mobilenet_v3_large", "resnext50_32x4d")


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def roofline_check(models: tuple[str, ...] = SEEN + NOT_SEEN) -> dict[str, Any]:
    """Predicted against measured latency on this GPU: after `footprint calibrate --device cuda`
    and from the datasheet row, both through the per-kernel model."""
    from dataclasses import replace

    from torch_footprint.estimate.kernels.roofline import estimate_latency as predict
    from torch_footprint.hardware import list as all_rows
    from torch_footprint.hardware.local import find_local_gpu
    from torch_footprint.measure.calibrate import calibrate

    cal = calibrate("cuda")
    print(f"calibration: per operator {cal['op_overhead_us']:.1f} us, per view {cal['view_overhead_us']:.1f} us, "
          f"tiny calls (us) {cal.get('tiny_call_us')}, matmul TFLOP/s {cal['matmul_tflops']}, "
          f"copy {cal['copy_gbs']:.0f} GB/s", flush=True)
    row = find_local_gpu(all_rows())
    out: dict[str, Any] = {"calibration": cal, "row": row.id if row else None, "cases": []}
    if row is None:
        print(f"{torch.cuda.get_device_name()} is not in the database: datasheet prediction skipped")
    base = row or tfp.hardware.get("h100-sxm")
    calibrated = replace(base, calibrated=cal)
    for name in models:
        for b in (1, 16):
            trace = tfp.profile(name, f"{b},3,224,224").trace
            pc = predict(trace, calibrated)
            pd = predict(trace, row) if row else None
            m = tfp.bench(name, f"{b},3,224,224", device="cuda", min_reps=50, min_time=1.0).points[0].stats.median
            case = {"model": name, "batch": b, "seen": name in SEEN, "measured_s": m, "calibrated_s": pc.time_s,
                    "calibrated_error": pc.time_s / m - 1, "datasheet_s": pd.time_s if pd else None,
                    "datasheet_error": pd.time_s / m - 1 if pd else None, "lower_bound_s": pc.lower_bound_s}
            out["cases"].append(case)
            print(f"{name:18s} b={b:3d} measured {m * 1e3:8.3f} ms  calibrated {pc.time_s * 1e3:8.3f} ms "
                  f"({case['calibrated_error']:+.1%})" + (f"  datasheet {pd.time_s * 1e3:8.3f} ms "
                                                          f"({case['datasheet_error']:+.1%})" if pd else ""),
                  flush=True)
    for label, seen in (("seen", True), ("not seen", False)):
        group = [c for c in out["cases"] if c["seen"] == seen]
        for kind in ("calibrated", "datasheet"):
            errs = [abs(c[f"{kind}_error"]) for c in group if c[f"{kind}_error"] is not None]
            if errs:
                out[f"median_abs_error_{kind}_{label.replace(' ', '_')}"] = med = _median(errs)
                print(f"median |error| {kind:10s} {label:8s} {len(errs):2d} cases: {med:.1%}, worst "
                      f"{max(errs):.1%}  [target 20%]")
    out["median_abs_error_calibrated"] = _median([abs(c["calibrated_error"]) for c in out["cases"]])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "benchmarks/results"), "gpu-validate.json"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this script validates the GPU path")
    import torchvision

    report: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    # 1. latency with CUDA events
    lat = tfp.bench("resnet50", device="cuda", batches="1,32", min_reps=50, min_time=2.0)
    report["latency"] = [p.to_dict() for p in lat.points]
    # 2. batch search with a real out-of-memory: training resnet50 until the GPU is full
    model: Any = torchvision.models.resnet50().cuda().train()
    opt: Any = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()

    def step(b: int) -> None:
        x = torch.randn(b, 3, 224, 224, device="cuda")
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()
        torch.cuda.synchronize()

    t = time.perf_counter()
    res = largest_runnable_batch(step, start=64)
    opt.zero_grad(set_to_none=True)
    gc.collect()
    torch.cuda.empty_cache()
    after = torch.cuda.memory_allocated()
    report["batch_search"] = {"largest_batch": res.batch, "tried": res.tried, "seconds": time.perf_counter() - t,
                              "ooms": sum(not ok for _, ok in res.tried), "allocated_before": baseline,
                              "allocated_after": after, "returned_to_baseline": after == baseline}
    model = opt = None  # let the search's model go before the memory checks
    gc.collect()
    torch.cuda.empty_cache()
    # 3. predicted memory against max_memory_allocated
    checks = []
    for name, builder, size in (("resnet18", torchvision.models.resnet18, 32),
                                ("mobilenet_v2", torchvision.models.mobilenet_v2, 32),
                                ("vit_b_16", torchvision.models.vit_b_16, 8)):
        for train, o in ((False, None), (True, "sgd"), (True, "adamw")):
            checks.append(memory_check(name, builder, {"x": torch.randn(size, 3, 224, 224)},
                                       f"{size},3,224,224", train, o))
            c = checks[-1]
            print(f"{name:14s} train={train!s:5s} {o or '':6s} predicted {c['predicted'] / 2**20:9.1f} MiB "
                  f"measured {c['measured'] / 2**20:9.1f} MiB error {100 * c['error']:+.1f}%", flush=True)
    report["memory"] = checks
    # 4. roofline latency against the measurement
    report["roofline"] = roofline_check()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
