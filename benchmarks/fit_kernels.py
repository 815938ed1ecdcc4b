"""Fit the kernel-time model's constants to published kernel measurements, and check them
leaving each GPU out.

Reads benchmarks/published/kernels.toml: cuBLAS GEMM throughputs (best shapes, square sizes,
few-row products, and the best of five square sizes on fifteen boards, GeForce among them),
FlashAttention-2's throughputs (forward, backward and both, A100 and H100) by sequence length,
head dimension and mask, FlashAttention v1's and its Triton port's beside them in the same
tables, PyTorch's SDPA on ROCm (AOTriton's kernels), cuDNN's convolutions (DeepBench: each pass
timed apart; the fp32 3x3 stride-1 ones fit the Winograd gain, the rest are a check), and
streaming-kernel bandwidths; and
benchmarks/published/power_limits.toml: training epochs timed under power limits (the clocks'
fall below the TDP). Each family's constants are fitted
to its rows (least squares on the log of the time), then refitted without each GPU's rows
to predict that GPU's: the errors printed are those leave-one-GPU-out fits', by family and by
GPU, beside the in-sample ones. ``--write`` saves the fit on every row to
src/torch_footprint/estimate/kernels/fitted.toml (what the tool prices with).

Rows left out, with why: kernels PyTorch does not run (DeepGEMM, llama.cpp's, Triton's
tutorial kernels), GPUs the database does not list, working sets that fit the L2 cache
(its bandwidth is not modelled), throughputs timed on the host.

    python benchmarks/fit_kernels.py [--write]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import tomllib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from torch_footprint.estimate.kernels.bandwidth import bandwidth_share, floored_s  # noqa: E402
from torch_footprint.estimate.kernels.constants import KernelConstants  # noqa: E402
from torch_footprint.estimate.kernels.matrix import (  # noqa: E402
    attention_use,
    gemm_use,
    is_geforce,
    is_slot_powered,
    is_winograd,
    matrix_share,
    problem_use,
)
from torch_footprint.hardware import get  # noqa: E402
from torch_footprint.hardware.db import Accelerator  # noqa: E402

FITTED = ROOT / "src" / "torch_footprint" / "estimate" / "kernels" / "fitted.toml"
DTYPE = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32", "tf32": "tf32", "fp8": "fp8"}
L2_SAFE_BYTES = 256 * 2**20  # working sets above every database GPU's L2 cache


def gpu(name: str) -> Accelerator | None:
    try:
        return get(name)
    except Exception:
        return None


@dataclasses.dataclass(frozen=True)
class Unlisted:
    """A GPU the accelerator list does not have, whose rows need no datasheet (a ratio of two times)."""

    id: str
    vendor: str


@dataclasses.dataclass
class Row:
    family: str
    gpu: Accelerator | Unlisted
    measured_s: float
    predict: Callable[[KernelConstants], float]
    label: str


def gemm_rows(data: dict[str, Any]) -> list[Row]:
    rows = []
    for r in data["gemm"]:
        acc = gpu(r["gpu"])
        if acc is None or r.get("library") not in ("cublas", "cublasLt", "hipblaslt") or r["dtype"] not in DTYPE:
            continue
        m, n, k, b = int(r["m"]), int(r["n"]), int(r["k"]), int(r.get("batch") or 1)
        flops = 2 * m * n * k * b
        measured = r["time_us"] * 1e-6 if r.get("time_us") else flops / (r["tflops"] * 1e12)
        key = DTYPE[r["dtype"]]
        elem = 1 if key == "fp8" else 4 if key in ("fp32", "tf32") else 2
        # a row that prints the best of several square sizes is priced at the best of them
        shapes = [(b, s, s, s) for s in r["sizes"]] if r.get("sizes") else [(b, m, n, k)]

        def predict(c: KernelConstants, acc: Accelerator = acc, key: str = key, shapes: list = shapes,
                    flops: int = flops, elem: int = elem) -> float:
            peak = acc.peak(key) or 0.0
            per_flop = []
            for bb, mm, nn, kk in shapes:
                work = 2 * bb * mm * nn * kk
                compute = work / (peak * matrix_share(acc, key, c) * gemm_use(acc, bb, mm, nn, kk, c, key))
                memory = (mm * kk + kk * nn + mm * nn) * bb * elem / (acc.bandwidth * bandwidth_share(acc, c))
                per_flop.append(floored_s(max(compute, memory), c) / work)
            return min(per_flop) * flops

        label = f"best of {'/'.join(map(str, r['sizes']))}" if r.get("sizes") else f"{m}x{n}x{k}"
        rows.append(Row("gemm", acc, measured, predict, f"{r['dtype']} {label}"))
    return rows


def attention_rows(data: dict[str, Any], v1: bool = False) -> list[Row]:
    """The fused attention kernels' rows (``v1``: FlashAttention v1's and its Triton port's, priced as
    ``flash1``, a family of its own so that they do not move FlashAttention-2's constants)."""
    rows = []
    for r in data["attention"]:
        acc = gpu(r["gpu"])
        kinds = ("flash1", "flash1-triton") if v1 else ("flash2", "flash3", "cudnn", "aotriton")
        if acc is None or r["kernel"] not in kinds:
            continue
        b, h, s, d, causal = int(r["batch"]), int(r["heads"]), int(r["seqlen"]), int(r["head_dim"]), bool(r["causal"])
        fwd = 4 * b * h * s * s * d / (2 if causal else 1)  # FlashAttention's own FLOP count
        published = {"fwd": fwd, "bwd": 2.5 * fwd, "fwd_bwd": 3.5 * fwd}[r["direction"]]
        measured = published / (r["tflops"] * 1e12)
        ours = fwd  # footprint's count: the visible pairs x 2 (E + Ev); the backward twice that

        def predict(c: KernelConstants, acc: Accelerator = acc, direction: str = r["direction"], ours: float = ours,
                    s: int = s, d: int = d, causal: bool = causal, bh: int = b * h,
                    key: str = DTYPE[r["dtype"]], kernel: str = "flash1" if v1 else r["kernel"]) -> float:
            rate = (acc.peak(key) or 0.0) * matrix_share(acc, key, c)
            t = 0.0
            if direction in ("fwd", "fwd_bwd"):
                t += floored_s(ours / (rate * attention_use(acc, key, bh, s, s, d, d, causal, False, c, kernel)), c)
            if direction in ("bwd", "fwd_bwd"):
                t += floored_s(2 * ours / (rate * attention_use(acc, key, bh, s, s, d, d, causal, True, c, kernel)), c)
            return t

        family = "attention-aotriton" if r["kernel"] == "aotriton" else "attention"
        rows.append(Row(family, acc, measured, predict,
                        f"{r['kernel']} {r['direction']} s{s} d{d}{' causal' if causal else ''}"))
    return rows


