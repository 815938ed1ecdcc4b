"""Figures worked out once per live object: a trace priced under many layouts asks the same
questions of it (its FSDP units, a module's output bytes, a pipeline rank's share) again and
again. Each answer is kept while the object lives and forgotten with it; the objects are not
changed after they are made (a trace, a prediction's operators, a replayed peak)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")
_KEPT: dict[int, dict[Hashable, Any]] = {}
# answers that depend only on an object several owners hold (the events a trace shares with its
# pipeline ranks' slices): by the object's id, the object itself (so its id stays its own), the
# answers and how many owners that asked are alive
_SHARED: dict[int, list[Any]] = {}


def once(owner: object, key: Hashable, make: Callable[[], T]) -> T:
    """``make()`` the first time ``owner`` is asked for ``key``, the same answer after."""
    oid = id(owner)
    kept = _KEPT.get(oid)
    if kept is None:
        kept = _KEPT[oid] = {}
        weakref.finalize(owner, _KEPT.pop, oid, None)
    if key not in kept:
        kept[key] = make()
    return kept[key]  # type: ignore[no-any-return]


def once_shared(owner: object, shared: object, key: Hashable, make: Callable[[], T]) -> T:
    """:func:`once` for an answer that ``make()`` reads off ``shared`` alone, an object that other
    owners hold too (a trace's events, which the slices of it share): worked out once for all of
    them, kept while any owner that asked lives."""
    def answer() -> T:
        sid = id(shared)
        entry = _SHARED.get(sid)
        if entry is None:
            entry = _SHARED[sid] = [shared, {}, 0]
        entry[2] += 1
        weakref.finalize(owner, _release, sid)
        if key not in entry[1]:
            entry[1][key] = make()
        return entry[1][key]  # type: ignore[no-any-return]

    return once(owner, ("shared", key), answer)


def _release(sid: int) -> None:
    entry = _SHARED.get(sid)
    if entry is not None:
        entry[2] -= 1
        if entry[2] <= 0:
            del _SHARED[sid]
