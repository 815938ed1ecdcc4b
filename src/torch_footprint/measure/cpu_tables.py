"""What ``footprint calibrate`` times on a CPU beyond the generic rates: the shapes a model's
operators take there, where the library's rate departs from the plain tables.

* **Linear layers** (:func:`linear_by_rows`): ``F.linear`` with the weight stored (N, K) as
  ``nn.Linear`` keeps it and a bias, at 64, 512 and 4,096 rows. The plain matmul table times
  ``x @ W`` without a bias; on a one-thread AVX-512 Xeon ``F.linear`` of 12,544 x 96 by 384
  ran at 69 GFLOP/s where that table read 104-137 (the bias is written into the output
  first, and the GEMM then reads and writes it again; a transposed small-K operand packs
  slower).
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
from collections.abc import Callable
from typing import Any

import torch

LINEAR_ROWS = (64, 512, 4096)
LINEAR_K = (64, 256, 768, 3072)
LINEAR_N = 512
# (channels, channels per group, spatial): RegNet's group widths at its stages' sizes
GROUPED_GRID = ((128, 8, 56), (256, 16, 28), (384, 24, 14), (768, 48, 7))


def linear_by_rows(time: Callable[[Callable[[], Any], int], float], reps: int,
                   rows: tuple[int, ...] = LINEAR_ROWS) -> dict[str, list[list[float]]]:
    """{rows: [[K, TFLOP/s], ...]} of ``F.linear`` (weight (N, K), a bias) at N = LINEAR_N."""
    out: dict[str, list[list[float]]] = {}
    with torch.inference_mode():
        for m in rows:
            table = []
            for k in LINEAR_K:
                x, w, b = torch.randn(m, k), torch.randn(LINEAR_N, k), torch.randn(LINEAR_N)
                t = time(functools.partial(torch.nn.functional.linear, x, w, b), reps)
                table.append([float(k), 2 * m * k * LINEAR_N / t / 1e12])
            out[str(m)] = table
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