def attention_backward_rows(data: dict[str, Any]) -> list[Row]:
    """AOTriton's backward against its own forward at one shape on one GPU: the backward's time
    predicted from the forward's measured time (footprint counts the backward's matrix FLOPs as
    twice the forward's), so that it needs no datasheet (the MI355X's rows)."""
    fwd = {(r["gpu"], r["causal"], r["seqlen"], r["head_dim"]): r for r in data["attention"]
           if r["kernel"] == "aotriton" and r["direction"] == "fwd"}
    rows = []
    for r in data["attention"]:
        f = fwd.get((r["gpu"], r["causal"], r["seqlen"], r["head_dim"]))
        if r["kernel"] != "aotriton" or r["direction"] != "bwd" or f is None or not r.get("ratio", True):
            continue
        flops = 4 * int(r["batch"]) * int(r["heads"]) * int(r["seqlen"]) ** 2 * int(r["head_dim"])
        flops /= 2 if r["causal"] else 1
        t_fwd, t_bwd = flops / (f["tflops"] * 1e12), 2.5 * flops / (r["tflops"] * 1e12)

        def predict(c: KernelConstants, t_fwd: float = t_fwd) -> float:
            return 2 * t_fwd / c.attn_aotriton_backward

        acc = gpu(r["gpu"]) or Unlisted(str(r["gpu"]).lower().replace("amd ", "").replace(" ", "-"), "amd")
        rows.append(Row("attention-aotriton-bwd", acc, t_bwd, predict,
                        f"aotriton bwd/fwd s{r['seqlen']} d{r['head_dim']}{' causal' if r['causal'] else ''}"))
    return rows


CONV_PASSES = (("forward", "fwd_ms"), ("backwardd", "bwd_data_ms"), ("backwardw", "bwd_weight_ms"))


