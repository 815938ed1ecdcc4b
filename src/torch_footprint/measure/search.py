"""The largest batch that runs: doubling, then bisection, recovering from out-of-memory."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field

from ..search import largest_true


class OutOfMemory(Exception):
    """A batch did not fit (a real allocator failure, or over a memory budget)."""


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocator's out-of-memory error (CUDA or CPU)."""
    import torch

    if isinstance(exc, (OutOfMemory, torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text
                                              or "failed to allocate" in text)


def release_memory() -> None:
    """Drop what a failed attempt left behind: Python garbage, then the CUDA cache."""
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - releasing memory must never raise
        pass


@dataclass
class SearchResult:
    batch: int
    tried: list[tuple[int, bool]] = field(default_factory=list)  # (batch, ran)


def largest_runnable_batch(try_batch: Callable[[int], None], *, start: int = 1, limit: int = 1 << 16,
                           release: Callable[[], None] = release_memory) -> SearchResult:
    """The largest batch for which ``try_batch`` does not run out of memory.

    Doubles from ``start`` until a batch fails (or ``limit``), then bisects between the
    last that ran and the first that failed (:func:`torch_footprint.search.largest_true`).
    After every failure ``release`` runs, so memory is back to where it was before the next
    try. Errors other than out-of-memory propagate.
    """
    tried: list[tuple[int, bool]] = []

    def runs(b: int) -> bool:
        try:
            try_batch(b)
        except Exception as exc:
            if not is_oom(exc):
                raise
            del exc
            release()
            tried.append((b, False))
            return False
        tried.append((b, True))
        return True

    return SearchResult(largest_true(runs, start, limit=limit), tried)
