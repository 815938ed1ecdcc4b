"""Memory from a trace: storage lifetimes replayed event by event.

Every storage the run allocated is in the trace (allocated at an op's output, freed when
its last reference died), with the storages alive before it (weights, buffers, inputs).
Replaying them gives the live bytes after every op: the peak, where it happens, and what
is alive there, in the categories a user adds up by hand:

* weights: parameters and buffers;
* gradients: the parameters' ``.grad`` tensors;
* optimizer state: what the optimizer keeps per parameter (momentum, Adam's moments);
* activations: tensors made in the forward that are still alive when it ends (saved
  for the backward; in inference only the output survives, so this is empty);
* temporaries: everything else alive at the peak (intermediate results, gradients of
  activations, the optimizer's scratch tensors);
* input/output: the model's inputs and outputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..trace.records import Trace
from .sweep import sweep

SWEEP_FROM = 2000  # events from which the replay's pass is array operations (the same figures, sooner)

CATEGORIES = ("weights", "gradients", "optimizer state", "activations", "temporaries", "input/output")


@dataclass
class MemoryPeak:
    """The peak of live bytes in one run, and what was alive there."""

    peak_bytes: int
    baseline_bytes: int  # alive before the first op (weights, buffers, inputs; kept gradients)
    event: int  # index of the op after which the peak was reached (-1: before any op)
    phase: str
    module: str
    op: str
    breakdown: dict[str, int]
    activations_by_module: dict[str, int] = field(default_factory=dict)
    # whole-step totals, wherever the peak is: weights (parameters), buffers, gradients, optimizer state
    persistent: dict[str, int] = field(default_factory=dict)
    timeline: list[tuple[int, int]] = field(default_factory=list)  # (event index, live bytes)
    # with keep_timeline: live bytes before any op, then at each op's high point (its outputs
    # and scratch allocated, nothing freed yet): the peak is the largest of these
    highs: list[int] = field(default_factory=list)

    @property
    def above_baseline(self) -> int:
        return self.peak_bytes - self.baseline_bytes

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("timeline")
        d.pop("highs")
        d["above_baseline"] = self.above_baseline
        return d


@dataclass(frozen=True)
class Moment:
    """Something that happens between two of the trace's operators, outside them (a
    collective and its buffers), just before event ``before`` runs (``len(events)``: after
    the last): ``hold`` bytes of ``what`` begin to be alive (negative: stop), each storage in
    ``resize`` takes its new size in bytes (a gradient reduce-scattered to its shard), and
    then ``spike`` bytes exist for a moment on top (the collective's staging buffers)."""

    before: int
    what: str = "collective buffers"
    hold: int = 0
    resize: Mapping[int, int] = field(default_factory=dict)
    spike: int = 0


def _forward_end(trace: Trace) -> int:
    """Index of the first event after the forward phase (len(events) if none)."""
    for i, e in enumerate(trace.events):
        if e.phase != "forward":
            return i
    return len(trace.events)


def replay(trace: Trace, keep_timeline: bool = False, scale: Mapping[int, float] | None = None,
           extra: int = 0, steady: bool = False, moments: Sequence[Moment] = ()) -> MemoryPeak:
    """Replay allocations and frees; return the peak and the breakdown there.

    ``scale`` maps storage uids to a factor on their size (a shard of a parameter, its
    gradient or optimizer state on one rank); ``extra`` bytes are alive throughout (buffers
    outside the model's tensors, such as DDP's gradient buckets); ``moments``: what happens
    between operators, outside them (:class:`Moment`: FSDP's gathered parameters and
    reduce-scatter buffers). ``steady``: the second and later steps of a training run, where the
    optimizer state the first step created exists before the step begins (the first step
    allocates it lazily, in its optimizer phase) and is only updated in place; the gradients
    are as the trace has them (kept from the step before with ``grads_kept``, else dropped
    by ``zero_grad`` before the forward).
    """
    factor = scale or {}
    before = set(trace.tags.get("optimizer", [])) if steady else set()
    fast = sweep(trace, factor, extra, before, moments, keep_timeline) if len(trace.events) >= SWEEP_FROM else None
    if fast is not None:
        return _peak_of(trace, fast.peak, fast.peak_at, fast.peak_alive, fast.size, fast.born, fast.resized,
                        fast.peak_tick, fast.peak_scratch, fast.peak_held, fast.peak_spike, fast.baseline, extra,
                        fast.timeline, fast.highs)
    size: dict[int, int] = {}
    born: dict[int, int] = {}  # uid -> event index of its allocation (-1: before the run)
    for uid, nbytes, *_ in trace.preexisting:
        size[uid] = int(nbytes * factor.get(uid, 1.0))
        born[uid] = -1
    if before:
        for e in trace.events:
            for uid, nbytes in e.allocs:
                if uid in before:
                    size[uid] = int(nbytes * factor.get(uid, 1.0))
                    born[uid] = -1
    frees_after: dict[int, list[int]] = {}
    for f in trace.frees:
        frees_after.setdefault(f.after, []).append(f.storage)
    live = sum(size.values()) + extra
    baseline = live
    alive: set[int] = set(size)
    for uid in frees_after.get(-1, []):
        if uid in alive:
            alive.discard(uid)
            live -= size[uid]
    peak, peak_at, peak_alive = live, -1, set(alive)
    peak_scratch = 0
    held: dict[str, int] = {}  # bytes the moments hold, by what they are
    peak_held: dict[str, int] = {}
    timeline: list[tuple[int, int]] = []
    highs: list[int] = [live] if keep_timeline else []
    at: dict[int, list[Moment]] = {}
    for m in moments:
        at.setdefault(m.before, []).append(m)
    peak_spike = peak_tick = 0
    resized: dict[int, tuple[int, int]] = {}  # uid -> (tick of its resize, its size before)
    n_events = len(trace.events)
    for i in range(n_events + 1):
        for m in at.get(i, ()):
            held[m.what] = held.get(m.what, 0) + m.hold
            live += m.hold
            for uid, nbytes in m.resize.items():
                if uid in alive:
                    live += nbytes - size[uid]
                resized[uid] = (2 * i, size[uid])
                size[uid] = nbytes
            if live + m.spike > peak:
                peak, peak_at, peak_alive = live + m.spike, i - 1, set(alive)
                peak_scratch, peak_held, peak_spike, peak_tick = 0, dict(held), m.spike, 2 * i
            if keep_timeline:
                highs[-1] = max(highs[-1], live + m.spike)
        if i == n_events:
            break
        e = trace.events[i]
        for uid, nbytes in e.allocs:
            if uid in before:
                continue
            size[uid] = int(nbytes * factor.get(uid, 1.0)) if factor else nbytes
            born[uid] = i
            alive.add(uid)
            live += size[uid]
        if keep_timeline:
            highs.append(live + e.scratch)
        if live + e.scratch > peak:  # the op's outputs exist together with its inputs (and its scratch)
            peak, peak_at, peak_alive = live + e.scratch, i, set(alive)
            peak_scratch, peak_held, peak_spike, peak_tick = e.scratch, dict(held), 0, 2 * i + 1
        for uid in frees_after.get(i, []):
            if uid in alive:
                alive.discard(uid)
                live -= size[uid]
        if keep_timeline:
            timeline.append((i, live))
    return _peak_of(trace, peak, peak_at, peak_alive, size, born, resized, peak_tick, peak_scratch, peak_held,
                    peak_spike, baseline, extra, timeline, highs)


def _peak_of(trace: Trace, peak: int, peak_at: int, peak_alive: set[int], size: dict[int, int], born: dict[int, int],
             resized: dict[int, tuple[int, int]], peak_tick: int, peak_scratch: int, peak_held: dict[str, int],
             peak_spike: int, baseline: int, extra: int, timeline: list[tuple[int, int]],
             highs: list[int]) -> MemoryPeak:
    """The replay's answer from what its pass over the events left (the loop's or :func:`.sweep.sweep`'s)."""
    fwd_end = _forward_end(trace)
    survived_forward = _alive_at(trace, fwd_end, size, born)
    # the sizes at the peak: a storage resized later had its old size (a moment resizes, then spikes)
    at_peak = {**size, **{uid: old for uid, (tick, old) in resized.items() if tick > peak_tick}}
    breakdown = _categorise(trace, peak_alive, at_peak, born, fwd_end, survived_forward)
    breakdown["temporaries"] += peak_scratch
    if extra:
        breakdown["buffers (outside the model)"] = extra
    for what, nbytes in peak_held.items():
        if nbytes:
            breakdown[what] = breakdown.get(what, 0) + nbytes
    if peak_spike:
        breakdown["collective buffers"] = breakdown.get("collective buffers", 0) + peak_spike
    by_module: dict[str, int] = {}
    if trace.settings.get("backward"):
        outputs = set(trace.tags.get("output", []))
        for uid in survived_forward:
            b = born.get(uid, -1)
            if b >= 0 and uid not in outputs:
                mod = trace.events[b].module
                by_module[mod] = by_module.get(mod, 0) + size[uid]
    ev = trace.events[peak_at] if peak_at >= 0 else None
    persistent = {
        "weights": sum(size[u] for u, _, kind in trace.preexisting if kind == "weights"),
        "buffers": sum(size[u] for u, _, kind in trace.preexisting if kind == "buffers"),
        "gradients": sum(size.get(u, 0) for u in trace.tags.get("gradients", [])),
        "optimizer state": sum(size.get(u, 0) for u in trace.tags.get("optimizer", [])),
    }
    return MemoryPeak(persistent=persistent, peak_bytes=peak, baseline_bytes=baseline, event=peak_at,
                      phase=ev.phase if ev else "start", module=ev.module if ev else "", op=ev.op if ev else "",
                      breakdown=breakdown, activations_by_module=dict(sorted(by_module.items(), key=lambda kv: -kv[1])),
                      timeline=timeline, highs=highs)


def _alive_at(trace: Trace, index: int, size: dict[int, int], born: dict[int, int]) -> set[int]:
    """Storages allocated before event ``index`` and not freed before it."""
    freed_before = {f.storage for f in trace.frees if f.after < index}
    return {uid for uid, b in born.items() if b < index and uid not in freed_before}


def _categorise(trace: Trace, alive: set[int], size: dict[int, int], born: dict[int, int], fwd_end: int,
                survived_forward: set[int]) -> dict[str, int]:
    kinds = {uid: kind for uid, _, kind in trace.preexisting}
    grads = set(trace.tags.get("gradients", []))
    optim = set(trace.tags.get("optimizer", []))
    outputs = set(trace.tags.get("output", []))
    training = bool(trace.settings.get("backward"))
    out = dict.fromkeys(CATEGORIES, 0)
    for uid in alive:
        kind = kinds.get(uid)
        if kind in ("weights", "buffers"):
            cat = "weights"
        elif kind == "gradients":
            cat = "gradients"
        elif kind == "input" or uid in outputs:
            cat = "input/output"
        elif uid in grads:
            cat = "gradients"
        elif uid in optim:
            cat = "optimizer state"
        elif training and 0 <= born.get(uid, -1) < fwd_end and uid in survived_forward:
            cat = "activations"
        else:
            cat = "temporaries"
        out[cat] += size[uid]
    return out
