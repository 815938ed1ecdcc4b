"""Training steps on this GPU, their kernels by operator class, beside footprint's prediction.

For ResNet-50 at batch 256 under bf16 autocast in NCHW and in channels-last, ResNet-50 in
fp32 (TF32 convolutions, PyTorch's default) NCHW at batch 128, and ViT-B/16 at batch 64
under bf16 autocast: SGD with momentum, synthetic data, cross-entropy loss. Each case:

* steps timed with CUDA events after a warm-up (median step, samples per second);
* a few steps under torch.profiler: CUDA kernel time per step, summed by operator class
  (convolution forward / dgrad / wgrad, NCHW<->NHWC transposes, matmul, attention, batch
  norm forward / backward, optimizer, other), and the kernels that take the most time;
* footprint's prediction for the same step on this GPU's database row (datasheet ceilings,
  default efficiencies; skipped when the GPU is not in the database): samples per second
  and predicted time per class (device time; the per-operator launch overhead apart).

    PYTHONPATH=src python benchmarks/train_kernels.py --device cuda [--out results.json]

JSON goes to --out, else $OUT/train-kernels.json when $OUT is set. About a minute on an H100.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CLASSES = ("conv_fwd", "conv_dgrad", "conv_wgrad", "conv_bwd", "transpose", "matmul", "attention", "bn_fwd",
           "bn_bwd", "optimizer", "other")

# kernel name -> class; first match wins (cuDNN, cuBLAS/CUTLASS and PyTorch's own kernel names)
KERNEL_CLASSES: list[tuple[str, str]] = [
    ("transpose", r"nchwtonhwc|nhwctonchw|transpose"),
    ("conv_dgrad", r"dgrad"),
    ("conv_wgrad", r"wgrad"),
    ("bn_bwd", r"batch_norm_backward|bn_bw|batchnorm_bw|bn_bwd"),
    ("bn_fwd", r"batch_norm|bn_fw|batchnorm"),
    ("optimizer", r"multi_tensor_apply|fused_adam|fused_sgd|foreach"),
    ("attention", r"flash|fmha|attention|sdpa"),
    ("conv_fwd", r"fprop|conv|implicit_convolve|precomputed_convolve|winograd|fft"),
    ("matmul", r"gemm|cutlass|cublas|xmma|s\d+_"),
]


def kernel_class(name: str) -> str:
    low = name.lower()
    for cls, pattern in KERNEL_CLASSES:
        if re.search(pattern, low):
            return cls
    return "other"


def op_class(op: str, phase: str) -> str:
    """The class of one of footprint's traced operators."""
    if phase == "optimizer":
        return "optimizer"
    if "convolution_backward" in op:
        return "conv_bwd"
    if "convolution" in op:
        return "conv_fwd"
    if "batch_norm_backward" in op:
        return "bn_bwd"
    if "batch_norm" in op:
        return "bn_fwd"
    if "attention" in op or "_flash" in op or "_efficient" in op:
        return "attention"
    if re.search(r"\.(mm|addmm|bmm|baddbmm|matmul|linear)\b", op):
        return "matmul"
    return "other"


@dataclass(frozen=True)
class Case:
    name: str
    model: str  # torchvision name
    batch: int
    precision: str  # footprint's precision: bf16-mixed or fp32
    channels_last: bool


CASES = [
    Case("resnet50 bf16 NCHW b256", "resnet50", 256, "bf16-mixed", False),
    Case("resnet50 bf16 NHWC b256", "resnet50", 256, "bf16-mixed", True),
    Case("resnet50 tf32 NCHW b128", "resnet50", 128, "fp32", False),
    Case("vit_b_16 bf16 b64", "vit_b_16", 64, "bf16-mixed", False),
]


def build_step(case: Case, device: str) -> Callable[[], None]:
    import torch
    import torchvision

    model = getattr(torchvision.models, case.model)().to(device)
    x = torch.randn(case.batch, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (case.batch,), device=device)
    if case.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)  # foreach on CUDA by default
    loss_fn = torch.nn.CrossEntropyLoss()
    amp = case.precision == "bf16-mixed"

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    return step


