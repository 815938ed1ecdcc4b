"""Memory estimates: the traced peak plus fixed overheads, headroom, and batch scaling."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..analysis.memory import MemoryPeak, replay
from ..errors import FootprintError
from ..quantities import parse_bytes
from ..search import largest_true
from ..settings import Memory, Target, Training, Workload
from ..trace import Trace
from .batch import BatchScaling, Scaling, envelope, scaling_line
from .workload import at_batch, first_batch, precision_of, trace_step

# Fixed costs outside the trace, per device, each configurable.
#  - CUDA context: driver, kernels and runtime state loaded by the first CUDA call; a few
#    hundred MiB depending on the driver, GPU and libraries (measure yours:
#    torch.cuda.mem_get_info before and after torch.cuda.init()).
#  - cuBLAS workspace: see cublas_workspace_bytes (32 MiB on an H100, the default here).
#  - the caching allocator rounds every allocation up to a multiple of 512 bytes.


def cublas_workspace_bytes(capability: tuple[int, int] | None = (9, 0), config: str | None = None) -> int:
    """The workspace PyTorch gives cuBLAS, as its CublasHandlePool.cpp sizes it: through the
    caching allocator (so it counts in ``torch.cuda.memory_allocated``), on the first cuBLAS
    call of each (handle, stream), kept until ``torch._C._cuda_clearCublasWorkspaces()``.
    ``CUBLAS_WORKSPACE_CONFIG`` (``config``), ``:SIZE:COUNT`` pairs in KiB, sets it; without
    it ``:4096:8`` (32 MiB) on compute capability 9.0 (Hopper) and ``:4096:2:16:8`` (8320 KiB)
    elsewhere. cuBLASLt shares it (TORCH_CUBLASLT_UNIFIED_WORKSPACE is on by default)."""
    if config:
        pairs = re.findall(r":([0-9]+):([0-9]+)", config)
        if pairs:
            return sum(int(size) * 1024 * int(count) for size, count in pairs)
    return 4096 * 1024 * 8 if capability == (9, 0) else 4096 * 1024 * 2 + 16 * 1024 * 8


CUDA_OVERHEADS = {"cuda_context": 512 * 2**20, "cublas_workspace": cublas_workspace_bytes()}
ALLOCATOR_ROUNDING = {"cpu": 0, "cuda": 512}


@dataclass
class MemoryEstimate:
    """What ``footprint memory`` reports."""

    kind = "memory"  # the envelope's kind of its saved file

    peak: MemoryPeak
    settings: dict[str, Any]
    overheads: dict[str, int] = field(default_factory=dict)
    utilisation: float = 0.8
    notes: list[str] = field(default_factory=list)
    scaling: BatchScaling | None = None
    budget: int | None = None
    # a training step with optimizer state: the second and later steps, with that state
    # allocated before the step (``peak`` is the first step, which allocates it in its optimizer phase)
    steady: MemoryPeak | None = None

    @property
    def larger(self) -> MemoryPeak:
        """The larger of the first step's peak and the steady-state step's: what a run needs."""
        return self.steady if self.steady is not None and self.steady.peak_bytes > self.peak.peak_bytes \
            else self.peak

    @property
    def total(self) -> int:
        """The larger peak of the tensors (first or steady-state step) plus the fixed overheads."""
        return self.larger.peak_bytes + sum(self.overheads.values())

    @property
    def provision(self) -> int:
        """What to provision: the total divided by the utilisation (the seed's /0.8)."""
        return math.ceil(self.total / self.utilisation)

    def __repr__(self) -> str:  # the attributes named are the ones to read (total: the figure the CLI prints)
        steady = f", steady.peak_bytes={self.steady.peak_bytes}" if self.steady is not None else ""
        return (f"MemoryEstimate(model={self.settings.get('model')!r}, total={self.total}, provision={self.provision}, "
                f"peak.peak_bytes={self.peak.peak_bytes}, peak.phase={self.peak.phase!r}{steady})")

    def to_dict(self) -> dict[str, Any]:
        d = {"peak": self.peak.to_dict(), "settings": self.settings, "overheads": self.overheads,
             "total_bytes": self.total, "utilisation": self.utilisation, "provision_bytes": self.provision,
             "notes": self.notes, "budget": self.budget}
        if self.scaling is not None:
            d["batch_fit"] = asdict(self.scaling)
        if self.steady is not None:
            d["steady_peak"] = self.steady.to_dict()
            d["larger"] = "steady" if self.larger is self.steady else "first"
        return d


def overheads_for(device: str, n_allocations: int, rounding_bytes: int, backward: bool = False) -> dict[str, int]:
    """Memory a step on ``device`` holds beyond its tensors. On CUDA: the context, cuBLAS's
    workspace, a second one where the step has a backward (cuBLAS handles are per thread,
    torch's DeviceThreadHandlePool, and workspaces per handle and stream, CublasHandlePool.cpp;
    autograd runs a CUDA backward on its own device thread: measured on an H100, a training
    step's peak holds two 32 MiB workspaces, benchmarks/results/memory-cuda-h100.txt), and
    the allocator's rounding."""
    if device == "cuda":
        out = dict(CUDA_OVERHEADS)
        if backward:
            out["cublas_workspace (backward thread)"] = CUDA_OVERHEADS["cublas_workspace"]
        out["allocator_rounding (upper bound)"] = n_allocations * (rounding_bytes - 1) if rounding_bytes else 0
        return out
    return {}


def estimate_memory(w: Workload, t: Training = Training(), target: Target = Target(),
                    mem: Memory = Memory()) -> MemoryEstimate:
    """The traced peak of ``t`` on ``w`` at its batch plus the fixed overheads of the target's
    device; with ``mem.scaling`` (or a ``mem.max_batch`` budget) the line through traces at 1x,
    2x and 3x the batch; with a budget the largest batch whose provisioned memory fits it,
    checked by tracing."""
    device = target.device or "cpu"
    if device not in ("cpu", "cuda"):
        raise FootprintError(f"unknown device '{device}': use cpu or cuda")
    utilisation = target.utilisation

    def at(b: int | None, timeline: bool = False) -> tuple[MemoryPeak, MemoryPeak | None, Trace, list[str]]:
        """The first step's peak, the steady-state step's (with optimizer state), the trace and its notes."""
        tr, nt = trace_step(at_batch(w, b), t)
        steady = replay(tr, keep_timeline=timeline, steady=True) if tr.tags.get("optimizer") else None
        return replay(tr, keep_timeline=timeline), steady, tr, nt

    def larger(b: int) -> int:
        first, steady, _, _ = at(b)
        return max(first.peak_bytes, steady.peak_bytes if steady is not None else 0)

    peak, steady, trace, notes = at(w.batch, timeline=True)
    est = memory_of(trace, precision_of(w), t.checkpointing, notes, peak=peak, steady=steady, device=device,
                    utilisation=utilisation, overheads=mem.overheads)
    fixed_costs = sum(est.overheads.values())
    budget_b = None
    if mem.max_batch is not None:
        budget_b = parse_bytes(mem.max_batch)
        if budget_b <= 0:
            raise FootprintError(f"a memory budget must be positive, got {mem.max_batch}")
        est.budget = budget_b
        weights_b = peak.persistent.get("weights", 0) + peak.persistent.get("buffers", 0)
        if (weights_b + fixed_costs) / utilisation > budget_b:
            raise FootprintError(
                f"a budget of {budget_b / 2**30:.2f} GiB cannot hold this model: its weights alone take "
                f"{weights_b / 2**30:.2f} GiB (plus {fixed_costs / 2**30:.2f} GiB of fixed overheads, at "
                f"{utilisation:.0%} utilisation)"
            )
    if budget_b is None and not mem.scaling:
        return est
    b1 = first_batch(trace, w.batch)
    steady_kind = est.steady is not None and est.larger is est.steady

    def same_step(b: int) -> tuple[MemoryPeak, Trace]:
        """The peak at ``b`` of the step (first or steady-state) that is the larger at the batch."""
        f, s, tr, _ = at(b, timeline=True)
        return (s if steady_kind and s is not None else f), tr

    runs = {b1: (est.larger, trace), **{k * b1: same_step(k * b1) for k in (2, 3)}}
    traced = {b: r[0].peak_bytes for b, r in runs.items()}
    line = est.scaling = scaling_line(list(traced), list(traced.values()))
    scaling = Scaling.of({b: r[1] for b, r in runs.items()}, {b: r[0] for b, r in runs.items()})
    if scaling.pair is not None:
        (pp, tp), (pq, _) = runs[scaling.pair[0]], runs[scaling.pair[1]]
        phases = ["before the first operator", *(e.phase for e in tp.events)]
        line.pieces = envelope(scaling.pair[0], scaling.pair[1], pp.highs, pq.highs, phases)
        last = line.pieces[-1]
        line.fixed, line.per_sample = last.fixed, last.per_sample
    if budget_b is None:
        return est
    room = budget_b * utilisation - fixed_costs
    peaks = dict(traced)  # the line's traces are not run again

    def fits(b: int) -> bool:
        if b not in peaks:
            peaks[b] = larger(b)
        return peaks[b] <= room

    if not fits(1):
        need = peaks[1] + fixed_costs
        raise FootprintError(
            f"not even batch 1 fits a budget of {budget_b / 2**30:.2f} GiB: it needs "
            f"{need / 2**30:.2f} GiB, {need / utilisation / 2**30:.2f} GiB at {utilisation:.0%} utilisation"
        )
    # start from the scaling's answer, then bracket and bisect with real traces
    guess = scaling.largest(room)
    best = largest_true(fits, max(1, guess) if guess is not None else 2, known_ok=1, limit=2**25)
    if best >= 2**25:
        raise FootprintError("the peak does not grow with the batch size: no largest batch to find")
    line.max_batch, line.max_batch_checked = best, True
    return est


def memory_of(trace: Trace, precision: str, checkpointing: bool, notes: list[str], *, peak: MemoryPeak | None = None,
              steady: MemoryPeak | None = None, device: str = "cpu", utilisation: float = 0.8,
              overheads: Mapping[str, int | str] | None = None) -> MemoryEstimate:
    """The estimate of one traced step: its peak and, with optimizer state, the steady-state
    step's (both replayed here unless given) plus the fixed overheads of ``device``,
    ``overheads`` replacing or adding some by name."""
    if peak is None:
        peak = replay(trace, keep_timeline=True)
        steady = replay(trace, keep_timeline=True, steady=True) if trace.tags.get("optimizer") else None
    fixed = overheads_for(device, allocation_count(trace), ALLOCATOR_ROUNDING[device], has_backward(trace))
    for name, value in (overheads or {}).items():
        fixed[name] = parse_bytes(value)
    kept = {k: v for k, v in fixed.items() if v}
    settings = dict(trace.settings, precision=precision, checkpointing=checkpointing, target=device,
                    inputs=trace.inputs, model=trace.model)
    return MemoryEstimate(peak=peak, settings=settings, overheads=kept, utilisation=utilisation, notes=notes,
                          steady=steady)


def has_backward(trace: Trace) -> bool:
    """Whether the traced step runs a backward."""
    return any(e.phase == "backward" for e in trace.events)


def allocation_count(trace: Trace) -> int:
    """Storages the trace allocated, and those that existed before it (the allocator's calls)."""
    return sum(len(e.allocs) for e in trace.events) + len(trace.preexisting)
