"""Memory and work as functions of the batch size, from traces at a few batch sizes.

Two traces whose operators line up (the same operators in the same order: batch sizes aside)
give every operator's live bytes, FLOPs and bytes moved as lines in the batch, so the peak
(their maximum) and the cost of a step are known at any batch. Where no two traces line up
(a model that squeezes a batch of one, or branches on the batch), a line through the peaks.
``memory``'s batch scaling and its largest batch, and ``fit``'s largest batch and throughput,
all read :class:`Scaling`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..analysis.memory import MemoryPeak
from ..trace import Trace


def aligned(a: Trace, b: Trace) -> bool:
    """Whether two traces ran the same operators in the same order (batch sizes aside)."""
    return len(a.events) == len(b.events) and all(x.op == y.op for x, y in zip(a.events, b.events, strict=True))


def aligned_pair(traces: dict[int, Trace]) -> tuple[int, int] | None:
    """Two batch sizes whose traces line up operator by operator (batch 1 often differs:
    models squeeze or expand a batch of one), preferring the smallest."""
    bs = sorted(traces)
    for i, p in enumerate(bs):
        for q in bs[i + 1:]:
            if aligned(traces[p], traces[q]):
                return p, q
    return None


def extrapolate(a: Trace, b: Trace, batch_a: int, batch_b: int, batch: int) -> Trace | None:
    """The trace at ``batch`` from traces at two batch sizes, every operator's FLOPs, MACs
    and bytes linear in the batch; None when the two runs did not execute the same operators."""
    if len(a.events) != len(b.events) or batch_a == batch_b:
        return None
    t = (batch - batch_a) / (batch_b - batch_a)
    out = copy.copy(a)
    events = []
    for ea, eb in zip(a.events, b.events, strict=True):
        if ea.op != eb.op:
            return None
        e = copy.copy(ea)
        e.flops = max(0, round(ea.flops + t * (eb.flops - ea.flops)))
        e.macs = max(0, round(ea.macs + t * (eb.macs - ea.macs)))
        e.bytes_read = max(0, round(ea.bytes_read + t * (eb.bytes_read - ea.bytes_read)))
        e.bytes_written = max(0, round(ea.bytes_written + t * (eb.bytes_written - ea.bytes_written)))
        e.out_shapes = [list(s) for s in ea.out_shapes]
        for sa, sb, s in zip(ea.out_shapes, eb.out_shapes, e.out_shapes, strict=False):
            if sa and sb and sa[0] == batch_a and sb[0] == batch_b:
                s[0] = batch
        events.append(e)
    out.events = events
    return out


@dataclass
class Piece:
    """One line of the peak: fixed + per_sample x batch from batch ``start`` on (until the next
    piece), reached in ``phase``."""

    start: int
    fixed: float
    per_sample: float
    phase: str


@dataclass
class BatchScaling:
    """peak(batch) = fixed + per_sample x batch, fitted from traces at two batch sizes.

    ``pieces``: where the traces line up operator by operator, the peak exactly: every
    operator's live bytes are affine in the batch, so the peak is the largest of those
    lines, one line over each range of batches (a training step's peak can sit in the
    optimizer step at small batches and in the backward at large ones)."""

    batches: list[int]
    peaks: list[int]
    fixed: float
    per_sample: float
    affine: bool  # a third trace landed on the line (within 1%)
    max_batch: int | None = None
    max_batch_checked: bool = False
    pieces: list[Piece] = field(default_factory=list)

    def peak_at(self, batch: int) -> float:
        return self.fixed + self.per_sample * batch


def scaling_line(batches: list[int], peaks: list[int]) -> BatchScaling:
    """The line through the first two (batch, peak) points, checked against a third."""
    (b1, b2), (p1, p2) = batches[:2], peaks[:2]
    per = (p2 - p1) / (b2 - b1)
    fixed = p1 - per * b1
    affine = True
    if len(batches) > 2:
        expected = fixed + per * batches[2]
        affine = abs(peaks[2] - expected) <= 0.01 * max(peaks[2], 1)
    return BatchScaling(batches=batches, peaks=peaks, fixed=fixed, per_sample=per, affine=affine)


def envelope(p: int, q: int, highs_p: Sequence[int], highs_q: Sequence[int], phases: Sequence[str],
             start: int = 1) -> list[Piece]:
    """The peak over batches from ``start`` on as pieces of lines, from two traces (at batches
    ``p`` and ``q``) that line up: ``highs`` are the live bytes at each operator's high point,
    ``phases`` the phase of each. The upper envelope of one line per operator."""
    lines = {}
    for a, b, phase in zip(highs_p, highs_q, phases, strict=True):
        slope = (b - a) / (q - p)
        key = (a - slope * p, slope)
        lines.setdefault(key, phase)
    if not lines:
        return []

    def value(line: tuple[float, float], x: float) -> float:
        return line[0] + line[1] * x

    x: float = start
    cur = max(lines, key=lambda ln: (value(ln, x), ln[1]))
    pieces = [Piece(start, cur[0], cur[1], lines[cur])]
    while True:
        # the next line to overtake: the first crossing after x among steeper lines
        best: tuple[float, float, float] | None = None
        for ln in lines:
            if ln[1] > cur[1]:
                cross = (cur[0] - ln[0]) / (ln[1] - cur[1])
                if cross >= x and (best is None or (cross, -ln[1]) < (best[0], -best[2])):
                    best = (cross, ln[0], ln[1])
        if best is None:
            return pieces
        x, cur = best[0], (best[1], best[2])
        first = math.floor(x) + 1  # the first whole batch where the new line is above
        if first <= pieces[-1].start:
            pieces[-1] = Piece(pieces[-1].start, cur[0], cur[1], lines[cur])
        else:
            pieces.append(Piece(first, cur[0], cur[1], lines[cur]))


@dataclass
class Scaling:
    """The peak at any batch, from peaks traced at several batch sizes: exact per operator
    where two of the traces line up (``pair``), else a line through the peaks."""

    peaks: dict[int, MemoryPeak]
    pair: tuple[int, int] | None

    @classmethod
    def of(cls, traces: dict[int, Trace], peaks: dict[int, MemoryPeak]) -> Scaling:
        return cls(peaks, aligned_pair(traces))

    def peak_at(self, batch: int) -> float:
        """The peak at ``batch``: the largest of the operators' lines there."""
        if self.pair is None:
            line = scaling_line(list(self.peaks), [x.peak_bytes for x in self.peaks.values()])
            return line.peak_at(batch)
        p, q = self.pair
        hp, hq = self.peaks[p].highs, self.peaks[q].highs
        return max(a + (b - a) * (batch - p) / (q - p) for a, b in zip(hp, hq, strict=True))

    def largest(self, room: float) -> int | None:
        """The largest batch whose peak fits in ``room`` bytes (0: not even one); None when
        no operator's memory grows with the batch."""
        if self.pair is None:
            line = scaling_line(list(self.peaks), [x.peak_bytes for x in self.peaks.values()])
            if line.per_sample <= 0:
                return None
            b = math.floor((room - line.fixed) / line.per_sample)
            return b if b >= 1 else 0
        p, q = self.pair
        best: float = math.inf
        for a, b in zip(self.peaks[p].highs, self.peaks[q].highs, strict=True):
            slope = (b - a) / (q - p)
            if slope > 0:
                best = min(best, p + (room - a) / slope)
        return None if best == math.inf else max(0, math.floor(best))
