"""The fitted constants of the kernel-time mechanisms, and where they came from.

Each mechanism (``matrix.py``, ``bandwidth.py``) is a small function with its source; only
where a mechanism needs a number that no datasheet gives is one fitted, to published kernel
measurements (``benchmarks/published/kernels.toml``; a power limit's slowdown to the training
epochs timed under power limits of ``benchmarks/published/power_limits.toml``), never to the
whole-model measurements the predictions are checked against. ``benchmarks/fit_kernels.py``
fits them, writes ``fitted.toml`` beside this module and prints the error leaving each GPU out
of the fit.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass(frozen=True)
class KernelConstants:
    """Every fitted constant of the kernel-time model (see each field's mechanism)."""

    # matrix units' best sustained share of the dense peak: a + b x (board watts per dense
    # TFLOP/s), within [low, high] (matrix.py: power-limited clocks); AMD's libraries reach
    # `amd` of that
    matrix_a: float = 0.74
    matrix_b: float = 0.08
    matrix_low: float = 0.35
    matrix_high: float = 0.97
    amd: float = 0.70
    # a GeForce board's clocks under load over the boost clock its datasheet rates are at
    # (matrix.py's board_clock): GPU Boost runs above it where power and temperature allow
    geforce: float = 1.0
    # a board powered by its PCIe slot alone (75 W at most) under load, over its rated boost clock
    # (matrix.py's board_clock): the slot's power holds it below
    slot: float = 1.0
    # a GEMM's reduction length K fills its pipeline: K / (K + k_half)
    k_half: float = 48.0
    # the least time a kernel takes on the device (launch latency, a wave's ramp), seconds
    kernel_floor_s: float = 4e-6
    # achievable share of the datasheet bandwidth by memory kind (bandwidth.py)
    hbm: float = 0.88
    gddr: float = 0.85
    other_memory: float = 0.80
    # flash attention (FlashAttention-2, as torch's flash SDPA backend runs it, matrix.py's
    # attention_use): its matrix work's share of the mma.sync rate with S keys per block of
    # queries: attn x S / (S + attn_s_half); the backward reaches attn_backward of the
    # forward's (a causal mask and the softmax's exponentials are mechanisms without constants)
    attn: float = 0.9
    attn_s_half: float = 150.0
    attn_backward: float = 0.6
    # the warpgroup attention kernels of Hopper and data-centre Blackwell (cuDNN's fused
    # attention, FlashAttention-3): their share of the wgmma rate where FlashAttention-2's is
    # of the mma.sync rate (the other attention mechanisms alike)
    attn_wgmma: float = 0.9
    # FlashAttention (v1) and its Triton port: FlashAttention-2's rate over 1 + head dimension /
    # attn_v1_head (matrix.py's attention_use: v1 splits the keys and values over a block's warps,
    # whose partial results meet in shared memory, traffic that grows with the head dimension)
    attn_v1_head: float = 96.0
    # PyTorch's SDPA on ROCm (AOTriton's Triton kernels, ahead-of-time compiled): its matrix work's
    # share of the peak with S keys per block of queries, attn_aotriton x S / (S + attn_aotriton_s_half),
    # and its backward's rate over its forward's; the defaults are FlashAttention-2's constants times
    # `amd`, the assumption made before AMD attention measurements were in the fit
    attn_aotriton: float = 0.63
    attn_aotriton_s_half: float = 150.0
    attn_aotriton_backward: float = 0.6
    # a Winograd convolution's rate per direct-product FLOP over a GEMM's on the fp32 cores
    # (matrix.py's winograd_scale); 1: no gain
    winograd: float = 1.0
    # a board run below its TDP: the matrix units' rate falls as (limit / TDP) ** power_exp
    # (matrix.py's power_clock), fitted to training epochs timed under power limits
    power_exp: float = 0.5

    def replace(self, **kw: float) -> KernelConstants:
        return dataclasses.replace(self, **kw)


FIELDS = tuple(f.name for f in dataclasses.fields(KernelConstants))
_OVERRIDE: list[KernelConstants] = []


@cache
def shipped() -> KernelConstants:
    """The constants fitted to the published kernel measurements (``fitted.toml``)."""
    path = Path(__file__).with_name("fitted.toml")
    if not path.exists():
        return KernelConstants()
    raw = tomllib.loads(path.read_text())
    return KernelConstants(**{k: float(v) for k, v in raw.get("constants", {}).items() if k in FIELDS})


def current() -> KernelConstants:
    """The constants in force: the shipped ones, or those of an enclosing :func:`using`."""
    return _OVERRIDE[-1] if _OVERRIDE else shipped()


@contextlib.contextmanager
def using(constants: KernelConstants) -> Iterator[None]:
    """Price with ``constants`` inside the block (a fit leaving one GPU out, say)."""
    _OVERRIDE.append(constants)
    try:
        yield
    finally:
        _OVERRIDE.pop()
