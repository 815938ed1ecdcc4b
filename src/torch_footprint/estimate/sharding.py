"""Memory per rank when training is spread over N data-parallel ranks.

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
storage scaled by its factor, and the optimizer step's temporaries with the optimizer
state's (a rank steps over its shard only), so activations and the forward's and
backward's temporaries stay where they were.
Communication time is not modelled: throughput with N ranks is N x one rank's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..analysis.memory import MemoryPeak, replay
from ..errors import FootprintError
from ..trace import Trace

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


def rank_peak(trace: Trace, strategy: str = "ddp", n: int = 1, bucket_view: bool = False,
              steady: bool = False) -> MemoryPeak:
    """Peak memory of one rank: the trace replayed with sharded storages (module docstring);
    ``steady``: the steady-state step (optimizer state allocated before it; see :func:`replay`).
    The result keeps ``highs`` (live bytes at every op) for :func:`~.recommend.largest_fitting_batch`."""
    if n == 1:
        return replay(trace, keep_timeline=True, steady=steady)
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
    # each rank steps the optimizer over the state it holds: the step's temporaries (Adam's
    # denominator, a foreach step's per-tensor lists) are shards of the whole model's too
    for e in trace.events:
        if e.phase == "optimizer":
            for uid, _ in e.allocs:
                scale.setdefault(uid, f["optimizer state"])
    extra = 0
    training = bool(trace.settings.get("backward"))
    if strategy == "ddp" and training and not bucket_view:
        extra = sum(p.nbytes for p in trace.params if p.trainable)
    elif strategy in ("zero3", "fsdp"):
        extra = gather_bytes(trace)
    return replay(trace, keep_timeline=True, scale={k: v for k, v in scale.items() if v != 1.0}, extra=extra,
                  steady=steady)


def step_peak(trace: Trace, strategy: str = "ddp", n: int = 1, bucket_view: bool = False) -> MemoryPeak:
    """The larger of one rank's first-step peak and its steady-state peak: what a run needs."""
    first = rank_peak(trace, strategy, n, bucket_view)
    if not trace.tags.get("optimizer"):
        return first
    steady = rank_peak(trace, strategy, n, bucket_view, steady=True)
    return steady if steady.peak_bytes > first.peak_bytes else first
