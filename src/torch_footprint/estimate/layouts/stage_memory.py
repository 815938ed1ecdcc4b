"""Each pipeline rank's part of a one-rank replay's live bytes, event by event: what the
pipeline's memory (:func:`.schedule.schedule_peak`) reads of the trace at every operator.

The per-event arithmetic runs on int64 tensors: a 70B model's step has some 35,000 events, and a
planner's search asks it of every trace under each pipeline split."""

from __future__ import annotations

import torch

from ...trace import Trace
from .memo import once
from .pipeline import StageMap


def transients_above(trace: Trace, highs: torch.Tensor, sm: StageMap, acts: list[int]) -> list[int | None]:
    """Per pipeline rank, what its own operators (forward, loss, backward) hold at their worst
    beyond its micro-batch's saved activations at their fullest (``acts``), the model states
    still counted (the caller takes them out; None for a rank with no operator): the logits and
    their gradient on the last rank, an operator's outputs and scratch on each. At each event of
    the whole model's replay of one micro-batch (``highs``: live bytes at its high point, an int64 tensor), the
    saved activations alive then (storages the forward made that outlive it, from birth to free)
    are counted for the rank whose chunk made them only; the model's output (the logits) for the
    last rank only, which a one-rank step keeps through the whole backward and a pipeline's other
    ranks never see. One rank: the replay's peak less its activations."""
    ranks, others = once(trace, ("pipeline others", sm.p, sm.v), lambda: _others_by_event(trace, sm))
    n = min(len(ranks), len(highs))
    ranks = ranks[:n]
    above = (highs[:n] - others[:n]
             - torch.tensor(acts, dtype=torch.int64)[ranks.clamp(min=0)])
    out: list[int | None] = [None] * sm.p
    for r in range(sm.p):
        mine = above[ranks == r]
        if mine.numel():
            out[r] = int(mine.max())
    return out


def event_chunks(trace: Trace, sm: StageMap) -> torch.Tensor:
    """The stage map's chunk of each event (-1: the optimizer step), and one more -1 after them."""
    return once(trace, ("stage map events", sm.p, sm.v), lambda: torch.tensor([*sm.events, -1], dtype=torch.int64))


def _saved(trace: Trace) -> tuple[torch.Tensor, ...]:
    """What does not depend on the split: the storages the forward made that outlive it and are
    not the model's output (the event that made each, the event after which it is freed, its
    bytes); the output's live bytes at each event; the output a pipeline's last stage keeps
    beyond a one-rank step's (from the loss's free to the end)."""
    events, n = trace.events, len(trace.events)
    fwd = [i for i, e in enumerate(events) if e.phase == "forward"]
    end = fwd[-1] if fwd else -1
    freed = {f.storage: f.after for f in trace.frees}
    outputs = set(trace.tags.get("output", []))
    made, gone, size = [], [], []
    output = [0] * (n + 1)
    first: dict[int, int] = {}  # each output's bytes, where the forward made it
    for i in fwd:
        for uid, nbytes in events[i].allocs:
            until = freed.get(uid, n)
            if uid in outputs:
                output[i] += nbytes
                output[min(until, n - 1) + 1] -= nbytes  # freed after event ``until``
                first.setdefault(uid, nbytes)
            elif until > end:
                made.append(i)
                gone.append(min(until, n - 1) + 1)
                size.append(nbytes)
    # a one-rank step lets the output go once the loss is taken; a pipeline's last stage keeps it
    # (its forward cache) until that micro-batch's backward through the stage ends
    released = [0] * (n + 1)
    for uid in outputs:
        until = freed.get(uid, n)
        if end < until < n:
            released[until + 1] += first.get(uid, 0)
    return (torch.tensor(made, dtype=torch.int64), torch.tensor(gone, dtype=torch.int64),
            torch.tensor(size, dtype=torch.int64), torch.tensor(output, dtype=torch.int64).cumsum(0),
            torch.tensor(released, dtype=torch.int64).cumsum(0))


def _others_by_event(trace: Trace, sm: StageMap) -> tuple[torch.Tensor, torch.Tensor]:
    """At each event of the trace: the pipeline rank whose operator it is (-1: none, or the
    optimizer step) and the live bytes at it that belong to other ranks (saved activations other
    ranks' chunks made, and the model's output where the rank is not the last; a pipeline's last
    rank keeps the output until its backward ends: counted there as a negative share of the
    others'); two int64 tensors."""
    made, gone, size, output, kept = once(trace, "saved by the forward", lambda: _saved(trace))
    n = len(trace.events)
    chunks = event_chunks(trace, sm)
    owner = chunks[made].clamp(min=0) % sm.p  # the rank whose chunk made each saved storage
    change = torch.zeros(sm.p, n + 1, dtype=torch.int64)
    change.index_put_((owner, made), size, accumulate=True)
    change.index_put_((owner, gone), -size, accumulate=True)
    live = change.cumsum(1)  # live saved bytes by rank at each event
    saved = live.sum(0)
    if sm.p * sm.v == 1:
        kept = torch.zeros_like(kept)
    ranks = torch.where(chunks >= 0, chunks % sm.p, -1)[:n]  # the stage map gives the optimizer step none
    last = sm.rank(sm.p * sm.v - 1)
    at = torch.arange(n)
    r = ranks.clamp(min=0)
    others = saved[:n] - live[r, at] + torch.where(r != last, output[:n], -kept[:n])
    return ranks, torch.where(ranks >= 0, others, 0)