def conv_rows(data: dict[str, Any]) -> list[Row]:
    """Each published convolution pass, priced as ``predict`` prices a traced one (its direct
    FLOPs at the rate its GEMMs or its Winograd form reach, its tensors' bytes at the memory's
    rate, the kernel's least time). The fp32 passes that cuDNN's Winograd algorithms can take
    (:func:`is_winograd`), timed with the algorithm cuDNN's search found fastest, fit the Winograd
    gain (family ``conv-winograd``). The rest, ``conv`` (the other fp32 passes, and the fp16 ones,
    timed with algorithms fixed by the benchmark's build, not searched), are a check: no constant
    is fitted to them."""
    rows = []
    for r in data.get("conv", []):
        acc = gpu(r["gpu"])
        if acc is None or r["dtype"] not in DTYPE:
            continue
        key = DTYPE[r["dtype"]]
        n, ci, co, kh, kw = (int(r[f]) for f in ("n", "c", "k", "r", "s"))
        oh = (int(r["h"]) + 2 * int(r["pad_h"]) - kh) // int(r["stride_h"]) + 1
        ow = (int(r["w"]) + 2 * int(r["pad_w"]) - kw) // int(r["stride_w"]) + 1
        flops = 2 * n * co * ci * kh * kw * oh * ow
        elem = 4 if key in ("fp32", "tf32") else 2
        nbytes = elem * (n * ci * int(r["h"]) * int(r["w"]) + co * ci * kh * kw + n * co * oh * ow)
        for which, field in CONV_PASSES:
            if r.get(field) is None:
                continue
            problem = ("conv", n, ci, co, oh * ow, kh * kw, 1, which, f"{kh}x{kw}",
                       max(int(r["stride_h"]), int(r["stride_w"])), 1)

            def predict(c: KernelConstants, acc: Accelerator = acc, key: str = key, problem: tuple = problem,
                        flops: int = flops, nbytes: int = nbytes) -> float:
                rate = (acc.peak(key) or 0.0) * matrix_share(acc, key, c) * problem_use(acc, problem, c, key)
                compute = flops / rate
                return floored_s(max(compute, nbytes / (acc.bandwidth * bandwidth_share(acc, c))), c)

            family = "conv-winograd" if key == "fp32" and is_winograd(problem) else "conv"
            rows.append(Row(family, acc, r[field] * 1e-3, predict,
                            f"{r['dtype']} {which} {ci}->{co} {kh}x{kw}/{problem[9]} {n}x{oh}x{ow}"))
    return rows


def bandwidth_rows(data: dict[str, Any]) -> list[Row]:
    rows = []
    for r in data["bandwidth"]:
        acc = gpu(r["gpu"])
        if acc is None or "chsasank" in r["source"]:  # timed on the host, working set not stated
            continue
        nbytes = int(r["bytes"])
        if nbytes < L2_SAFE_BYTES:  # L2-resident, or a latency the source's harness sets: not modelled
            continue
        measured = nbytes / (r["gbs"] * 1e9)

        def predict(c: KernelConstants, acc: Accelerator = acc, nbytes: int = nbytes) -> float:
            return floored_s(nbytes / (acc.bandwidth * bandwidth_share(acc, c)), c)

        rows.append(Row("bandwidth", acc, measured, predict, f"{r['kind']} {nbytes / 2**20:.0f} MiB"))
    return rows


POWER_BOUND = 0.8  # a job drawing this share of the TDP uncapped runs its board at full load
POWER_RANGE = (0.6, 1.0)  # caps of this share of the job's draw (a 700 W board at 500 W: 0.71)


def power_rows(data: dict[str, Any]) -> list[Row]:
    """Training epochs under a power limit (``published/power_limits.toml``) of the jobs that draw
    near their board's TDP uncapped, as a training step's matrix work does; each cap from 60% of
    the job's uncapped draw up, priced as the uncapped epoch slowed by (cap / draw) **
    ``power_exp`` (the kernel model's :func:`power_clock`, which takes the draw to be the TDP)."""
    rows = []
    for j in data["job"]:
        acc = gpu(j["gpu"])
        top = max(range(len(j["limit_w"])), key=lambda i: j["limit_w"][i])
        draw, base = j["power_w"][top], j["epoch_s"][top]
        if acc is None or not acc.tdp_w or draw < POWER_BOUND * min(acc.tdp_w, j["limit_w"][top]):
            continue
        for limit, epoch in zip(j["limit_w"], j["epoch_s"], strict=True):
            share = limit / draw
            if not POWER_RANGE[0] <= share < POWER_RANGE[1]:
                continue

            def predict(c: KernelConstants, base: float = base, share: float = share) -> float:
                return base / share ** c.power_exp

            rows.append(Row("power", acc, epoch, predict, f"{j['workload']} at {limit} W"))
    return rows


