"""The one search for a largest batch: doubling, then bisection, on a yes/no question.

``footprint memory --max-batch`` asks it of traced peaks, ``bench --batch auto`` of real
runs that may run out of memory; both are this function with another question."""

from __future__ import annotations

from collections.abc import Callable


def largest_true(ok: Callable[[int], bool], start: int = 1, *, known_ok: int | None = None,
                 limit: int = 1 << 24) -> int:
    """The largest ``n`` for which ``ok(n)`` holds, ``ok`` being true up to some size and
    false above it.

    Asks ``ok(start)``, doubles while the answer is yes (stopping at ``limit``), then
    bisects between the last yes and the first no. Where ``start`` is a no, the bracket's
    low end is ``known_ok`` (a size known to pass); without one the answer is 0."""
    if ok(start):
        lo, hi = start, None
    elif known_ok is not None and known_ok < start:
        lo, hi = known_ok, start
    else:
        return 0
    b = lo
    while hi is None:
        nb = min(b * 2, limit)
        if nb == b:
            return b
        if ok(nb):
            lo = b = nb
        else:
            hi = nb
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo
