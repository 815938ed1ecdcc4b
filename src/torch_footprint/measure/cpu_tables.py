"""What ``footprint calibrate`` times on a CPU beyond the generic rates: the shapes a model's
operators take there, where the library's rate departs from the plain tables.

* **Linear layers** (:func:`linear_by_rows`): ``F.linear`` with the weight stored (N, K) as
  ``nn.Linear`` keeps it and a bias, at 64, 512 and 4,096 rows. The plain matmul table times
  ``x @ W`` without a bias; on a one-thread AVX-512 Xeon ``F.linear`` of 12,544 x 96 by 384
  ran at 69 GFLOP/s where that table read 104-137 (the bias is written into the output
  first, and the GEMM then reads and writes it again; a transposed small-K operand packs
  slower). Each call reads a weight the calls before did not (:func:`weight_pool`): in a model
  the layers' weights evict each other from the core's L2 cache, and a weight read from
  further out slows a layer of few rows. On the Xeon (2 MiB of L2 a core) the 64-row table
  read 3-50% slower so, and ViT-B/16, DeiT-S, ViT-Ti, Mixer-B/16 and ConvNeXt-T at batch 1
  were priced 2-9 points slower, each nearer its measured time (4.6-18.5% too fast before;
  batch 4 moved 1-2 points, ResNet-50 not at all).
* **Grouped convolutions** (:func:`grouped_conv_by_k`): RegNet's and ResNeXt's 3x3
  convolutions of 8 to 48 channels per group, by K = channels per group x 9. Each group is a
  GEMM as narrow as its channels: the dense table at the same K priced them 2.6-4.6 times too
  fast on the Xeon (benchmarks/cpu_op_profile.py).

Two more tables were tried and dropped, each judged by re-pricing the same two validation runs
(benchmarks/validate_cpu.py --ab) with and without it: an elementwise pass priced at the rate of
its working set (from the caches: ReLUs and additions had run 1.5-3.4 times faster than the
DRAM copy's rate) made the models 3.5 and 5.2 points worse, too fast; the elements per second
of GELU, SiLU and softmax moved no median.

Each figure comes from the machine the prediction is for; nothing here is fitted.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

LINEAR_ROWS = (64, 512, 4096)
LINEAR_K = (64, 256, 768, 3072)
LINEAR_N = 512
# (channels, channels per group, spatial): RegNet's group widths at its stages' sizes
GROUPED_GRID = ((128, 8, 56), (256, 16, 28), (384, 24, 14), (768, 48, 7))


L2_FALLBACK = 2 * 2**20  # bytes: a core's L2 where the OS does not say
CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


@functools.cache
def l2_bytes(root: Path = CACHES) -> int:
    """A core's L2 cache in bytes, as Linux reports it (cpu0's level-2 data or unified cache)."""
    for index in sorted(root.glob("index*")) if root.is_dir() else []:
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        if level == "2" and kind in ("Data", "Unified") and size[:-1].isdigit():
            return int(size[:-1]) * {"K": 2**10, "M": 2**20}.get(size[-1], 1)
    return L2_FALLBACK


def weight_pool(n: int, k: int) -> list[torch.Tensor]:
    """Enough (n, k) fp32 weights to fill four times a core's L2: a call that takes the next
    one reads it from further out, as a model's layer reads its own weight."""
    return [torch.randn(n, k) for _ in range(max(2, math.ceil(4 * l2_bytes() / (n * k * 4))))]


def _cycle(x: torch.Tensor, weights: list[torch.Tensor], bias: torch.Tensor) -> Callable[[], Any]:
    it = itertools.cycle(weights)
    return lambda: torch.nn.functional.linear(x, next(it), bias)


def linear_by_rows(time: Callable[[Callable[[], Any], int], float], reps: int,
                   rows: tuple[int, ...] = LINEAR_ROWS) -> dict[str, list[list[float]]]:
    """{rows: [[K, TFLOP/s], ...]} of ``F.linear`` (weight (N, K), a bias) at N = LINEAR_N, each
    call with a weight out of the core's L2 (:func:`weight_pool`)."""
    out: dict[str, list[list[float]]] = {}
    with torch.inference_mode():
        for k in LINEAR_K:
            weights, b = weight_pool(LINEAR_N, k), torch.randn(LINEAR_N)
            for m in rows:
                t = time(_cycle(torch.randn(m, k), weights, b), reps)
                out.setdefault(str(m), []).append([float(k), 2 * m * k * LINEAR_N / t / 1e12])
    return out


def grouped_conv_by_k(time: Callable[[Callable[[], Any], int], float], batch: int,
                      reps: int) -> list[list[float]]:
    """[K, TFLOP/s] of the 3x3 grouped convolutions of GROUPED_GRID at ``batch``, by K."""
    out = []
    with torch.inference_mode():
        for c, width, s in GROUPED_GRID:
            x, w = torch.randn(batch, c, s, s), torch.randn(c, width, 3, 3)
            t = time(functools.partial(torch.nn.functional.conv2d, x, w, padding=1, groups=c // width), reps)
            out.append([float(width * 9), 2 * batch * c * width * 9 * s * s / t / 1e12])
    return sorted(out)