FAMILIES = {  # the constants each family fits (its own; the others as fitted before it)
    "bandwidth": ("hbm", "gddr", "other_memory"),
    "gemm": ("matrix_a", "matrix_b", "k_half", "kernel_floor_s", "amd", "geforce", "slot"),
    "attention": ("attn", "attn_s_half", "attn_backward", "attn_wgmma"),
    "attention-v1": ("attn_v1_head",),
    "attention-aotriton": ("attn_aotriton", "attn_aotriton_s_half"),
    "attention-aotriton-bwd": ("attn_aotriton_backward",),
    "power": ("power_exp",),
    "conv-winograd": ("winograd",),
}
BOUNDS = {"hbm": (0.5, 1.0), "gddr": (0.5, 1.0), "other_memory": (0.3, 1.0), "matrix_a": (0.3, 1.2),
          "matrix_b": (-0.3, 0.3), "geforce": (0.8, 1.4), "slot": (0.3, 1.2), "k_half": (0.0, 2048.0),
          "kernel_floor_s": (0.0, 3e-5), "amd": (0.2, 1.2),
          "attn": (0.1, 1.5), "attn_s_half": (0.0, 8192.0), "attn_backward": (0.2, 1.5),
          "attn_wgmma": (0.2, 1.5), "attn_v1_head": (8.0, 4096.0), "power_exp": (0.0, 2.0),
          "attn_aotriton": (0.05, 1.5), "attn_aotriton_s_half": (0.0, 8192.0), "attn_aotriton_backward": (0.05, 1.5),
          "winograd": (0.5, 4.0)}


# the constants that apply to one class of board: fitted only where the family's rows have such a board
BOARD_CLASS: dict[str, Callable[[Accelerator | Unlisted], bool]] = {
    "amd": lambda g: g.vendor == "amd",
    "geforce": lambda g: isinstance(g, Accelerator) and is_geforce(g),
    "slot": lambda g: isinstance(g, Accelerator) and is_slot_powered(g),
}


def all_rows() -> dict[str, list[Row]]:
    """Every family's rows: the kernel measurements of ``published/kernels.toml`` and the
    power-limited epochs of ``published/power_limits.toml``."""
    data = tomllib.loads((ROOT / "benchmarks" / "published" / "kernels.toml").read_text())
    attention = attention_rows(data)
    convs = conv_rows(data)
    return {**{f: [r for r in convs if r.family == f] for f in ("conv-winograd", "conv")},
            "bandwidth": bandwidth_rows(data), "gemm": gemm_rows(data),
            "attention": [r for r in attention if r.family == "attention"],
            "attention-v1": attention_rows(data, v1=True),
            "attention-aotriton": [r for r in attention if r.family == "attention-aotriton"],
            "attention-aotriton-bwd": attention_backward_rows(data),
            "power": power_rows(tomllib.loads((ROOT / "benchmarks" / "published" / "power_limits.toml").read_text()))}


