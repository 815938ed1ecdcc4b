"""The memory timeline of a trace: live bytes at every operator, by torch.profiler's categories.

The categories are the ones torch.profiler's memory timeline draws (``torch.profiler.
_memory_profiler.Category``), so the plot reads like the one users know:

* parameter: the model's parameters and buffers;
* optimizer state: what the optimizer keeps per parameter (momentum, Adam's moments);
* input: the model's inputs;
* activation: tensors made in the forward that are still alive when it ends (saved for the
  backward), and the model's outputs;
* gradient: the parameters' ``.grad`` tensors;
* autograd detail: other tensors made in the backward (gradients of activations);
* temporary: everything else (intermediate results, the optimizer's scratch, and the
  scratch an operator allocates and frees inside itself).

Each point is an operator's high point (its outputs and scratch allocated, nothing freed
yet): the largest point is the peak that :func:`~torch_footprint.analysis.memory.replay`
reports. A long trace is downsampled for plotting by :func:`downsample`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..trace.records import Trace

CATEGORIES = ("parameter", "optimizer state", "input", "activation", "gradient", "autograd detail", "temporary")
MAX_POINTS = 4000


@dataclass
class Timeline:
    """Live bytes by category after each operator (``index``: event indices; -1 = before any op)."""

    index: list[int]
    series: dict[str, list[int]]
    phases: list[tuple[str, int, int]]  # (phase, first event, last event), in order
    events: int
    method: str = "every operator"

    @property
    def totals(self) -> list[int]:
        return [sum(col) for col in zip(*self.series.values())] if self.series else []

    @property
    def peak(self) -> tuple[int, int]:
        """(event index, bytes) of the highest point."""
        t = self.totals
        i = max(range(len(t)), key=t.__getitem__)
        return self.index[i], t[i]

    def to_dict(self) -> dict[str, Any]:
        at, peak = self.peak
        return {"categories": list(CATEGORIES), "index": self.index, "series": self.series,
                "phases": [list(p) for p in self.phases], "events": self.events, "peak_event": at,
                "peak_bytes": peak, "method": self.method}


def _category(trace: Trace) -> dict[int, str]:
    """The category of every storage of the trace."""
    cat: dict[int, str] = {}
    for uid, _, kind in trace.preexisting:
        cat[uid] = {"weights": "parameter", "buffers": "parameter", "gradients": "gradient",
                    "input": "input"}.get(kind, "temporary")
    training = bool(trace.settings.get("backward"))
    freed_at = {f.storage: f.after for f in trace.frees}
    fwd_end = next((i for i, e in enumerate(trace.events) if e.phase != "forward"), len(trace.events))
    for e in trace.events:
        for uid, _ in e.allocs:
            if e.phase == "forward":
                survives = freed_at.get(uid, len(trace.events)) >= fwd_end
                cat[uid] = "activation" if training and survives else "temporary"
            elif e.phase == "backward":
                cat[uid] = "autograd detail"
            else:
                cat[uid] = "temporary"
    for uid in trace.tags.get("output", []):
        if cat.get(uid) != "input":
            cat[uid] = "activation"
    for uid in trace.tags.get("gradients", []):
        cat[uid] = "gradient"
    for uid in trace.tags.get("optimizer", []):
        cat[uid] = "optimizer state"
    return cat


def phase_spans(trace: Trace) -> list[tuple[str, int, int]]:
    """Runs of consecutive events of one phase: (phase, first index, last index)."""
    spans: list[tuple[str, int, int]] = []
    for i, e in enumerate(trace.events):
        if spans and spans[-1][0] == e.phase:
            spans[-1] = (e.phase, spans[-1][1], i)
        else:
            spans.append((e.phase, i, i))
    return spans


def memory_timeline(trace: Trace) -> Timeline:
    """Live bytes by category before the first operator and at every operator's high point."""
    cat = _category(trace)
    live = dict.fromkeys(CATEGORIES, 0)
    size: dict[int, int] = {}
    for uid, nbytes, _ in trace.preexisting:
        size[uid] = nbytes
        live[cat[uid]] += nbytes
    frees: dict[int, list[int]] = {}
    for f in trace.frees:
        frees.setdefault(f.after, []).append(f.storage)
    alive = set(size)

    def free(after: int) -> None:
        for uid in frees.get(after, []):
            if uid in alive:
                alive.discard(uid)
                live[cat[uid]] -= size[uid]

    free(-1)
    series: dict[str, list[int]] = {c: [live[c]] for c in CATEGORIES}
    index = [-1]
    for i, e in enumerate(trace.events):
        for uid, nbytes in e.allocs:
            size[uid] = nbytes
            alive.add(uid)
            live[cat[uid]] += nbytes
        for c in CATEGORIES:
            series[c].append(live[c] + (e.scratch if c == "temporary" else 0))
        index.append(i)
        free(i)
    return Timeline(index=index, series=series, phases=phase_spans(trace), events=len(trace.events))


def downsample(tl: Timeline, max_points: int = MAX_POINTS) -> Timeline:
    """At most about ``max_points`` points, keeping the first and last points and, in each of
    ``max_points / 2`` equal runs of operators, the highest and lowest total: every local
    maximum wider than a run survives, and the peak always does."""
    n = len(tl.index)
    if n <= max_points:
        return tl
    totals = tl.totals
    buckets = max(1, max_points // 2)
    keep = {0, n - 1}
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        if lo >= hi:
            continue
        run = range(lo, hi)
        keep.add(max(run, key=totals.__getitem__))
        keep.add(min(run, key=totals.__getitem__))
    kept = sorted(keep)
    return Timeline(index=[tl.index[i] for i in kept], series={c: [s[i] for i in kept] for c, s in tl.series.items()},
                    phases=tl.phases, events=tl.events,
                    method=f"{len(kept)} of {n} points: the highest and lowest of each of {buckets} equal runs")
