"""Memory per rank when training is spread over N data-parallel ranks.

Multi-GPU memory per rank (N ranks, data parallel, batch per rank unchanged). With W the
parameters, G their gradients and O the optimizer state of the whole model, the model
states each rank holds are those of ZeRO (Rajbhandari et al. 2020, figure 1) as torch
implements the stages (what ``bench --nproc`` runs and measures):

    ddp     W + G + O  (+ G again: DDP copies gradients into its buckets unless
                        gradient_as_bucket_view=True)
    zero1   W + G + O/N  (+ G: torch's ZeroRedundancyOptimizer runs under DDP, buckets and all)
    zero2   (W + G + O)/N at rest; FSDP2 with reshard_after_forward=False keeps every
            unit's parameters gathered from the forward to the end of the backward: + W then
            (the paper's ZeRO-2 keeps W whole throughout; FSDP2 shards it between steps)
    zero3   (W + G + O)/N at rest; in the forward and backward + the parameters of two
    fsdp    wrapped units (the one running and the one prefetched) + the root module's own
            (embeddings, head: FSDP2 keeps the root gathered from forward to backward)

Low-precision copies of the weights (autocast's cached casts in mixed precision) are
sharded like the weights under ZeRO-3/FSDP, which gathers each unit in that precision.

The per-rank peak replays the trace with every parameter, gradient and optimizer-state
storage scaled by its factor, and the optimizer step's temporaries with the optimizer
state's (a rank steps over its shard only), so activations and the forward's and
backward's temporaries stay where they were, and the gathered parameters alive while the
forward and backward run. Communication time is :mod:`.comm`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..analysis.memory import MemoryPeak, replay
from ..errors import FootprintError
from ..parallel import fsdp_units
from ..trace import Trace

STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp")
_FACTORS = {  # (weights, gradients, optimizer state) held by one of N ranks, as powers of 1/N
    "ddp": (0, 0, 0), "zero1": (0, 0, 1), "zero2": (1, 1, 1), "zero3": (1, 1, 1), "fsdp": (1, 1, 1),
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
    """Parameter bytes of the units FSDP would wrap (:func:`~torch_footprint.parallel.fsdp_units`)."""
    return fsdp_units(trace.modules)


def root_bytes(trace: Trace) -> int:
    """Parameter bytes of the root module's own, outside every wrapped unit."""
    return max(0, sum(p.nbytes for p in trace.params) - sum(wrap_units(trace).values()))


def gather_bytes(trace: Trace, strategy: str = "zero3") -> int:
    """What FSDP2 holds gathered while the forward and backward run: the two largest wrapped
    units and the root's own parameters (zero3, fsdp), or all of them (zero2)."""
    if strategy == "zero2":
        return sum(p.nbytes for p in trace.params)
    return sum(sorted(wrap_units(trace).values(), reverse=True)[:2]) + root_bytes(trace)


@dataclass
class ModelStates:
    """What one rank keeps between steps (bytes)."""

    weights: int
    gradients: int
    optimizer: int
    buffers: int
    extra: int  # DDP's bucket copy of the gradients, or FSDP's gathered parameters
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
    if strategy in ("ddp", "zero1") and n > 1 and not bucket_view and g:
        extra, what = g, "DDP gradient buckets"
    elif strategy in ("zero2", "zero3", "fsdp") and n > 1:
        extra, what = gather_bytes, "parameters gathered in the forward and backward"
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
    extra, during = 0, {}
    training = bool(trace.settings.get("backward"))
    if strategy in ("ddp", "zero1") and training and not bucket_view:
        extra = sum(p.nbytes for p in trace.params if p.trainable)
    elif strategy in ("zero2", "zero3", "fsdp"):
        g = gather_bytes(trace, strategy)
        during = {"forward": g, "loss": g, "backward": g}
    return replay(trace, keep_timeline=True, scale={k: v for k, v in scale.items() if v != 1.0}, extra=extra,
                  extra_in=during, steady=steady)


def step_peak(trace: Trace, strategy: str = "ddp", n: int = 1, bucket_view: bool = False) -> MemoryPeak:
    """The larger of one rank's first-step peak and its steady-state peak: what a run needs."""
    first = rank_peak(trace, strategy, n, bucket_view)
    if not trace.tags.get("optimizer"):
        return first
    steady = rank_peak(trace, strategy, n, bucket_view, steady=True)
    return steady if steady.peak_bytes > first.peak_bytes else first
