"""``footprint calibrate``: measure what this device actually reaches.

Datasheet peaks are ceilings no model touches; a roofline with them predicts too fast.
Calibration measures, on the device at hand:

* matmul FLOP/s per dtype (square matrices large enough to reach the plateau);
* convolution and matmul FLOP/s in fp32 against the reduction length K (the MACs behind
  one output element: 9 for a 3x3 depthwise convolution, C_in for a 1x1 one, 9 x C_in for
  a 3x3 one, the inner dimension of a matmul): small-K kernels run far below the peak, and
  on CPUs convolutions go through a different library than matmuls;
* depthwise convolutions (3x3, 5x5, 7x7) on their own: a kernel of a different kind, far
  below the rate of a dense convolution of the same K;
* copy bandwidth, counting bytes read plus bytes written, from a buffer far larger than
  the caches (and, on CPU, one that fits in them);
* on CPUs, few-row matmuls in fp32 and bf16 (a decode step's and a prompt's) and the rate
  they stream their weight matrices at: a CPU's bf16 products stream at about the bytes per
  second of its fp32 ones, not twice the elements;
* on CPUs, the shapes where a model's operators leave the plain tables (:mod:`.cpu_tables`):
  ``F.linear`` as ``nn.Linear`` calls it, and grouped convolutions;
* the cost of one operator of an eager model beyond its arithmetic (module call, dispatch,
  allocation, and on a GPU the launch), from a model of 100 tiny kernels; and what a tiny
  call of each kind of operator costs beyond that (a convolution through oneDNN, a batch
  norm or a pooling that starts the thread pool cost several times an addition). On a GPU
  both are measured and shown but not priced: they did not follow what models pay there
  (estimate/kernels/roofline.py).

Each figure is the median of several timed calls after a warm-up.
"""

from __future__ import annotations

import datetime
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..dtypes import torch_dtype_of_rate
from ..errors import FootprintError
from ..hardware.local import cpu_name, cpu_threads, cuda_device_name, device_key, last_level_cache_bytes
from . import contention, cpu_tables
from .streaming import MATVEC_K, MATVEC_K_QUICK, _copy, _matvec_by_k, _stream_matvec, stream_bytes
from .timer import CpuClock, CudaClock, measure

# The per-operator figures are host time, which swings with the host's clock: two H100
# calibrations minutes apart measured 14.1 and 18.0 us from 7 calls each after one warm-up
# (benchmarks/results/gpu-validate-h100-4.json, llm-measure-h100-4.txt). They are timed
# over a few warm-up calls and at least this long.
OVERHEAD_SECONDS = 0.5
OVERHEAD_WARMUP = 5


def _time(fn: Callable[[], Any], device: str, reps: int, min_seconds: float = 0.0, warmup: int = 1) -> float:
    """Median seconds per call of ``fn`` after ``warmup`` calls (CUDA events on a GPU), over at
    least ``reps`` calls and ``min_seconds``."""
    clock = CudaClock() if device == "cuda" else CpuClock()
    return measure(fn, clock, min_reps=reps, max_reps=max(10 * reps, 1000), min_seconds=min_seconds,
                   warmup=warmup).median


def _matmul(device: str, name: str, n: int, reps: int) -> float | None:
    dtype = torch_dtype_of_rate(name)
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        c = torch.empty(n, n, device=device, dtype=dtype)
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        t = _time(lambda: torch.mm(a, b, out=c), device, reps)
    except RuntimeError:  # dtype not supported on this device
        return None
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return 2 * n**3 / t


def _conv(device: str, batch: int, reps: int) -> float:
    x = torch.randn(batch, 64, 56, 56, device=device)
    w = torch.randn(64, 64, 3, 3, device=device)
    flops = 2 * batch * 64 * 64 * 9 * 56 * 56
    with torch.no_grad():
        t = _time(lambda: torch.nn.functional.conv2d(x, w, padding=1), device, reps)
    return flops / t


