"""A timer a careful engineer trusts: warm-up until timings settle, device synchronisation,
CUDA events on GPU and perf_counter on CPU, many repetitions, statistics with spread.

The clock is a parameter so that the statistics and the warm-up rule can be tested on a
fake clock.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from . import contention
from .contention import Contention

NOISY_SPREAD = 0.10  # IQR / median above which a result is flagged as noisy


class Clock(Protocol):
    def start(self) -> Any: ...
    def stop(self, token: Any) -> float: ...  # seconds since start(token)


class CpuClock:
    """perf_counter around the call (CPU work is synchronous)."""

    def start(self) -> float:
        return time.perf_counter()

    def stop(self, token: float) -> float:
        return time.perf_counter() - token


class CudaClock:
    """CUDA events recorded on the current stream, with a synchronisation before each start
    (so earlier work is not counted) and after each end (so the call is complete)."""

    def __init__(self) -> None:
        import torch

        self._torch = torch

    def start(self) -> Any:
        cuda = self._torch.cuda
        cuda.synchronize()
        begin, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        begin.record()
        return begin, end

    def stop(self, token: Any) -> float:
        begin, end = token
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1000.0


@dataclass
class Stats:
    """Latency statistics over the timed repetitions, in seconds."""

    reps: int
    warmup_reps: int
    median: float
    mean: float
    std: float
    min: float
    max: float
    p90: float
    p99: float
    iqr: float
    samples: list[float] = field(repr=False, default_factory=list)
    wall: float = 0.0  # real time of the timed loop
    user: float = 0.0  # CPU user time of this process over the timed loop
    sys: float = 0.0  # CPU system time
    threads: int = 0
    contention: Contention | None = field(repr=False, default=None)  # what the CPUs did meanwhile

    @property
    def spread(self) -> float:
        """IQR / median: the noise figure every result carries."""
        return self.iqr / self.median if self.median else math.inf

    @property
    def noisy(self) -> bool:
        return self.spread > NOISY_SPREAD

    def per_second(self, items: int) -> float:
        return items / self.median if self.median else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("samples")
        d.update(spread=self.spread, noisy=self.noisy,
                 contention=self.contention.to_dict() if self.contention else None)
        return d


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples: list[float], warmup_reps: int = 0) -> Stats:
    s = sorted(samples)
    return Stats(reps=len(s), warmup_reps=warmup_reps, median=statistics.median(s), mean=statistics.fmean(s),
                 std=statistics.stdev(s) if len(s) > 1 else 0.0, min=s[0], max=s[-1], p90=quantile(s, 0.9),
                 p99=quantile(s, 0.99), iqr=quantile(s, 0.75) - quantile(s, 0.25), samples=list(samples))


def warm_up(fn: Callable[[], Any], clock: Clock, *, window: int = 5, tolerance: float = 0.05,
            max_reps: int = 200, max_seconds: float = 30.0) -> int:
    """Run ``fn`` until timings settle: the medians of two consecutive windows of ``window``
    calls agree within ``tolerance``. Returns the calls made (at least two windows)."""
    previous: float | None = None
    reps = 0
    began = time.perf_counter()
    while True:
        times = []
        for _ in range(window):
            token = clock.start()
            fn()
            times.append(clock.stop(token))
        reps += window
        current = statistics.median(times)
        if previous is not None and abs(current - previous) <= tolerance * max(previous, 1e-12):
            return reps
        if reps >= max_reps or time.perf_counter() - began > max_seconds:
            return reps
        previous = current


def measure(fn: Callable[[], Any], clock: Clock | None = None, *, min_reps: int = 30, max_reps: int = 10_000,
            min_seconds: float = 2.0, warmup: bool | int = True, threads: int = 0,
            on_progress: Callable[[float], None] | None = None) -> Stats:
    """Time ``fn`` call by call after the warm-up: at least ``min_reps`` calls and
    ``min_seconds`` of timed work, at most ``max_reps`` calls. ``warmup``: True runs
    :func:`warm_up` (until timings settle), a number that many untimed calls, False none.
    ``on_progress`` gets the fraction done (0 to 1) after each timed call."""
    clock = clock or CpuClock()
    if warmup is True:
        warm = warm_up(fn, clock)
    else:
        warm = int(warmup)
        for _ in range(warm):
            fn()
        if warm:
            clock.stop(clock.start())  # a synchronisation: the warm-up calls are finished
    samples: list[float] = []
    before = contention.sample()
    t0 = os.times()
    wall0 = time.perf_counter()
    spent = 0.0
    while len(samples) < max_reps and (len(samples) < min_reps or spent < min_seconds):
        token = clock.start()
        fn()
        dt = clock.stop(token)
        samples.append(dt)
        spent += dt
        if on_progress is not None:
            on_progress(min(1.0, min(len(samples) / min_reps, spent / min_seconds if min_seconds else 1.0)))
    wall = time.perf_counter() - wall0
    t1 = os.times()
    st = summarize(samples, warm)
    st.wall, st.user, st.sys, st.threads = wall, t1.user - t0.user, t1.system - t0.system, threads
    if threads:
        st.contention = contention.between(before, contention.sample(), threads)
    return st
