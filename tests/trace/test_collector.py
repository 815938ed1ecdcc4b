"""A trace sets aside from Python's cyclic collector what existed before it, gives it back at the
end, leaves a caller's frozen objects as they were, and still notes the free of a storage the
collector reclaims during the run."""

from __future__ import annotations

import gc

import torch
from torch import nn

from torch_footprint import collector
from torch_footprint.trace import trace_model

# what the collector had frozen when each forward ran (a module's own attributes are put back
# as they were after a trace: a list of its own would come back empty)
SEEN: list[int] = []


class Cycle(nn.Module):
    """Makes a tensor, leaves it in a reference cycle, collects, and notes what the collector froze."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        SEEN.append(gc.get_freeze_count())
        y = self.fc(x)
        loop: list = [y * 2]
        loop.append(loop)
        del loop
        gc.collect()  # the young cycle is reclaimed here: its storage freed before the add below
        return y + 1


def _inputs(device: str):
    return (torch.empty(4, 8, device=device),), {}


def _trace(seen: list[int]):
    SEEN.clear()
    trace = trace_model(Cycle().to("meta"), _inputs, reuse=False)
    seen.extend(SEEN)
    return trace


def test_trace_sets_aside_what_existed_and_gives_it_back() -> None:
    assert gc.get_freeze_count() == 0, "an earlier test left objects frozen"
    seen: list[int] = []
    trace = _trace(seen)
    assert seen and seen[0] > 0  # during the run: the objects made before it were frozen
    assert gc.get_freeze_count() == 0  # and given back
    ops = [e.op for e in trace.events]
    mul, add = ops.index("aten.mul.Tensor"), ops.index("aten.add.Tensor")
    made = trace.events[mul].allocs[0][0]
    # the cycle's tensor (4 x 8 fp32) is freed after the multiply that made it, before the add
    assert [(f.after, f.nbytes) for f in trace.frees if f.storage == made] == [(mul, 4 * 8 * 4)]
    assert mul < add


def test_a_callers_frozen_objects_stay_as_they_were() -> None:
    kept = [[i] for i in range(100)]
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        seen: list[int] = []
        _trace(seen)
        assert seen == [before] and gc.get_freeze_count() == before  # nothing frozen or unfrozen
    finally:
        gc.unfreeze()
    assert kept


def test_nothing_is_done_with_the_collector_off() -> None:
    gc.disable()
    try:
        seen: list[int] = []
        _trace(seen)
        assert seen == [0] and not gc.isenabled()
    finally:
        gc.enable()


def test_the_command_line_policy_is_not_taken_from_python() -> None:
    from torch_footprint.cli import main

    assert main(["schema"]) == 0
    assert collector._owner is None and collector._freeze_after not in gc.callbacks
