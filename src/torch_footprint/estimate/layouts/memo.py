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
