"""One rank's share of a multi-rank training step: its peak memory (:mod:`.sharding`, or a
trace of its tensor-parallel share) and its step time with communication (:mod:`.comm`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...analysis.memory import MemoryPeak
from ...errors import FootprintError
from ...hardware.db import Accelerator
from ...trace import Trace
from ..kernels.roofline import Prediction, estimate_latency
from .comm import StepTime, add_contention, link_of, step_time
from .sharding import STRATEGIES, rank_peak

BENCH_STRATEGIES = (*STRATEGIES, "tp")


def check_strategy(strategy: str) -> None:
    if strategy not in BENCH_STRATEGIES:
        raise FootprintError(f"unknown strategy '{strategy}': use {', '.join(BENCH_STRATEGIES)}")


def rank_device(acc: Accelerator, nproc: int, threads: int) -> tuple[Accelerator, float, str]:
    """One of ``nproc`` CPU ranks of ``threads`` threads each: the device it computes on, the
    share of that device's ceilings it gets, and where they come from. ``footprint
    calibrate --nproc N`` measured the ceilings in N ranks at once, each on its threads
    (:func:`~torch_footprint.measure.distributed.measure_link`): those, whole. Otherwise
    the machine's ceilings scaled by the rank's share of the threads they were measured
    with, which assumes the rates scale with the thread count and ignores the caches and
    memory bandwidth the ranks share."""
    from dataclasses import replace

    cal = acc.calibrated or {}
    link = cal.get("link") or {}
    if link.get("ceilings") and link.get("nproc") == nproc and link.get("threads") == threads:
        return (replace(acc, calibrated={**cal, **link["ceilings"]}), 1.0,
                f"ceilings measured in {nproc} ranks at once, {threads} thread(s) each")
    share = threads / max(1, int(cal.get("threads") or threads))
    return acc, share, (f"ceilings of {cal.get('threads', '?')} thread(s) x {share:.2g} (run `footprint calibrate "
                        f"--nproc {nproc}` to measure them in {nproc} ranks)")


def phase_times(pred: Prediction, share: float = 1.0) -> dict[str, float]:
    """Compute seconds per phase, the operators' arithmetic and memory traffic slowed by
    ``1/share`` (ranks sharing one machine's cores and memory each get ``share`` of them;
    the per-operator overhead stays)."""
    out: dict[str, float] = {}
    for o in pred.ops:
        out[o.phase] = out.get(o.phase, 0.0) + o.device_s / share + o.overhead_s
    return out


@dataclass
class RankPrediction:
    strategy: str
    dp: int  # data-parallel ranks
    tp: int  # tensor-parallel ranks
    peak: MemoryPeak
    step: StepTime | None
    notes: list[str] = field(default_factory=list)
    stages: list[dict[str, Any]] = field(default_factory=list)  # pipeline ranks: each one's need (schedule_peak)

    def peak_of(self, rank: int) -> int:
        """Rank ``rank``'s predicted peak: its pipeline stage's need, else every rank's."""
        return int(self.stages[rank]["need"]) if self.stages else self.peak.peak_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "data_parallel": self.dp, "tensor_parallel": self.tp,
                "peak_bytes": self.peak.peak_bytes, "baseline_bytes": self.peak.baseline_bytes,
                "step": self.step.to_dict() if self.step else None, "notes": self.notes,
                **({"pipeline_ranks": self.stages} if self.stages else {})}


def predict_rank(trace: Trace, strategy: str, dp: int, tp: int = 1, acc: Accelerator | None = None,
                 share: float = 1.0, tf32: bool | None = None) -> RankPrediction:
    """What one rank holds and how long its step takes: ``trace`` is one rank's share of the
    model (traced with ``StepSpec(tp=tp)``), ``strategy`` the data-parallel one over ``dp``
    ranks ("tp" alone: no data parallelism)."""
    check_strategy(strategy)
    dp_strategy = "ddp" if strategy == "tp" else strategy
    peak = rank_peak(trace, dp_strategy, dp)
    notes: list[str] = []
    step = None
    if acc is not None and (acc.bandwidth is not None or acc.calibrated):
        pred = estimate_latency(trace, acc, tf32=tf32)
        link = link_of(acc)
        if link is None and dp * tp > 1:
            notes.append(f"no interconnect figure for {acc.id}: communication not timed "
                         "(run `footprint calibrate --nproc N`, or add link_gbs to its row)")
        else:
            step = add_contention(step_time(trace, phase_times(pred, share), dp_strategy, dp, link, tp), acc)
            step.notes.append(f"link: {link.source}" if link else "one rank: no communication")
    return RankPrediction(strategy, dp, tp, peak, step, notes)

