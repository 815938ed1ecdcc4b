"""An optimizer's step recorded once per parameter signature, replayed in later traces.

A training trace of a large model spends most of its time in ``optimizer.step()``: torch.optim's
step on fake tensors makes each parameter's state and runs its updates through FakeTensorMode,
about 1.4 s of a 2.5 s trace of Llama-3.1-70B, and the planner traces the same parameters at
every micro-batch and checkpointing mode. What the step records depends only on the optimizer
(its class and settings), the device and kind of tensors, and each parameter's name, shape,
strides and dtype and its gradient's (which parameters have one): not on the inputs, the
checkpointing or anything the forward did. So the step's events, the storages it makes, frees
and keeps as state are recorded the first time (:meth:`StepMemo.capture`) and appended to a
later trace of the same signature (:meth:`StepMemo.replay`), storage ids shifted to follow that
trace's own: the trace is the same as a run of the step would make (a test compares them).
A step during which a storage made before it was freed (a collected reference cycle, say) is
not kept: its frees depend on that trace.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from .recorder import Recorder
from .records import MemFree, OpEvent

Key = tuple[Any, ...]


@dataclasses.dataclass
class _Step:
    """One recorded step, storage ids relative to the last id given out before it."""

    events: list[OpEvent]  # storage ids in ``allocs`` relative
    frees: list[tuple[int, int, int]]  # (after, relative to the step's first event; relative id; bytes)
    uids: int  # storages the step made
    state: list[int]  # relative ids of the optimizer's state, as the trace tags them


@dataclasses.dataclass
class _Pending:
    key: Key
    events: int  # len(rec.events) when the step began
    frees: int
    uid: int


def _tensor_sig(t: torch.Tensor) -> tuple[Any, ...]:
    return tuple(t.shape), t.stride(), t.dtype, t.device.type


def signature(factory: Any, model: nn.Module, rec: Recorder, tensors: str) -> Key | None:
    """What a step's record depends on; None where it is not known to depend on nothing else
    (an optimizer that is not one of torch.optim's own classes as :mod:`.setups` builds them)."""
    cls = getattr(factory, "cls", None)
    if cls is None or not isinstance(cls, type) or cls.__module__.split(".")[:2] != ["torch", "optim"]:
        return None
    params = tuple((name, _tensor_sig(p), p.requires_grad, None if p.grad is None else _tensor_sig(p.grad))
                   for name, p in model.named_parameters())
    return (cls.__qualname__, tuple(sorted((k, repr(v)) for k, v in factory.kwargs.items())), rec.device, tensors,
            rec.stack.current("optimizer"), params)


class StepMemo:
    """Recorded steps by :func:`signature`, the ``size`` most recently used kept."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._steps: OrderedDict[Key, _Step] = OrderedDict()
        self.replayed = 0

    def begin(self, key: Key, rec: Recorder) -> _Pending:
        return _Pending(key, len(rec.events), len(rec.frees), rec._uid)

    def replay(self, key: Key, rec: Recorder, state_tag: list[int]) -> bool:
        """Append the step recorded under ``key`` to ``rec`` (and its state's ids to
        ``state_tag``); False where none is."""
        step = self._steps.get(key)
        if step is None:
            return False
        self._steps.move_to_end(key)
        base, start = rec._uid, len(rec.events)
        for e in step.events:
            rec.events.append(dataclasses.replace(
                e, allocs=[[uid + base, n] for uid, n in e.allocs], out_shapes=[list(s) for s in e.out_shapes],
                out_dtypes=list(e.out_dtypes), weights=list(e.weights), problem=list(e.problem)))
        rec.frees.extend(MemFree(after + start, uid + base, n) for after, uid, n in step.frees)
        rec._uid += step.uids
        state_tag.extend(uid + base for uid in step.state)
        self.replayed += 1
        return True

    def capture(self, pending: _Pending, rec: Recorder, state_tag: list[int]) -> None:
        """Keep the step that began at ``pending``, once the trace has ended (every free of its
        state recorded)."""
        base, start, last = pending.uid, pending.events, len(rec.events) - 1
        frees = rec.frees[pending.frees:]
        if any(f.storage <= base and f.after < last for f in frees):
            return  # a storage of the forward or backward freed during the step: not the step's alone
        events = [dataclasses.replace(e, allocs=[[uid - base, n] for uid, n in e.allocs]) for e in rec.events[start:]]
        self._steps[pending.key] = _Step(
            events=events,
            frees=[(f.after - start, f.storage - base, f.nbytes) for f in frees if f.storage > base],
            uids=rec._uid - base, state=[uid - base for uid in state_tag if uid > base])
        while len(self._steps) > self.size:
            self._steps.popitem(last=False)


MEMO = StepMemo()


def install(opt: torch.optim.Optimizer, factory: Any, model: nn.Module, rec: Recorder, tensors: str,
            state_tag: list[int]) -> Any:
    """Make ``opt.step()`` replay a recorded step where :data:`MEMO` has one, else run and
    record it; returns what to call once the trace has ended. ``state_tag``: the trace's list
    of the optimizer's state ids. The optimizer is held weakly, so that deleting it frees its
    state when a step without this would (no reference cycle)."""
    ref = weakref.ref(opt)
    pending: list[_Pending] = []

    def step(*args: Any, **kwargs: Any) -> Any:
        key = signature(factory, model, rec, tensors)
        if key is not None and MEMO.replay(key, rec, state_tag):
            return None
        if key is not None:
            pending.append(MEMO.begin(key, rec))
        this = ref()
        return type(this).step(this, *args, **kwargs)

    opt.step = step  # type: ignore[method-assign]

    def finish() -> None:
        if pending:
            MEMO.capture(pending[0], rec, state_tag)

    return finish