# (C_in, C_out, kernel, stride, groups, spatial): depthwise, stem, 1x1 and 3x3 of ResNet/MobileNet shapes
_CONV_GRID = [(96, 96, 3, 1, 96, 56), (3, 64, 7, 2, 1, 112), (64, 256, 1, 1, 1, 56), (256, 64, 1, 1, 1, 56),
              (64, 64, 3, 1, 1, 56), (128, 128, 3, 1, 1, 28), (256, 256, 3, 1, 1, 14), (512, 512, 3, 1, 1, 7)]
# 1x1 convolutions of stride 2 (ResNet's downsampling shortcuts, at their input sizes): on a CPU
# at batch 1 they ran 2.5-3.5x slower than the stride-1 table's rate at their K (resnet18,
# each operator timed: benchmarks/cpu_op_profile.py), a 3x3 one of stride 2 within 15%
_STRIDED_GRID = [(64, 128, 1, 2, 1, 56), (128, 256, 1, 2, 1, 28), (256, 512, 1, 2, 1, 56),
                 (512, 1024, 1, 2, 1, 28), (1024, 2048, 1, 2, 1, 14)]
_MATMUL_K = [64, 256, 768, 3072]


def _conv_by_k(device: str, batch: int, reps: int, grid: Sequence[tuple[int, ...]] = ()) -> list[list[float]]:
    """[K, TFLOP/s] for the convolutions of ``grid`` (_CONV_GRID) at ``batch``, sorted by K."""
    out = []
    with torch.no_grad():
        for cin, cout, k, stride, groups, s in grid or _CONV_GRID:
            x = torch.randn(batch, cin, s, s, device=device)
            w = torch.randn(cout, cin // groups, k, k, device=device)
            so = (s + 2 * (k // 2) - k) // stride + 1
            flops = 2 * batch * cout * (cin // groups) * k * k * so * so
            t = _time(functools.partial(torch.nn.functional.conv2d, x, w, stride=stride, padding=k // 2,
                                        groups=groups), device, reps)
            out.append([float(cin // groups * k * k), flops / t / 1e12])
    return sorted(out)


# depthwise convolutions (channels, kernel, spatial): MobileNet's 3x3, EfficientNet's 5x5, ConvNeXt's 7x7
_DEPTHWISE_GRID = [(96, 3, 56), (96, 5, 56), (96, 7, 56)]


def _depthwise_by_k(device: str, batch: int, reps: int) -> list[list[float]]:
    """[K, TFLOP/s] for the depthwise convolutions of _DEPTHWISE_GRID at ``batch`` (K = k x k)."""
    out = []
    with torch.no_grad():
        for c, k, s in _DEPTHWISE_GRID:
            x = torch.randn(batch, c, s, s, device=device)
            w = torch.randn(c, 1, k, k, device=device)
            flops = 2 * batch * c * k * k * s * s
            t = _time(functools.partial(torch.nn.functional.conv2d, x, w, padding=k // 2, groups=c), device, reps)
            out.append([float(k * k), flops / t / 1e12])
    return out


MATMUL_ROWS = (1, 4, 16, 64)  # rows of the few-row matmuls timed on CPUs (512 is matmul_fp32_by_k's)


def _matmul_by_k(device: str, m: int, reps: int, n: int | None = None,
                 dtype: torch.dtype = torch.float32) -> list[list[float]]:
    """[K, TFLOP/s] for (m x K) @ (K x n) matmuls (n = m unless given)."""
    n = m if n is None else n
    out = []
    for k in _MATMUL_K:
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(k, n, device=device).to(dtype)
        t = _time(functools.partial(torch.matmul, a, b), device, reps)
        out.append([float(k), 2 * m * n * k / t / 1e12])
    return out


def _matmul_by_rows(device: str, n: int, reps: int, rows: tuple[int, ...] = MATMUL_ROWS,
                    dtype: torch.dtype = torch.float32) -> dict[str, list[list[float]]]:
    """{M: [[K, TFLOP/s], ...]} for (M x K) @ (K x n) matmuls with few rows M: a decode step's
    and a short prompt's matmuls, which a CPU runs far below its square-matmul rate."""
    return {str(m): _matmul_by_k(device, m, reps, n, dtype) for m in rows}


def _view_overhead(device: str) -> float:
    """Seconds per view operator called eagerly (``view``, ``transpose``, ``unsqueeze``,
    ``expand`` in turn): no kernel runs, but the dispatcher and the new tensor's metadata
    cost what a CPU-bound eager model (a small model on a GPU) waits for."""
    x = torch.randn(8, 64, device=device)
    calls = 200

    def run() -> None:
        for _ in range(calls // 4):
            x.view(64, 8)
            x.transpose(0, 1)
            x.unsqueeze(0)
            x.expand(2, 8, 64)

    return _time(run, device, 7, OVERHEAD_SECONDS, OVERHEAD_WARMUP) / calls


def _overhead(device: str, view_s: float = 0.0) -> float:
    """Seconds per kernel of an eager model too small to compute anything: 50 blocks of
    Linear(8, 8) + ReLU at batch 1 (100 kernels: addmm and relu), less the 50 transposes
    (views, ``view_s`` each). This is what a model costs per operator beyond its arithmetic:
    the Python module call, the dispatcher, the output allocation and, on a GPU, the launch."""
    blocks = 50
    model = torch.nn.Sequential(*[m for _ in range(blocks) for m in (torch.nn.Linear(8, 8), torch.nn.ReLU())])
    model = model.to(device).eval()
    x = torch.randn(1, 8, device=device)

    def run() -> None:
        with torch.inference_mode():
            for _ in range(10):
                model(x)

    return max(_time(run, device, 7, OVERHEAD_SECONDS, OVERHEAD_WARMUP) / 10 - blocks * view_s, 0.0) / (2 * blocks)


def _tiny_calls(device: str) -> dict[str, float]:
    """Microseconds per tiny call of each kind of operator (estimate/kernels/cpu.py), 20 calls
    a sample, the median over at least a tenth of a second each."""
    from ..estimate.kernels.cpu import tiny_kinds

    out = {}
    with torch.inference_mode():
        for kind, call in tiny_kinds(device).items():
            def run(call: Callable[[], object] = call) -> None:
                for _ in range(20):
                    call()

            out[kind] = round(_time(run, device, 7, 0.1, OVERHEAD_WARMUP) / 20 * 1e6, 3)
    return out


def _pooling(device: str, reps: int) -> dict[str, float]:
    """Window elements per second of a mid-sized max and average pool (estimate/kernels/cpu.py)."""
    from ..estimate.kernels.cpu import pooling_calls

    with torch.inference_mode():
        return {kind: round(window / _time(call, device, reps, 0.1), 1)
                for kind, (call, window) in pooling_calls().items()}


def _cpu_tables(quick: bool, reps: int, step: Callable[[str], None]) -> dict[str, Any]:
    """The CPU's tables of :mod:`.cpu_tables`: linear layers and grouped convolutions."""
    def timed(fn: Callable[[], Any], r: int) -> float:
        return _time(fn, "cpu", r)

    few = max(3, reps // 2)
    step("linear layers by rows and reduction length")
    out: dict[str, Any] = {"linear_fp32_by_rows_k": cpu_tables.linear_by_rows(timed, few)}
    step("grouped convolutions by reduction length")
    out["conv_fp32_grouped_by_batch_k"] = {str(b): cpu_tables.grouped_conv_by_k(timed, b, reps if b == 1 else few)
                                           for b in (1, 4 if quick else 16)}
    return out


def calibrate(device: str = "cpu", quick: bool = False,
              on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure this device's ceilings (see the module docstring); returns a plain dict."""
    if device not in ("cpu", "cuda"):
        raise FootprintError(f"cannot calibrate device '{device}': use cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise FootprintError("--device cuda: no CUDA device is visible to PyTorch here")
    step = on_step or (lambda s: None)
    t_start = time.perf_counter()
    before = contention.sample()
    reps = 3 if quick else 7
    if device == "cpu":
        # CPUs without native half-precision units run fp16/bf16 matmuls ~100x slower: small sizes
        sizes = {"fp32": 1024 if quick else 2048, "fp16": 256 if quick else 512, "bf16": 256 if quick else 512}
        big, small = stream_bytes((64 if quick else 256) * 2**20, last_level_cache_bytes()), 4 * 2**20
    else:
        sizes = {"fp32": 4096, "tf32": 8192, "fp16": 8192, "bf16": 8192}
        big, small = 2**30, 0
    matmul: dict[str, float] = {}
    for name, n in sizes.items():
        step(f"matmul {name} {n}x{n}")
        r = _matmul(device, name, n, reps)
        if r is not None:
            matmul[name] = r / 1e12
    step("convolution fp32 3x3 64->64 at 56x56")
    conv = {"fp32": _conv(device, 4 if device == "cpu" else 64, reps) / 1e12}
    step("convolutions and matmuls by reduction length")
    # two batch sizes: on CPUs the rate of one shape moves with the size of its tensors
    conv_k = {str(b): _conv_by_k(device, b, reps if b == 1 else max(3, reps // 2))
              for b in ((1, 4 if quick else 16) if device == "cpu" else (1, 64))}
    strided_k = {str(b): _conv_by_k(device, b, reps if b == 1 else max(3, reps // 2), _STRIDED_GRID)
                 for b in ((1, 4 if quick else 16) if device == "cpu" else (1, 64))}
    dw_k = {str(b): _depthwise_by_k(device, b, reps if b == 1 else max(3, reps // 2))
            for b in ((1, 4 if quick else 16) if device == "cpu" else (1, 64))}
    matmul_k = _matmul_by_k(device, 512 if device == "cpu" else 8192, reps)
    by_rows = _matmul_by_rows(device, 512, reps) if device == "cpu" else {}
    step(f"copy {big // 2**20} MiB")
    copy = _copy(device, big, reps) / 1e9
    result: dict[str, Any] = {
        "device": device_key(device),
        "name": cpu_name() if device == "cpu" else cuda_device_name(),
        "threads": cpu_threads(),
        "torch": torch.__version__,
        "when": datetime.date.today().isoformat(),
        "matmul_tflops": matmul,
        "conv_tflops": conv,
        "copy_gbs": copy,
        "conv_fp32_by_batch_k": conv_k,
        "conv_fp32_strided_by_batch_k": strided_k,
        "matmul_fp32_by_k": matmul_k,
        "matmul_fp32_by_rows_k": by_rows,
        "depthwise_fp32_by_batch_k": dw_k,
    }
    if device == "cpu" and "bf16" in matmul:
        step("bf16 matmuls by rows and reduction length")
        result["matmul_bf16_by_rows_k"] = _matmul_by_rows(device, 512, max(3, reps - 2), (16, 64, 512),
                                                          torch.bfloat16)
    if small:
        step(f"copy {small // 2**20} MiB (cache)")
        result["cache_copy_gbs"] = _copy(device, small, reps * 4) / 1e9
        step(f"one-row matmul over {big // 2**20} MiB")
        result["matvec_gbs"] = _stream_matvec(device, big, reps) / 1e9
        step("few-row products by layout, rows and reduction length")
        ks = MATVEC_K_QUICK if quick else MATVEC_K
        result["matvec_gbs_by_k"] = _matvec_by_k(device, big, max(3, reps - 2), ks=ks)
        if "bf16" in matmul:
            step("few-row bf16 products (nn.Linear's layout)")
            result["matvec_bf16_gbs_by_k"] = _matvec_by_k(device, big, max(3, reps - 2), torch.bfloat16,
                                                          ("t",), ks)
    step("small operator overhead")
    view_s = _view_overhead(device)
    result["view_overhead_us"] = view_s * 1e6
    result["op_overhead_us"] = _overhead(device, view_s) * 1e6
    if device == "cuda":  # what a GPU's operators are priced at instead (roofline._calibrated_gpu)
        from ..estimate.kernels.roofline import HOST_OP_S

        result["op_overhead_priced_us"] = HOST_OP_S * 1e6
    step("tiny calls by kind of operator")
    result["tiny_call_us"] = _tiny_calls(device)
    if device == "cpu":
        step("pooling windows")
        result["pooling_per_s"] = _pooling(device, reps)
        result.update(_cpu_tables(quick, reps, step))
    result["seconds"] = round(time.perf_counter() - t_start, 2)
    result["contention"] = contention.between(before, contention.sample(), torch.get_num_threads()).to_dict()
    return result


FAR_OFF = 2.0  # a ceiling this many times above or below the previous calibration's is suspect
_COMPARED = (("matmul fp32", lambda r: r["matmul_tflops"].get("fp32"), "{:.3g} TFLOP/s"),
             ("convolution fp32", lambda r: r["conv_tflops"].get("fp32"), "{:.3g} TFLOP/s"),
             ("copy bandwidth", lambda r: r.get("copy_gbs"), "{:.1f} GB/s"))


def check(result: dict[str, Any], previous: dict[str, Any] | None = None) -> list[str]:
    """What is wrong with a calibration, one sentence each (empty: it is consistent): a
    copy that fits the caches slower than one from DRAM, a ceiling ``FAR_OFF`` times away
    from the previous calibration of this device, or other processes competing for the CPUs."""
    problems = []
    cache, dram = result.get("cache_copy_gbs"), result.get("copy_gbs")
    if cache is not None and dram is not None and cache < dram:
        problems.append(f"the 4 MiB copy that fits the caches ran at {cache:.1f} GB/s, slower than the copy "
                        f"from DRAM at {dram:.1f} GB/s")
    for name, get, fmt in _COMPARED if previous else ():
        try:
            new, old = get(result), get(previous)
        except (KeyError, TypeError, AttributeError):
            continue
        if previous and new and old and not 1 / FAR_OFF <= new / old <= FAR_OFF:
            problems.append(f"{name} {fmt.format(new)} is {new / old:.2g}x the previous calibration's "
                            f"{fmt.format(old)} ({previous.get('when', '?')})")
    busy = result.get("contention") or {}
    if busy.get("busy"):
        why = (f"{busy['threads']} threads on {busy['cpus']} usable CPUs" if busy.get("oversubscribed") else
               f"other processes used {busy['others_cores']:.2f} of {busy['cpus']} CPUs")
        problems.append(f"the machine was busy ({why}); --threads {busy['suggested_threads']} "
                        "or an idle machine measures cleanly")
    return problems


@dataclass
class CalibrationResult:
    """What ``calibrate`` measured, and where it was kept (None: not saved)."""

    kind = "calibrate"  # the envelope's kind of its saved file

    measured: dict[str, Any]
    path: str | None

    @property
    def problems(self) -> list[str]:
        """The checks it failed (a cache copy slower than DRAM, a ceiling far from the previous
        calibration, a busy machine); a calibration with problems is saved only when forced."""
        return list(self.measured.get("problems", []))

    @property
    def saved(self) -> bool:
        return self.path is not None

    def __repr__(self) -> str:
        return (f"CalibrationResult(device={self.measured.get('device')!r}, saved={self.saved}, "
                f"problems={len(self.problems)})")

    def to_dict(self) -> dict[str, Any]:
        return self.measured


def calibrate_device(device: str = "cpu", *, quick: bool = False, force: bool = False, save: bool = True,
                     nproc: int | None = None,
                     progress: Callable[[str], None] | None = None) -> CalibrationResult:
    """Measure ``device``'s ceilings and, with ``nproc``, all-reduces across that many ranks
    under torchrun; keep them for later predictions when ``save`` and they pass their checks
    (or ``force``)."""
    from ..hardware.local import device_key, read_calibrations, save_calibration

    if nproc is not None:
        from .distributed import check_nproc

        check_nproc(nproc, device)
    res = calibrate(device, quick=quick, on_step=progress)
    if nproc is not None:
        from .distributed import measure_link

        if progress:
            progress(f"all-reduce across {nproc} ranks")
        res["link"] = measure_link(nproc, device, quick=quick)
    res["problems"] = check(res, read_calibrations().get(device_key(device)))
    keep = save and (force or not res["problems"])
    path = save_calibration(device, res) if keep else None
    return CalibrationResult(res, str(path) if path is not None else None)
