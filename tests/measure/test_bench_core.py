"""The timer's statistics and warm-up on a fake clock; the batch search with a simulated OOM."""

from __future__ import annotations

import statistics

import pytest

from torch_footprint.measure.search import OutOfMemory, largest_runnable_batch
from torch_footprint.measure.timer import measure, quantile, summarize, warm_up


class FakeClock:
    """Each call 'takes' the next duration from a script."""

    def __init__(self, durations: list[float]) -> None:
        self.durations = list(durations)
        self.calls = 0

    def start(self) -> int:
        return self.calls

    def stop(self, token: int) -> float:
        d = self.durations[min(self.calls, len(self.durations) - 1)]
        self.calls += 1
        return d


def test_statistics_worked_by_hand() -> None:
    s = summarize([0.010, 0.012, 0.011, 0.030, 0.009], warmup_reps=3)
    assert s.median == 0.011 and s.min == 0.009 and s.max == 0.030
    assert s.mean == pytest.approx(0.0144)
    assert s.std == pytest.approx(statistics.stdev([0.010, 0.012, 0.011, 0.030, 0.009]))
    # sorted 9,10,11,12,30 (ms): p25 at rank 1 = 10, p75 at rank 3 = 12, p90 at rank 3.6 = 12 + 0.6 * 18
    assert s.iqr == pytest.approx(0.002)
    assert s.p90 == pytest.approx(0.012 + 0.6 * 0.018)
    assert s.spread == pytest.approx(0.002 / 0.011)
    assert s.noisy  # 18% > 10%
    assert s.per_second(8) == pytest.approx(8 / 0.011)
    assert quantile([1.0, 2.0], 0.5) == 1.5


def test_warm_up_runs_until_two_windows_agree() -> None:
    # three slow windows (cold caches), then steady
    clock = FakeClock([0.05] * 5 + [0.03] * 5 + [0.0205] * 5 + [0.020] * 100)
    assert warm_up(lambda: None, clock, window=5, tolerance=0.05) == 20


def test_measure_reps_and_time_floor() -> None:
    clock = FakeClock([0.125] * 1000)
    s = measure(lambda: None, clock, min_reps=30, min_seconds=5.0, warmup=False)
    assert s.reps == 40  # 30 calls give 3.75 s; it runs on to 5 s of timed work
    assert s.median == 0.125 and not s.noisy


def test_batch_search_finds_exactly_the_largest_and_releases_after_each_failure() -> None:
    released = []
    allocated = {"now": 0}

    def try_batch(b: int) -> None:
        allocated["now"] += b  # memory taken by the attempt
        if b > 37:
            raise OutOfMemory(f"batch {b}")
        allocated["now"] -= b  # a successful run frees its memory

    def release() -> None:
        released.append(True)
        allocated["now"] = 0  # gc + empty_cache bring memory back to the baseline

    r = largest_runnable_batch(try_batch, release=release)
    assert r.batch == 37
    fails = [b for b, ok in r.tried if not ok]
    assert len(released) == len(fails) and allocated["now"] == 0
    assert [b for b, _ in r.tried][:7] == [1, 2, 4, 8, 16, 32, 64]


def test_batch_search_when_nothing_fits_and_other_errors_propagate() -> None:
    def never(b: int) -> None:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    assert largest_runnable_batch(never, release=lambda: None).batch == 0

    def broken(b: int) -> None:
        raise ValueError("shape mismatch")

    with pytest.raises(ValueError):
        largest_runnable_batch(broken, release=lambda: None)


def test_progress_reaches_one_when_both_floors_are_met() -> None:
    seen: list[float] = []
    measure(lambda: None, FakeClock([0.125] * 100), min_reps=30, min_seconds=5.0, warmup=False,
            on_progress=seen.append)
    # after call i: min(i / 30 calls, 0.125 i / 5 s) = i / 40, the time floor being the later one
    assert seen == pytest.approx([i / 40 for i in range(1, 41)])


def test_rss_peak_sees_a_short_lived_allocation_without_a_sampling_thread():
    import threading

    import torch

    from torch_footprint.measure.runner import RssSampler

    before = threading.active_count()
    with RssSampler() as s:
        during = threading.active_count()
        x = torch.ones(50 * 2**20)  # 200 MiB, touched, then freed inside the block
        del x
    assert s.peak - s.base >= 190 * 2**20
    assert during == before  # Linux: the kernel's high-water mark, nothing competing with the timed calls


def test_the_one_largest_batch_search_by_hand() -> None:
    from torch_footprint.search import largest_true

    asked: list[int] = []

    def ok(n: int) -> bool:
        asked.append(n)
        return n <= 37

    # doubling from 5: 5, 10, 20, 40 (no); bisection between 20 and 40: 30, 35, 37, 38 (no)
    assert largest_true(ok, 5) == 37
    assert asked == [5, 10, 20, 40, 30, 35, 37, 38]
    # a start that fails bisects down to a size known to pass; without one the answer is 0
    asked.clear()
    assert largest_true(ok, 100, known_ok=1) == 37 and asked[0] == 100
    assert largest_true(ok, 100) == 0
    assert largest_true(lambda n: True, 1, limit=64) == 64
