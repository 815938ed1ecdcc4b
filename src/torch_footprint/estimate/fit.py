"""Which accelerator runs this workload: memory per rank, largest batch, predicted speed, the pick.

Multi-GPU memory per rank (N ranks, data parallel, batch per rank unchanged). With W the
parameters, G their gradients and O the optimizer state of the whole model, the model
states each rank holds are (ZeRO, Rajbhandari et al. 2020, figure 1; FSDP's FULL_SHARD
is ZeRO-3, SHARD_GRAD_OP is ZeRO-2):

    ddp     W + G + O  (+ G again: DDP copies gradients into its buckets unless
                        gradient_as_bucket_view=True)
    zero1   W + G + O/N
    zero2   W + G/N + O/N
    zero3   (W + G + O)/N  + the gathered parameters of two wrapped units (the one
    fsdp                     running and the one prefetched)

Low-precision copies of the weights (autocast's cached casts in mixed precision) are
sharded like the weights under ZeRO-3/FSDP, which gathers each unit in that precision.

The per-rank peak replays the trace with every parameter, gradient and optimizer-state
storage scaled by its factor, so activations and temporaries stay where they were.
Communication time is not modelled: throughput with N ranks is N x one rank's.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

from ..analysis.memory import MemoryPeak, replay
from ..errors import FootprintError
from ..hardware.db import Accelerator
from ..trace.records import Trace
from .memory import fit_batches, overheads_for
from .roofline import Prediction

STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp")
_FACTORS = {  # (weights, gradients, optimizer state) held by one of N ranks, as powers of 1/N
    "ddp": (0, 0, 0), "zero1": (0, 0, 1), "zero2": (0, 1, 1), "zero3": (1, 1, 1), "fsdp": (1, 1, 1),
}


def shard_factors(strategy: str, n: int) -> dict[str, float]:
    """Fraction of weights, gradients and optimizer state one rank holds."""
    if strategy not in _FACTORS:
        raise FootprintError(f"unknown strategy '{strategy}': use {', '.join(STRATEGIES)}")
    if n < 1:
        raise FootprintError(f"--gpus must be at least 1, got {n}")
    w, g, o = _FACTORS[strategy]
    return {"weights": n ** -w, "gradients": n ** -g, "optimizer state": n ** -o}


def wrap_units(trace: Trace) -> dict[str, int]:
    """Parameter bytes of the units FSDP would wrap: the items of the deepest repeated
    container (ModuleList/Sequential: a model's blocks), else the model's top-level children."""
    subtree: dict[str, int] = {}
    for m in trace.modules:
        parts = m.path.split(".") if m.path else []
        for i in range(len(parts) + 1):
            key = ".".join(parts[:i])
            subtree[key] = subtree.get(key, 0) + m.param_bytes
    containers = [m for m in trace.modules if m.type in ("ModuleList", "Sequential") and m.path]
    units: dict[str, int] = {}
    if containers:
        deepest = max(c.depth for c in containers)
        for c in containers:
            if c.depth == deepest or not units:
                pre = c.path + "."
                for m in trace.modules:
                    if m.path.startswith(pre) and "." not in m.path[len(pre):]:
                        units[m.path] = subtree.get(m.path, 0)
    if not units:
        units = {m.path: subtree.get(m.path, 0) for m in trace.modules if m.path and "." not in m.path}
    return units


def gather_bytes(trace: Trace) -> int:
    """What ZeRO-3/FSDP gathers at once: the parameters of the two largest wrapped units."""
    return sum(sorted(wrap_units(trace).values(), reverse=True)[:2])


@dataclass
class ModelStates:
    """What one rank keeps between steps (bytes)."""

    weights: int
    gradients: int
    optimizer: int
    buffers: int
    extra: int  # DDP's bucket copy of the gradients, or FSDP/ZeRO-3's gathered units
    extra_what: str = ""

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.buffers + self.extra


def model_states(persistent: dict[str, int], strategy: str, n: int, gather_bytes: int = 0,
                 bucket_view: bool = False) -> ModelStates:
    """The per-rank model states of the module docstring's table, from whole-model totals."""
    f = shard_factors(strategy, n)
    w, g, o = persistent.get("weights", 0), persistent.get("gradients", 0), persistent.get("optimizer state", 0)
    extra, what = 0, ""
    if strategy == "ddp" and n > 1 and not bucket_view and g:
        extra, what = g, "DDP gradient buckets"
    elif strategy in ("zero3", "fsdp") and n > 1:
        extra, what = gather_bytes, "gathered parameters of two wrapped units"
    return ModelStates(weights=math.ceil(w * f["weights"]), gradients=math.ceil(g * f["gradients"]),
                       optimizer=math.ceil(o * f["optimizer state"]), buffers=persistent.get("buffers", 0),
                       extra=extra, extra_what=what)


def rank_peak(trace: Trace, strategy: str = "ddp", n: int = 1, bucket_view: bool = False) -> MemoryPeak:
    """Peak memory of one rank: the trace replayed with sharded storages (module docstring).
    The result keeps ``highs`` (live bytes at every op) for :func:`largest_batch`."""
    if n == 1:
        return replay(trace, keep_timeline=True)
    f = shard_factors(strategy, n)
    scale: dict[int, float] = {}
    for uid, _, kind in trace.preexisting:
        if kind == "weights":
            scale[uid] = f["weights"]
        elif kind == "gradients":
            scale[uid] = f["gradients"]
    for uid in trace.tags.get("gradients", []):
        scale[uid] = f["gradients"]
    for uid in trace.tags.get("optimizer", []):
        scale[uid] = f["optimizer state"]
    for uid in trace.tags.get("parameter casts", []):  # low-precision copies of weights follow the weights
        scale[uid] = f["weights"]
    extra = 0
    training = bool(trace.settings.get("backward"))
    if strategy == "ddp" and training and not bucket_view:
        extra = sum(p.nbytes for p in trace.params if p.trainable)
    elif strategy in ("zero3", "fsdp"):
        extra = gather_bytes(trace)
    return replay(trace, keep_timeline=True, scale={k: v for k, v in scale.items() if v != 1.0}, extra=extra)


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


def largest_batch(p: int, q: int, peak_p: MemoryPeak, peak_q: MemoryPeak, room: float) -> int | None:
    """Largest batch whose peak fits in ``room`` bytes, from two aligned traces: the live
    bytes at every operator are affine in the batch, so the peak (their maximum) is known
    at any batch. None when no operator's memory grows with the batch."""
    hp, hq = peak_p.highs, peak_q.highs
    best: float = math.inf
    for a, b in zip(hp, hq, strict=True):
        slope = (b - a) / (q - p)
        if slope > 0:
            best = min(best, p + (room - a) / slope)
    if best == math.inf:
        return None
    return max(0, math.floor(best))


def peak_at(p: int, q: int, peak_p: MemoryPeak, peak_q: MemoryPeak, batch: int) -> float:
    """The peak at ``batch`` from two aligned traces (see :func:`largest_batch`)."""
    return max(a + (b - a) * (batch - p) / (q - p) for a, b in zip(peak_p.highs, peak_q.highs, strict=True))


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
class FitRow:
    """One accelerator's answer."""

    accelerator: Accelerator
    capacity: int
    need: int  # provisioned bytes per rank at the batch asked (peak + overheads, / utilisation)
    fits: bool
    largest_batch: int | None
    prediction: Prediction | None
    throughput: float | None  # samples/s over all ranks at the largest batch
    throughput_batch: int | None
    meets_target: bool | None = None
    reason: str = ""

    @property
    def latency_s(self) -> float | None:
        return self.prediction.time_s if self.prediction else None

    def to_dict(self) -> dict[str, Any]:
        p = self.prediction
        return {"accelerator": self.accelerator.id, "name": self.accelerator.name, "capacity_bytes": self.capacity,
                "need_bytes": self.need, "fits": self.fits, "largest_batch": self.largest_batch,
                "latency_s": self.latency_s, "lower_bound_s": p.lower_bound_s if p else None,
                "bound": p.bound if p else None, "ceilings": p.ceilings.source if p else None,
                "throughput_samples_per_s": self.throughput, "throughput_batch": self.throughput_batch,
                "meets_target": self.meets_target, "reason": self.reason, "tdp_w": self.accelerator.tdp_w}


@dataclass
class FitResult:
    rows: list[FitRow]
    pick: str | None
    why: str
    batch: int
    gpus: int
    strategy: str
    settings: dict[str, Any]
    states: ModelStates | None = None
    peak: MemoryPeak | None = None
    notes: list[str] = field(default_factory=list)
    target_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"pick": self.pick, "why": self.why, "batch_per_rank": self.batch, "gpus": self.gpus,
                "strategy": self.strategy, "settings": self.settings, "target_latency_s": self.target_s,
                "model_states_per_rank": self.states.__dict__ if self.states else None,
                "peak_per_rank": self.peak.to_dict() if self.peak else None,
                "rows": [r.to_dict() for r in self.rows], "notes": self.notes}


