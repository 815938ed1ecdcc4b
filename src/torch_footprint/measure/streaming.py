"""Streaming measurements of ``footprint calibrate``: a copy and the few-row products a
decode step runs, each over more bytes than the last-level cache holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .timer import CpuClock, CudaClock, measure


def _time(fn: Callable[[], Any], device: str, reps: int) -> float:
    """Median seconds per call of ``fn`` after one warm-up call, over at least ``reps`` calls."""
    clock = CudaClock() if device == "cuda" else CpuClock()
    return measure(fn, clock, min_reps=reps, max_reps=max(10 * reps, 1000), min_seconds=0.0, warmup=1).median


def _stream_matvec(device: str, nbytes: int, reps: int) -> float:
    """Bytes per second a one-row matmul reads its matrix at, the matrix far larger than the
    caches: a decode step's weights stream this way, often slower than a plain copy."""
    k = 4096
    w = _random_like_rows(k, nbytes // (4 * k), device, torch.float32)
    x = torch.randn(1, k, device=device)
    t = _time(lambda: x @ w, device, reps)
    return w.numel() * 4 / t


def _random_like_rows(rows: int, cols: int, device: str, dtype: torch.dtype) -> torch.Tensor:
    """A (rows, cols) tensor whose every row is one row of normal random numbers: the values a
    weight matrix has, written at copy speed (drawing a GiB of normals one by one takes seconds
    on a CPU, more in bf16, and a matmul's speed does not depend on which normals they are)."""
    out = torch.empty(rows, cols, device=device, dtype=dtype)
    out.copy_(torch.randn(1, cols, device=device).to(dtype).expand(rows, cols))
    return out


MATVEC_K = (512, 1024, 2048, 4096, 8192)  # reduction lengths of the few-row products timed on CPUs
MATVEC_K_QUICK = MATVEC_K[::2]  # --quick: every other one (the tables interpolate in log K between them)
MATVEC_TABLE_ROWS = (1, 2, 4)  # their rows: a decode step's batch
MATVEC_MATRIX_BYTES = 8 * 2**20  # each weight matrix: a decode step streams many of about this size


def _matvec_by_k(device: str, nbytes: int, reps: int, dtype: torch.dtype = torch.float32,
                 layouts: tuple[str, ...] = ("n", "t"),
                 ks: tuple[int, ...] = MATVEC_K) -> dict[str, dict[str, list[list[float]]]]:
    """{layout: {rows: [[K, GB/s], ...]}}: the rate few-row products stream weight matrices at,
    as a decode step does (many matrices of MATVEC_MATRIX_BYTES in turn, ``nbytes`` in all,
    beyond the caches), by layout, rows and reduction length K (those of ``ks``). Layout "t" is ``x @ W.t()``
    with W stored (N, K) as ``nn.Linear`` keeps its weight, "n" is ``x @ W`` with W stored
    (K, N) (GPT-2's Conv1D). On this 2-core EPYC: one row 10.8 GB/s in "t" at K = 768 and
    15.4 in "n", and 2 rows half that, 4 rows a third: the BLAS packs the matrix once rows
    are more than one, so a decode step at batch 4 is far slower than at batch 1."""
    out: dict[str, dict[str, list[list[float]]]] = {lay: {} for lay in layouts}
    elem = torch.empty((), dtype=dtype).element_size()
    count = max(2, nbytes // MATVEC_MATRIX_BYTES)
    # the matrices are views of one buffer: one allocation the C library maps on its own and
    # gives back to the system when freed (many matrices of 8 MiB each would stay in its heap,
    # resident, after the calibration)
    buffer = _random_like_rows(count, MATVEC_MATRIX_BYTES // elem, device, dtype).flatten()
    for k in ks:
        n = max(MATVEC_MATRIX_BYTES // (elem * k), 1)
        for layout in layouts:
            ws = [_matrix_view(buffer, i * k * n, k, n, layout) for i in range(count)]
            for rows in MATVEC_TABLE_ROWS:
                x = torch.randn(rows, k, device=device).to(dtype)

                def run(ws: list[torch.Tensor] = ws, x: torch.Tensor = x) -> None:
                    for w in ws:
                        x @ w

                rate = count * k * n * elem / _time(run, device, reps) / 1e9
                out[layout].setdefault(str(rows), []).append([float(k), rate])
            del ws
    del buffer
    return out


def _matrix_view(buffer: torch.Tensor, start: int, k: int, n: int, layout: str) -> torch.Tensor:
    """A (K, N) matrix over ``buffer`` from element ``start``: stored (K, N) in layout "n",
    stored (N, K) and transposed in layout "t" (``nn.Linear``'s weight)."""
    flat = buffer[start:start + k * n]
    return flat.view(k, n) if layout == "n" else flat.view(n, k).t()


STREAM_LLC_TIMES = 4  # what a streaming measurement reads: this many times the last-level cache
STREAM_MAX_BYTES = 2**31  # and no more than this


def stream_bytes(floor: int, llc: int) -> int:
    """Bytes a streaming measurement (copy, weight matrices) reads: ``floor``, or
    STREAM_LLC_TIMES the last-level cache ``llc`` where that is larger (STREAM_MAX_BYTES at
    most). A server's last-level cache holds hundreds of MiB (260 MiB on a Xeon here): weights
    streamed from it run about twice as fast as a model's from memory."""
    return max(floor, min(STREAM_LLC_TIMES * llc, STREAM_MAX_BYTES))


def _copy(device: str, nbytes: int, reps: int) -> float:
    src = torch.empty(nbytes // 4, device=device)
    src.fill_(1.0)
    dst = torch.empty_like(src)
    t = _time(lambda: dst.copy_(src), device, reps)
    return 2 * src.numel() * 4 / t