def loss(rows: Sequence[Row], c: KernelConstants) -> float:
    return float(np.mean([math.log(r.predict(c) / r.measured_s) ** 2 for r in rows])) if rows else 0.0


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, steps: np.ndarray, iters: int = 600) -> np.ndarray:
    """A plain Nelder-Mead minimisation (reflection, expansion, contraction, shrink)."""
    pts = [x0] + [x0 + np.eye(len(x0))[i] * steps[i] for i in range(len(x0))]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centre = np.mean(pts[:-1], axis=0)
        refl = centre + (centre - pts[-1])
        fr = f(refl)
        if fr < vals[0]:
            exp = centre + 2 * (centre - pts[-1])
            fe = f(exp)
            pts[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = centre + 0.5 * (pts[-1] - centre)
            fc = f(con)
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:
                pts = [pts[0] + 0.5 * (p - pts[0]) for p in pts]
                vals = [f(p) for p in pts]
    return pts[int(np.argmin(vals))]


def fit(rows_by_family: dict[str, list[Row]], start: KernelConstants) -> KernelConstants:
    c = start
    for family, names in FAMILIES.items():
        rows = rows_by_family.get(family, [])
        if not rows:
            continue
        present = [n for n in names if n not in BOARD_CLASS or any(BOARD_CLASS[n](r.gpu) for r in rows)]
        x0 = np.array([getattr(c, n) for n in present], dtype=float)

        def clamp(x: np.ndarray, present: list[str] = present) -> dict[str, float]:
            return {n: float(min(max(v, BOUNDS[n][0]), BOUNDS[n][1])) for n, v in zip(present, x, strict=True)}

        def f(x: np.ndarray, rows: list[Row] = rows, clamp: Callable = clamp, c: KernelConstants = c) -> float:
            return loss(rows, c.replace(**clamp(x)))

        best = nelder_mead(f, x0, np.maximum(np.abs(x0) * 0.2, 1e-7))
        c = c.replace(**clamp(best))
    return c


def errors(rows: Sequence[Row], c: KernelConstants) -> list[float]:
    return [r.predict(c) / r.measured_s - 1 for r in rows]


def summary(errs: Sequence[float]) -> str:
    a = sorted(abs(e) for e in errs)
    if not a:
        return "-"
    p90 = a[min(len(a) - 1, round(0.9 * (len(a) - 1)))]
    return f"median {100 * statistics.median(a):5.1f}%, p90 {100 * p90:5.1f}%, worst {100 * a[-1]:6.1f}% (n={len(a)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="save the fit on every row as the shipped constants")
    args = ap.parse_args()
    families = all_rows()
    start = KernelConstants()
    full = fit(families, start)
    print("constants fitted on every row:")
    for name in (n for names in FAMILIES.values() for n in names):
        print(f"  {name:16s} {getattr(full, name):.4g}")
    gpus = sorted({r.gpu.id for rows in families.values() for r in rows})
    print(f"\n{'family':22s} {'in-sample':48s} leave-one-GPU-out")
    logo: dict[str, list[float]] = {f: [] for f in families}
    by_gpu: dict[str, list[float]] = {}
    for g in gpus:
        held = {f: [r for r in rows if r.gpu.id != g] for f, rows in families.items()}
        c = fit(held, start)
        for f, rows in families.items():
            errs = errors([r for r in rows if r.gpu.id == g], c)
            logo[f] += errs
            by_gpu.setdefault(g, []).extend(errs)
    for f, rows in families.items():
        print(f"{f:22s} {summary(errors(rows, full)):48s} {summary(logo[f])}")
    # the kernels' figure: the power family's epochs are not kernel times (and would dilute it);
    # printed without the convolutions, with the fitted ones, and with every one (``conv`` a check)
    kernels = [f for f in families if f not in ("power", "conv")]
    allerr = [e for f in kernels for e in logo[f]]
    for label, names in (("kernels, no conv", [f for f in kernels if not f.startswith("conv")]),
                         ("kernels", kernels), ("kernels and conv", [*kernels, "conv"])):
        print(f"{label:22s} {summary([e for f in names for e in errors(families[f], full)]):48s} "
              f"{summary([e for f in names for e in logo[f]])}")
    print("\nleave-one-GPU-out, by GPU:")
    for g in gpus:
        print(f"  {g:16s} {summary(by_gpu[g])}")
    if args.write:
        lines = ["# The kernel-time model's constants, fitted by benchmarks/fit_kernels.py to the published",
                 "# kernel measurements of benchmarks/published/kernels.toml (every row it keeps); the script",
                 "# prints the errors of fits that leave each GPU out.",
                 "# Regenerate: python benchmarks/fit_kernels.py --write",
                 f"# fitted {date.today().isoformat()}: {sum(len(families[f]) for f in kernels)} kernel rows over "
                 f"{len({r.gpu.id for f in kernels for r in families[f]})} GPUs, leave-one-GPU-out median |error| "
                 f"{100 * statistics.median(abs(e) for e in allerr):.1f}%; {len(families['power'])} power-limited "
                 f"epochs over {len({r.gpu.id for r in families['power']})} GPUs, "
                 f"{100 * statistics.median(abs(e) for e in logo['power']):.1f}%",
                 "", "[constants]"]
        lines += [f"{n} = {getattr(full, n):.6g}" for n in (f.name for f in dataclasses.fields(full))]
        FITTED.write_text("\n".join(lines) + "\n")
        print(f"\nwrote {FITTED.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