def rank(rows: list[FitRow], target_s: float | None) -> tuple[str | None, str]:
    """The pick: with a latency target, the smallest accelerator (least power, then least
    memory) that fits and meets it; without one, the fastest that fits."""
    fitting = [r for r in rows if r.fits and r.latency_s is not None]
    if not fitting:
        return None, "no accelerator fits: " + _closest_miss(rows)
    if target_s is not None:
        ok = [r for r in fitting if r.latency_s is not None and r.latency_s <= target_s]
        if not ok:
            best = min(fitting, key=lambda r: r.latency_s or math.inf)
            return None, (f"none meets {target_s * 1e3:.3g} ms: the fastest that fits is {best.accelerator.id} at "
                          f"{(best.latency_s or 0) * 1e3:.3g} ms (predicted)")
        best = min(ok, key=lambda r: (r.accelerator.tdp_w or math.inf, r.accelerator.memory_gb))
        return best.accelerator.id, (f"the lowest-power accelerator that fits and meets {target_s * 1e3:.3g} ms "
                                     f"({(best.latency_s or 0) * 1e3:.3g} ms predicted)")
    best = min(fitting, key=lambda r: r.latency_s or math.inf)
    return best.accelerator.id, "the fastest predicted latency among those that fit"


def _closest_miss(rows: list[FitRow]) -> str:
    if not rows:
        return "none was considered"
    big = max(rows, key=lambda r: r.capacity)
    return (f"the largest, {big.accelerator.id} ({big.capacity / 2**30:.0f} GiB), has less than the "
            f"{big.need / 2**30:.1f} GiB needed per rank")


def affine_largest(batches: list[int], peaks: list[int], room: float) -> int | None:
    """Largest batch whose peak (affine in the batch, fitted) fits in ``room`` bytes."""
    f = fit_batches(batches, peaks)
    if f.per_sample <= 0:
        return None
    b = math.floor((room - f.fixed) / f.per_sample)
    return b if b >= 1 else 0


def fixed_overheads(acc: Accelerator, n_allocations: int) -> dict[str, int]:
    return overheads_for("cuda" if acc.kind == "gpu" else "cpu", n_allocations, 512 if acc.kind == "gpu" else 0)
