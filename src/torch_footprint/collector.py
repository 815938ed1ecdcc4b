"""Python's cyclic collector while footprint works: long-lived objects are kept out of its walks.

A trace makes objects fast enough to set off collections, and each full collection walks every
object the process holds: torch's, the model library's, the models built, the caller's. On the
torchvision zoo that walking was a quarter of the time of a count. Three policies, one per
owner of the process's heap:

- the command line, which runs its process start to end, freezes (``gc.freeze``) whatever
  survives each full collection (:func:`own_process`);
- a planner's search, which keeps every trace it makes, freezes each once it is made and gives
  them back at the end (:func:`take` and :func:`give_back`);
- a trace called from a library user's code sets aside what existed before it for the run
  (:func:`set_aside`).

None of them freezes where someone else froze objects first (``gc.get_freeze_count``; a server
may freeze before it forks) or turned the collector off. What a trace makes is collected as
before, so the frees of its storages are noted where they were; cyclic garbage among the
objects set aside waits until they come back.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

_owner: str | None = None  # "process" (the command line) or "search" (a planner) while one owns the freezing


def _freeze_after(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()


def own_process() -> None:
    """The command line runs this process start to end: after each full collection, what survived
    it leaves the collector's sight, so the next full collection walks only what is newer (each walk
    of torch's objects cost a tenth of a second, and a planner's search a quarter of its time). Not
    for the verbs that time or watch real runs, whose collector stays as the user's code has it."""
    global _owner
    _owner = "process"
    if _freeze_after not in gc.callbacks:
        gc.callbacks.append(_freeze_after)


def take() -> bool:
    """A planner's search starts: whether it may freeze each trace it keeps (nothing frozen by
    anyone else, no other search under way). True must be answered by :func:`give_back`."""
    global _owner
    if _owner == "search" or gc.get_freeze_count():
        return False
    if _owner is None:
        _owner = "search"
    return True


def give_back(took: bool) -> None:
    """The search is over: what it froze comes back to the collector's sight."""
    global _owner
    if took:
        gc.unfreeze()
        if _owner == "search":
            _owner = None


@contextlib.contextmanager
def set_aside() -> Iterator[None]:
    """For one trace: what the collector tracked before it is set aside, and comes back at the end."""
    if _owner is not None or not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
