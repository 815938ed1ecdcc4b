"""One traced micro-batch priced under many layouts, without tracing it again.

What a training layout reads from the trace of one rank's micro-batch:

* the operators' times on an accelerator (the roofline over each operator's FLOPs and bytes):
  the same for every layout priced from the trace, worked out once per accelerator and FP8
  recipe;
* one rank's memory under a data-parallel sharding (the trace's storages replayed with the
  model states scaled to the rank's share, FSDP's gathered units added): once per sharding
  and group size;
* the pipeline ranks' shares (each layer's parameters, saved activations and operator times,
  :mod:`.layouts.pipeline`) and the collectives (the parameters' and boundary activations'
  bytes, :mod:`.layouts.comm`): per split, from the same figures.

What changes the trace itself (the micro-batch, the sequence, checkpointing, whether gradients
exist before the forward, the tensor-parallel split) is :func:`.workload.trace_key`: layouts
that share a key share one trace. :func:`price_layout` gives what ``fit`` gives for a layout at
the batch it was asked for (the same functions, in the same order)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..analysis.memory import MemoryPeak, replay
from ..errors import FootprintError
from ..hardware import Accelerator
from ..hardware.networks import Network
from ..settings import Parallel, Target, Training
from ..trace import Trace
from .allocator import communicators, cuda_extras, models_extras
from .kernels.roofline import Prediction, estimate_latency
from .layouts.comm import StepTime
from .layouts.cp_ep import layout_memory, layout_states, without_experts
from .layouts.schedule import layout_step, schedule_peak
from .layouts.sharding import (
    ModelStates,
    gather_bytes,
    gradient_buffer,
    model_states,
    pipeline_gathered,
    state_scales,
    step_peak,
)
from .memory import allocation_count


def fixed_overheads(acc: Accelerator, n_allocations: int, backward: bool = False, groups: int = 0) -> dict[str, int]:
    """What ``acc`` holds beyond the traced tensors (:mod:`.allocator`), ``groups`` NCCL communicators."""
    return cuda_extras(acc, n_allocations, backward, groups)


def layout_extras(acc: Accelerator, n_allocations: int, backward: bool, p: Parallel) -> dict[str, int]:
    """:func:`fixed_overheads` of one rank of layout ``p``: a communicator per parallel dimension."""
    dp = p.data
    groups = communicators(dp, p.tensor, p.pp, p.cp, p.ep, dp * p.cp // p.state_shards) if p.gpus > 1 else 0
    return fixed_overheads(acc, n_allocations, backward, groups)


def needed(acc: Accelerator, held: int, utilisation: float) -> int:
    """The bytes a rank needs for ``held`` (the peak and the extras): on an NVIDIA GPU, whose
    extras are modelled, the whole memory is the budget; elsewhere ``utilisation`` of it."""
    return math.ceil(held / (1.0 if models_extras(acc) else utilisation))


def rank_states(trace: Trace, peak: MemoryPeak, p: Parallel,
                persistent: Callable[[], dict[str, int]]) -> tuple[ModelStates, ModelStates]:
    """The whole model's states under ``p``'s sharding and one rank's share of them (the experts of
    other expert-parallel ranks taken out); ``persistent()`` the unsharded replay's states, read
    only where ``peak`` (a sharded replay's, or master weights in another dtype) does not have them."""
    shard, scale = p.state_shards, state_scales(trace)
    kept = peak.persistent if shard == 1 and set(scale.values()) == {1.0} else persistent()
    whole = model_states(kept, p.sharding, shard, gather_bytes(trace, p.sharding),
                         gradient_buffer(trace, p.bucket_view), scale)
    return whole, layout_states(trace, whole, p.sharding)


@dataclass
class LayoutPrice:
    """One layout on one accelerator: memory per rank, whether it fits, the step's time."""

    accelerator: Accelerator
    layout: Parallel
    need: int  # provisioned bytes per rank: (peak + fixed overheads) / utilisation
    capacity: int
    peak: MemoryPeak
    states: ModelStates | None
    prediction: Prediction
    step: StepTime | None
    stages: list[dict[str, Any]] = field(default_factory=list)  # pipeline ranks' memory (schedule_peak)

    @property
    def fits(self) -> bool:
        return self.need <= self.capacity

    @property
    def time_s(self) -> float:
        """One optimizer step (with its micro-batches, pipeline and communication)."""
        return self.step.time_s if self.step is not None else self.prediction.time_s


class TracedStep:
    """A trace and what every layout priced from it shares, each worked out once."""

    def __init__(self, trace: Trace, notes: list[str], training: Training) -> None:
        self.trace, self.notes, self.training = trace, notes, training
        self.allocations = allocation_count(trace)
        self._predictions: dict[tuple[Any, ...], Prediction] = {}
        self._peaks: dict[tuple[str, int, bool], MemoryPeak] = {}
        self._persistent: dict[str, int] | None = None

    def prediction(self, acc: Accelerator, target: Target, fp8: str | None, micro_batches: int = 1) -> Prediction:
        steps = micro_batches if fp8 else 1  # (only FP8's weight casts are once a step)
        key = (acc.id, fp8, target.tf32, target.efficiency, steps)
        if key not in self._predictions:
            self._predictions[key] = estimate_latency(self.trace, acc, tf32=target.tf32_flag,
                                                      efficiency=target.efficiencies, fp8=fp8, micro_batches=steps)
        return self._predictions[key]

    def peak(self, strategy: str, shard: int, bucket_view: bool) -> MemoryPeak:
        key = (strategy, shard, bucket_view)
        if key not in self._peaks:
            self._peaks[key] = step_peak(self.trace, strategy, shard, bucket_view)
        return self._peaks[key]

    def persistent(self) -> dict[str, int]:
        """The whole model's states (one rank's replay, unsharded)."""
        if self._persistent is None:
            self._persistent = replay(self.trace).persistent
        return self._persistent


def price_layout(traced: TracedStep, acc: Accelerator, p: Parallel, target: Target = Target(),
                 network: Network | None = None) -> LayoutPrice:
    """Layout ``p`` on ``acc`` from ``traced`` (one rank's micro-batch under ``p``'s trace key):
    the figures ``fit`` gives for it at that batch."""
    trace, t = traced.trace, traced.training
    peak = layout_memory(trace, traced.peak(p.sharding, p.state_shards, p.bucket_view), p.sharding)
    whole, states = rank_states(trace, peak, p, traced.persistent) if t.train else (None, None)
    stages: list[dict[str, Any]] = []
    if p.pp > 1:
        staged, stages = schedule_peak(trace, peak, whole.total if whole else 0, pp=p.pp, vpp=p.vpp,
                                       microbatches=p.per_schedule, schedule=p.schedule,
                                       framework=p.framework, kept=pipeline_gathered(trace, p.sharding))
        peak = without_experts(staged, stages, whole.total if whole else 0, states.total if states else 0)
    fixed = sum(layout_extras(acc, traced.allocations, t.train, p).values())
    need = needed(acc, peak.peak_bytes + fixed, target.utilisation)
    pred = traced.prediction(acc, target, p.fp8, p.grad_accum)
    step = None
    if t.train and (p.gpus > 1 or p.grad_accum > 1):
        step = layout_step(trace, acc, pred, p, network)
        if step is None:
            raise FootprintError(f"no interconnect figure for {acc.id}: add link_gbs to its row, or run "
                                 "`footprint calibrate --nproc N` on this machine")
    return LayoutPrice(acc, p, need, acc.memory_bytes, peak, states, pred, step, stages)
