"""The kernel-time model against kernels measured on a GPU (benchmarks/gpu_measure.py's JSON).

GEMMs by shape and dtype (torch.matmul, cuBLAS; fp8 through torch._scaled_mm), PyTorch's
flash attention back end (FlashAttention-2) and its own choice (cuDNN's attention on an H100)
forward at 512 to 16k tokens, and
copies and adds of 256 MiB or more (kernels of 50 us or more: below, one timed launch measures
the host's dispatch) are priced as ``fit_kernels.py`` prices the published
kernel rows, with the shipped constants and with the constants refitted without any published
row of the measured GPU (its leave-one-GPU-out). Then the layer norms, RMS norms and softmaxes of
the memory section, each traced for that GPU and priced as ``predict`` prices it (no constant of
the model is fitted to them). Nothing is fitted to these measurements.

    python benchmarks/validate_measured_kernels.py [benchmarks/results/gpu-measure-h100*.json ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import tomllib
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from fit_kernels import attention_rows, bandwidth_rows, errors, fit, gemm_rows, summary  # noqa: E402

from torch_footprint.estimate.kernels import constants  # noqa: E402
from torch_footprint.estimate.kernels.sdpa import sdpa_kernel, sm_of  # noqa: E402
from torch_footprint.hardware import list as all_rows  # noqa: E402
from torch_footprint.hardware.local import find_local_gpu  # noqa: E402

# gpu_measure.py times one launch between two CUDA events: below this the time is the host's
# dispatch (its 256^3 to 1024^3 products all take 21-26 us, whatever their size), not the kernel's
HOST_BOUND_S = 50e-6
DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "tf32": "tf32", "fp8_e4m3": "fp8"}


def measured(paths: list[str]) -> dict[str, list[dict[str, Any]]]:
    """gpu_measure.py's kernel cases in published/kernels.toml's form."""
    data: dict[str, list[dict[str, Any]]] = {"gemm": [], "attention": [], "bandwidth": []}
    for path in paths:
        doc = json.loads(Path(path).read_text())
        acc = find_local_gpu(all_rows(), name=doc["environment"].get("name"))
        if acc is None:
            sys.exit(f"{path}: {doc['environment'].get('name')} is not in the database")
        src = f"measured: {Path(path).name}"
        for r in doc["sections"].get("gemm", []):
            if "tflops" in r and r.get("dtype") in DTYPES and r["median_s"] >= HOST_BOUND_S:
                data["gemm"].append({"gpu": acc.id, "library": "cublasLt" if r["op"] == "scaled_mm" else "cublas",
                                     "dtype": DTYPES[r["dtype"]], "m": r["m"], "n": r["n"], "k": r["k"],
                                     "time_us": r["median_s"] * 1e6, "source": src})
        for r in doc["sections"].get("attention", []) + doc["sections"].get("attention_long", []):
            if "fwd_s" not in r:
                continue
            # the flash back end is FlashAttention-2; PyTorch's own choice is the kernel predict prices
            kernel = "flash2" if r["backend"] == "flash" else sdpa_kernel(acc, "bf16", r["head_dim"], r["head_dim"])
            base = {"gpu": acc.id, "kernel": kernel, "batch": r["batch"], "heads": r["heads"], "seqlen": r["seq"],
                    "head_dim": r["head_dim"], "causal": r["causal"], "dtype": "bf16", "source": src}
            # the forward alone: gpu_measure.py's backward (forward + backward, less a forward) also
            # adds each repetition's gradients into q.grad, k.grad and v.grad, three elementwise
            # passes over 192 MiB that are no part of the attention kernel
            data["attention"].append({**base, "direction": "fwd", "tflops": r["fwd_tflops"]})
        for r in doc["sections"].get("memory", []):
            if r.get("op") in ("copy", "add"):
                data["bandwidth"].append({"gpu": acc.id, "kind": r["op"], "bytes": r["bytes"], "gbs": r["gbs"],
                                          "source": src})
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", default=[str(ROOT / "benchmarks" / "results" / "gpu-measure-h100.json"),
                                                 str(ROOT / "benchmarks" / "results" / "gpu-measure-h100-2.json")])
    args = ap.parse_args()
    data = measured(args.paths)
    rows = {"gemm": gemm_rows(data), "attention": attention_rows(data), "bandwidth": bandwidth_rows(data)}
    gpus = {r.gpu.id for family in rows.values() for r in family}
    published = tomllib.loads((ROOT / "benchmarks" / "published" / "kernels.toml").read_text())
    pub = {"bandwidth": bandwidth_rows(published), "gemm": gemm_rows(published),
           "attention": attention_rows(published)}
    held = fit({f: [r for r in v if r.gpu.id not in gpus] for f, v in pub.items()}, constants.KernelConstants())
    print(f"measured on {', '.join(sorted(gpus))}; constants shipped, and refitted without "
          f"{sum(r.gpu.id in gpus for v in pub.values() for r in v)} published rows of that GPU")
    by: dict[str, list[float]] = defaultdict(list)
    for family, family_rows in rows.items():
        shipped, left = errors(family_rows, constants.current()), errors(family_rows, held)
        for r, a, b in zip(family_rows, shipped, left, strict=True):
            print(f"{family:9s} {r.label:34s} measured {r.measured_s * 1e6:10.1f} us  shipped {a:+7.1%}  "
                  f"left out {b:+7.1%}")
        by[f"{family}, shipped"] += shipped
        by[f"{family}, GPU left out"] += left
        by["all, shipped"] += shipped
        by["all, GPU left out"] += left
    print()
    for name in sorted(by):
        print(f"{name:26s} {summary(by[name])}")
    rowwise(args.paths)


class _RowOp(torch.nn.Module):
    """One of gpu_measure.py's row-wise calls over the last dimension."""

    def __init__(self, op: str, width: int) -> None:
        super().__init__()
        self.op = op
        self.weight = torch.nn.Parameter(torch.ones(width, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        F = torch.nn.functional
        if self.op == "layer_norm":
            return F.layer_norm(x, (x.shape[-1],), self.weight, self.weight)
        if self.op == "rms_norm":
            return F.rms_norm(x, (x.shape[-1],), self.weight)
        return torch.softmax(x, -1)


def rowwise(paths: list[str]) -> None:
    """gpu_measure.py's layer norms, RMS norms and softmaxes (bf16), each traced for the GPU that ran
    it and priced as ``predict`` prices it (its device time: the kernel, without the host's launch)."""
    import torch_footprint as tfp
    from torch_footprint.analysis import Profile
    from torch_footprint.api import _records
    from torch_footprint.estimate.workload import trace_step

    errs: dict[str, list[float]] = defaultdict(list)
    for path in paths:
        doc = json.loads(Path(path).read_text())
        acc = find_local_gpu(all_rows(), name=doc["environment"].get("name"))
        for r in doc["sections"].get("memory", []):
            if r.get("op") not in ("layer_norm", "rms_norm", "softmax"):
                continue
            w, t = _records("profile", {"precision": "bf16"}, _RowOp(r["op"], r["width"]),
                            f"{r['rows']},{r['width']}:bfloat16")
            pred = tfp.predict(Profile(trace_step(w, t, cuda_sm=sm_of(acc))[0], []), acc.id)
            device = sum(max(o.compute_s, o.memory_s) for o in pred.ops)
            err = device / r["median_s"] - 1
            errs[r["op"]].append(err)
            print(f"row-wise  {acc.id:9s} {r['op']:10s} {r['rows']:6d} x {r['width']:5d}  measured "
                  f"{r['median_s'] * 1e6:8.1f} us  predicted {device * 1e6:8.1f} us  {err:+7.1%}")
    for op, e in sorted(errs.items()):
        print(f"row-wise {op:17s} {summary(e)}")


if __name__ == "__main__":
    main()