def measure(step: Callable[[], None], warmup: int, steps: int, profiled: int) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(profiled):
            step()
        torch.cuda.synchronize()
    by_class = dict.fromkeys(CLASSES, 0.0)
    by_kernel: dict[str, list[float]] = {}
    for evt in prof.events():
        if evt.device_type != torch.autograd.DeviceType.CUDA:
            continue
        dur = evt.device_time / 1e6 / profiled  # us -> s per step
        by_class[kernel_class(evt.name)] += dur
        k = by_kernel.setdefault(evt.name, [0.0, 0])
        k[0] += dur
        k[1] += 1
    top = sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[:15]
    return {"step_s": statistics.median(times), "steps": steps, "kernel_s_by_class": by_class,
            "kernel_s": sum(by_class.values()), "kernels_per_step": sum(v[1] for v in by_kernel.values()) / profiled,
            "top_kernels": [{"name": n[:120], "class": kernel_class(n), "s_per_step": v[0],
                             "calls_per_step": v[1] / profiled} for n, v in top]}


def predict(case: Case, row: Any) -> dict[str, Any]:
    from torch_footprint.estimate.kernels.roofline import estimate_latency
    from torch_footprint.estimate.workload import trace_step
    from torch_footprint.settings import Training, Workload

    # torch.optim.SGD runs foreach (multi-tensor) kernels on CUDA by default
    trace = trace_step(Workload(case.model, batch=case.batch, precision=case.precision),
                       Training(train=True, optimizer="momentum-foreach"))[0]
    pred = estimate_latency(trace, row, layout="nhwc" if case.channels_last else "nchw")
    by_class = dict.fromkeys(CLASSES, 0.0)
    for o in pred.ops:
        by_class[op_class(o.op, o.phase)] += max(o.compute_s, o.memory_s)
        by_class["transpose"] += o.kernels_s
    return {"step_s": pred.time_s, "device_s_by_class": by_class,
            "overhead_s": sum(o.overhead_s for o in pred.ops),
            "kernels": sum(1 for o in pred.ops if o.kind != "view")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="a CUDA device (default cuda)")
    ap.add_argument("--out", default=None, help="JSON file (default $OUT/train-kernels.json when $OUT is set)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=15, help="timed steps per case")
    ap.add_argument("--profiled", type=int, default=3, help="steps under torch.profiler per case")
    ap.add_argument("--cases", default=None, help="comma-separated case numbers (1-based) to run; default all")
    args = ap.parse_args(argv)

    import torch

    if not args.device.startswith("cuda") or not torch.cuda.is_available():
        print(f"needs a CUDA device (got --device {args.device}, CUDA available: {torch.cuda.is_available()})")
        return 2
    from torch_footprint.hardware import list as all_rows
    from torch_footprint.hardware.local import find_local_gpu

    row = find_local_gpu(all_rows())
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}  ·  database row: {row.id if row else 'none (prediction skipped)'}  ·  torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}", flush=True)
    picked = [CASES[int(i) - 1] for i in args.cases.split(",")] if args.cases else CASES
    results = []
    for case in picked:
        t0 = time.perf_counter()
        m = measure(build_step(case, args.device), args.warmup, args.steps, args.profiled)
        torch.cuda.empty_cache()
        p = predict(case, row) if row else None
        results.append({"case": case.name, "model": case.model, "batch": case.batch, "precision": case.precision,
                        "channels_last": case.channels_last, "measured": m, "predicted": p})
        rate = case.batch / m["step_s"]
        line = f"\n{case.name}: measured {1e3 * m['step_s']:.1f} ms/step = {rate:,.0f} samples/s"
        if p:
            line += (f"; predicted {1e3 * p['step_s']:.1f} ms = {case.batch / p['step_s']:,.0f} samples/s "
                     f"({100 * (case.batch / p['step_s'] / rate - 1):+.0f}%)")
        print(line + f"  [{time.perf_counter() - t0:.0f} s]")
        print(f"  kernels per step: measured {m['kernels_per_step']:.0f}"
              + (f", predicted operators {p['kernels']} (launch overhead {1e3 * p['overhead_s']:.1f} ms)" if p else ""))
        print(f"  {'class':12s} {'measured ms':>12s} {'predicted ms':>13s}")
        for cls in CLASSES:
            pv = p["device_s_by_class"][cls] if p else 0.0
            mv = m["kernel_s_by_class"][cls]
            if mv or pv:
                print(f"  {cls:12s} {1e3 * mv:12.2f} {1e3 * pv:13.2f}")
        tops = [f"{k['name'][:60]} {1e3 * k['s_per_step']:.2f} ms x{k['calls_per_step']:.0f}"
                for k in m["top_kernels"][:6]]
        print("  top kernels: " + "; ".join(tops), flush=True)
    out = args.out or (os.path.join(os.environ["OUT"], "train-kernels.json") if os.environ.get("OUT") else None)
    if out:
        with open(out, "w") as f:
            json.dump({"gpu": gpu, "row": row.id if row else None, "torch": torch.__version__,
                       "cudnn": torch.backends.cudnn.version(), "cases": results}, f, indent=1)
        print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
