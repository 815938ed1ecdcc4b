"""Measurements on a GPU for the kernel-time model's next mechanisms: nothing here predicts.

Sections, in order:

* ``sustained``: one bf16 product of 8192 x 8192 x 8192 run back to back for ``--sustain-s``
  seconds; every half second the rate over that half second (CUDA events) beside the board's SM
  clock, power draw and temperature (NVML): whether a long step runs at the clocks of a short
  benchmark;
* ``rows``: layer norm, RMS norm and softmax over the last dimension, forward and forward +
  backward, bf16 and fp32, at widths 64 to 8192 with 2**26 elements each (rows = 2**26 / width):
  how a row-wise kernel's time grows with its rows and its width;
* ``strided``: a copy that makes a transposed view contiguous (``x.transpose(1, 2).contiguous()``,
  the (batch, heads, tokens, head size) shapes attention code makes), against a contiguous copy of
  the same bytes; and an add of a bf16 and an fp32 tensor (PyTorch's casting loop) against a bf16
  add;
* ``loops``: adds, multiplies, copies and activations by the loop PyTorch's CUDA elementwise kernels
  run for them (contiguous, an operand transposed or broadcast, a cast between dtypes).

    PYTHONPATH=src python benchmarks/gpu_kernel_probe.py [--out FILE.json] [--sustain-s 20]
    python benchmarks/gpu_kernel_probe.py --smoke --device cpu     # the code paths, tiny sizes

JSON goes to --out, else $OUT/gpu-kernel-probe.json, rewritten whole after every section.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_measure import Timer, environment, run_section  # noqa: E402


def _nvml() -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no NVML (a CPU run, or the package missing): the rates alone
        return None


def sustained(dev: str, timer: Timer, smoke: bool, seconds: float) -> list[dict[str, Any]]:
    n = 256 if smoke else 8192
    dtype = torch.bfloat16 if dev.startswith("cuda") else torch.float32
    a, b = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(2))
    nv = _nvml() if dev.startswith("cuda") else None
    handle = nv.nvmlDeviceGetHandleByIndex(0) if nv else None
    out = []
    start = time.perf_counter()
    while time.perf_counter() - start < (1.0 if smoke else seconds):
        t0 = time.perf_counter()
        calls = 0
        if timer.cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        while time.perf_counter() - t0 < 0.5:
            for _ in range(8):
                torch.matmul(a, b)
            calls += 8
            if timer.cuda:
                torch.cuda.synchronize()
        if timer.cuda:
            e1.record()
            e1.synchronize()
            busy = e0.elapsed_time(e1) / 1e3
        else:
            busy = time.perf_counter() - t0
        row = {"t_s": time.perf_counter() - start, "tflops": 2 * n**3 * calls / busy / 1e12}
        if nv:
            row.update(sm_mhz=nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM),
                       power_w=nv.nvmlDeviceGetPowerUsage(handle) / 1e3,
                       temp_c=nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
        out.append(row)
        print("sustained " + " ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
    return out


def rows(dev: str, timer: Timer, smoke: bool) -> list[dict[str, Any]]:
    F = torch.nn.functional
    total = 2**12 if smoke else 2**26
    widths = (64, 256) if smoke else (64, 128, 256, 384, 512, 768, 1024, 2048, 4096, 8192)
    dtypes = (torch.float32,) if not dev.startswith("cuda") else (torch.bfloat16, torch.float32)
    out = []
    for dtype in dtypes:
        for width in widths:
            x = torch.randn(total // width, width, device=dev, dtype=dtype, requires_grad=True)
            w = torch.ones(width, device=dev, dtype=dtype, requires_grad=True)
            g = torch.randn_like(x)
            for op, fn in (("layer_norm", lambda x=x, w=w: F.layer_norm(x, (x.shape[-1],), w, w)),
                           ("rms_norm", lambda x=x, w=w: F.rms_norm(x, (x.shape[-1],), w)),
                           ("softmax", lambda x=x: torch.softmax(x, -1))):
                with torch.no_grad():
                    fwd = timer(fn, warmup=3, reps=20, max_s=0.2)

                def both(fn: Any = fn, g: torch.Tensor = g, wrt: tuple = (x,) if op == "softmax" else (x, w)) -> None:
                    torch.autograd.grad(fn(), wrt, g)

                fb = timer(both, warmup=3, reps=20, max_s=0.3)
                out.append({"op": op, "dtype": str(dtype), "rows": total // width, "width": width,
                            "fwd_s": fwd["median_s"], "fwd_bwd_s": fb["median_s"]})
                print(f"rows {op:10s} {str(dtype):15s} {total // width:8d} x {width:5d} "
                      f"fwd {1e6 * fwd['median_s']:8.1f} us fwd+bwd {1e6 * fb['median_s']:8.1f} us", flush=True)
            del x, w, g
    return out


def strided(dev: str, timer: Timer, smoke: bool) -> list[dict[str, Any]]:
    dtype = torch.bfloat16 if dev.startswith("cuda") else torch.float32
    shapes = [(2, 4, 32, 16)] if smoke else [(256, 197, 12, 64), (8, 2048, 32, 128), (8, 2048, 8, 128),
                                             (64, 1024, 16, 64), (4, 4096, 64, 128)]
    out = []
    for shape in shapes:
        x = torch.randn(*shape, device=dev, dtype=dtype)
        t_view = x.transpose(1, 2)
        flat = x.flatten()
        for what, fn in (("transpose_contiguous", lambda v=t_view: v.contiguous()),
                         ("contiguous_clone", lambda f=flat: f.clone())):
            t = timer(fn, warmup=3, reps=20, max_s=0.2)
            nbytes = 2 * x.numel() * x.element_size()
            out.append({"op": what, "shape": list(shape), "dtype": str(dtype), "bytes": nbytes, **t})
            print(f"strided {what:22s} {shape} {1e6 * t['median_s']:8.1f} us "
                  f"{2 * x.numel() * x.element_size() / t['median_s'] / 1e9:8.1f} GB/s", flush=True)
        y32 = torch.randn(*shape, device=dev, dtype=torch.float32)
        for what, fn in (("add_bf16_fp32", lambda x=x, y=y32: x + y), ("add_same", lambda x=x: x + x)):
            t = timer(fn, warmup=3, reps=20, max_s=0.2)
            out.append({"op": what, "shape": list(shape), "dtype": str(dtype), **t})
            print(f"strided {what:22s} {shape} {1e6 * t['median_s']:8.1f} us", flush=True)
        del x, t_view, flat, y32
    return out


def loops(dev: str, timer: Timer, smoke: bool) -> list[dict[str, Any]]:
    """Elementwise calls by the loop PyTorch's CUDA kernels run for them: contiguous (vectorized), an
    operand transposed or broadcast (the legacy loop that computes each operand's offsets), a cast
    between dtypes (contiguous: unrolled), at two sizes, bf16 and fp32."""
    low = torch.bfloat16 if dev.startswith("cuda") else torch.float32
    out = []
    for n in ((2**18,) if smoke else (2**25, 2**27)):
        for dtype in (low, torch.float32):
            try:
                out += _loops(dev, timer, n, dtype, low)
            except torch.OutOfMemoryError as e:  # keep what the smaller sizes measured
                out.append({"elements": n, "dtype": str(dtype), "error": f"{type(e).__name__}"})
                torch.cuda.empty_cache()
    return out


def _loops(dev: str, timer: Timer, n: int, dtype: torch.dtype, low: torch.dtype) -> list[dict[str, Any]]:
    b, s, h = max(1, n // (1024 * 16 * 64)), 1024, 16  # (b, s, h, 64): attention's (batch, tokens, heads, head)
    x = torch.randn(b, s, h, 64, device=dev, dtype=dtype)
    y = torch.randn(b, s, h, 64, device=dev, dtype=dtype)
    yt = torch.randn(b, h, s, 64, device=dev, dtype=dtype).transpose(1, 2)  # (b, s, h, 64), strided
    img = torch.randn(max(1, n // (256 * 32 * 32)), 256, 32, 32, device=dev, dtype=dtype)
    scale = torch.randn(img.shape[0], 256, 1, 1, device=dev, dtype=dtype)
    other = torch.randn(b, s, h, 64, device=dev, dtype=torch.float32 if dtype != torch.float32 else low)
    cases = {"add": lambda: x + y, "add_transposed": lambda: x + yt, "copy_transposed": lambda: yt.contiguous(),
             "clone": lambda: x.clone(), "mul_broadcast": lambda: img * scale,
             "add_broadcast": lambda: img + scale, "copy_broadcast": lambda: scale.expand_as(img).contiguous(),
             "add_cast": lambda: x + other, "add_cast_transposed": lambda: yt + other,
             "silu": lambda: torch.nn.functional.silu(x), "gelu": lambda: torch.nn.functional.gelu(x)}
    out = []
    for what, fn in cases.items():
        t = timer(fn, warmup=3, reps=20, max_s=0.2)
        elements = (img if "broadcast" in what else x).numel()
        out.append({"op": what, "elements": elements, "dtype": str(dtype), **t})
        print(f"loops {what:20s} {str(dtype):15s} {elements:11d} {1e6 * t['median_s']:8.1f} us", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sections", default="sustained,rows,strided")
    ap.add_argument("--sustain-s", type=float, default=20.0)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, to try the code paths on any device")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "gpu-kernel-probe.json"))
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("no CUDA device: give --device cpu --smoke to try the code paths")
    report: dict[str, Any] = {"environment": environment(args.device), "sections": {}}
    timer = Timer(args.device)
    sections = {"sustained": functools.partial(sustained, seconds=args.sustain_s), "rows": rows, "strided": strided,
                "loops": loops}
    for name in args.sections.split(","):
        run_section(report, name, sections[name], args, timer)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
