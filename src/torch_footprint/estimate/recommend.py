"""Which accelerator runs this workload: fits in memory, largest batch, predicted speed, the pick.

Memory per rank comes from :mod:`.sharding` (the larger of a training run's first step and its
steady-state step, where the optimizer state exists before the step); latency from the roofline (:mod:`.roofline`)
over the trace at the batch asked. The largest batch comes from two traces whose operators
line up: the live bytes at every operator are affine in the batch, so the peak is known at
any batch; throughput there from operator costs extrapolated from the same traces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..analysis.memory import MemoryPeak, replay
from ..errors import FootprintError
from ..hardware import Accelerator, find, load
from ..hardware.networks import network_for
from ..quantities import parse_seconds
from ..settings import Parallel, Target, Training, Workload
from ..settings.training import FSDP_STRATEGIES
from ..trace import Trace
from .allocator import SOURCES as EXTRAS_SOURCES
from .allocator import models_extras
from .batch import Scaling, aligned_pair, extrapolate
from .kernels.roofline import Prediction, estimate_latency
from .kernels.sdpa import cuda_backend, is_rocm, rocm_backend, sm_of
from .layouts.comm import StepTime
from .layouts.cp_ep import layout_memory, without_experts
from .layouts.schedule import layout_step, schedule_peak
from .layouts.sharding import ModelStates, pipeline_gathered, step_peak
from .memory import allocation_count
from .price import layout_extras, needed, rank_states
from .workload import at_batch, first_batch, fp8_rows, layout_training, precision_of, trace_step


@dataclass
class FitRow:
    """One accelerator's answer."""

    accelerator: Accelerator
    capacity: int
    need: int  # bytes per rank at the batch asked: peak + extras (elsewhere than NVIDIA GPUs, / utilisation)
    fits: bool
    largest_batch: int | None
    prediction: Prediction | None
    throughput: float | None  # samples/s over all ranks at the largest batch
    throughput_batch: int | None
    meets_target: bool | None = None
    reason: str = ""
    step: StepTime | None = None  # one rank's training step with communication (several ranks)
    attention: list[dict[str, Any]] | None = None  # the kernel CUDA picks for each attention call (.kernels.sdpa)
    extras: dict[str, int] = field(default_factory=dict)  # held beyond the tensors, by part (.allocator)
    provision: int | None = None  # (peak + extras) / utilisation: what to provision with headroom

    @property
    def latency_s(self) -> float | None:
        if self.step is not None:
            return self.step.time_s
        return self.prediction.time_s if self.prediction else None

    def to_dict(self) -> dict[str, Any]:
        p = self.prediction
        return {"accelerator": self.accelerator.id, "name": self.accelerator.name, "capacity_bytes": self.capacity,
                "need_bytes": self.need, "fits": self.fits, "largest_batch": self.largest_batch,
                "latency_s": self.latency_s, "lower_bound_s": p.lower_bound_s if p else None,
                "bound": p.bound if p else None, "ceilings": p.ceilings.source if p else None,
                "throughput_samples_per_s": self.throughput, "throughput_batch": self.throughput_batch,
                "meets_target": self.meets_target, "reason": self.reason, "tdp_w": self.accelerator.tdp_w,
                "step": self.step.to_dict() if self.step else None, "link_gbs": self.accelerator.link_gbs,
                "extras_bytes": self.extras, "provision_bytes": self.provision,
                **({"attention": self.attention} if self.attention else {})}


@dataclass
class FitResult:

    kind = "fit"  # the envelope's kind of its saved file
    rows: list[FitRow]
    pick: str | None
    why: str
    batch: int
    gpus: int
    strategy: str
    settings: dict[str, Any]
    tp: int = 1
    states: ModelStates | None = None
    peak: MemoryPeak | None = None
    notes: list[str] = field(default_factory=list)
    target_s: float | None = None

    def __repr__(self) -> str:
        return (f"FitResult(model={self.settings.get('model')!r}, pick={self.pick!r}, "
                f"rows=<{len(self.rows)} accelerators, {sum(1 for r in self.rows if r.fits)} fit>)")

    def to_dict(self) -> dict[str, Any]:
        return {"pick": self.pick, "why": self.why, "batch_per_rank": self.batch, "gpus": self.gpus, "tp": self.tp,
                "strategy": self.strategy, "settings": self.settings, "target_latency_s": self.target_s,
                "model_states_per_rank": self.states.__dict__ if self.states else None,
                "peak_per_rank": self.peak.to_dict() if self.peak else None,
                "rows": [r.to_dict() for r in self.rows], "extras_sources": EXTRAS_SOURCES, "notes": self.notes}


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


def attention_kernels(rows: list[FitRow], calls: list[dict[str, Any]]) -> list[str]:
    """Name on each NVIDIA row the kernel CUDA runs each traced attention call with (sdp_utils'
    choice, :mod:`.kernels.sdpa`); a note where that is fused and the trace's CPU path was not,
    or the other way round (the step is priced as traced). On an AMD GPU a fused call is priced as
    AOTriton's kernels, what PyTorch's SDPA runs on ROCm, and the math path as traced."""
    differ: dict[str, list[str]] = {}
    for row in rows:
        sm, rocm = sm_of(row.accelerator), is_rocm(row.accelerator)
        if (sm is None and not rocm) or not calls:
            continue
        row.attention = []
        for c in calls:
            kernel, why = rocm_backend(c) if sm is None else cuda_backend(c, sm)
            row.attention.append({"kernel": kernel, "why": why, "traced": c["cpu_path"], "calls": c["calls"],
                                  "dtype": c["dtype"], "head_dim": c["head_dim"], "dropout": c["dropout"]})
            if sm is not None and (kernel == "math") != (c["cpu_path"] == "math"):
                differ.setdefault(f"{kernel} where the trace ran the CPU's {c['cpu_path']} path"
                                  + (f" (dropout {c['dropout']:g} in training)" if c["dropout"] and c["grad"]
                                     else ""), []).append(row.accelerator.id)
    return [f"attention on {', '.join(ids)}: CUDA's kernel choice (sdp_utils) is {what}; the step is priced as "
            "traced" for what, ids in differ.items()]


def layout_prediction(w: Workload, t: Training, p: Parallel, acc: Accelerator, target: Target) -> Prediction:
    """``predict`` under a training layout: one rank's micro-batch by operator, and the whole
    step with its micro-batches, pipeline and collectives as ``step``."""
    t = layout_training(t, p)
    trace, notes = trace_step(w, t, p, cuda_sm=sm_of(acc))
    fp8_rows([acc], p, w, explicit=True)
    pred = estimate_latency(trace, acc, tf32=target.tf32_flag, efficiency=target.efficiencies, layout=w.layout,
                            fp8=p.fp8, compiled=w.compile, cuda_graphs=w.cuda_graphs, micro_batches=p.grad_accum)
    net = network_for(p.network, p.network_gbps, p.nics_per_node, p.gpus_per_node)
    pred.step = layout_step(trace, acc, pred, p, net)
    if pred.step is None:
        raise FootprintError(f"no interconnect figure for {acc.id}: add link_gbs to its row, or run "
                             "`footprint calibrate --nproc N` on this machine")
    pred.notes += [n for n in notes if "parallel" in n] + pred.step.notes + [
        f"the operators are one rank's micro-batch; its whole step ({p.grad_accum} micro-batch(es), "
        f"{p.gpus} GPUs): {pred.step.time_s * 1e3:.4g} ms"]
    return pred


def recommend(w: Workload, t: Training = Training(), p: Parallel = Parallel(),
              target: Target = Target()) -> FitResult:
    """Every accelerator's answer for the step ``t`` of ``w`` at its batch per rank, and the pick
    (see the module docstring). ``p.tp`` of the ``p.gpus`` split each layer (tensor parallelism,
    :mod:`.layouts.tensor_parallel`); the rest are data-parallel ranks under ``p.strategy``.
    Training over several ranks is timed with its communication (:mod:`.layouts.comm`); GPUs
    beyond one node of ``p.gpus_per_node`` communicate through ``p.network``."""
    gpus, tp, dp, strategy = p.gpus, p.tensor, p.data, p.sharding
    utilisation, hardware, only = target.utilisation, target.hardware, target.gpu
    tf32, efficiency = target.tf32_flag, target.efficiencies
    target_s = parse_seconds(target.latency) if target.latency is not None else None
    net = network_for(p.network, p.network_gbps, p.nics_per_node, p.gpus_per_node)
    shard = p.state_shards
    m, pp = p.grad_accum, p.pp
    if (m > 1 or pp > 1) and not t.train:
        raise FootprintError("--grad-accum and --pp price a training step: add --train")
    t = layout_training(t, p)
    rows_db = load(hardware)
    if only:
        rows_db = [find(rows_db, x) for x in only]
    rows_db = fp8_rows(rows_db, p, w, explicit=bool(only))
    # on NVIDIA GPUs alone the step follows CUDA's attention kernel (the oldest GPU's choice)
    sms = [sm_of(a) for a in rows_db]
    cuda = min(sm for sm in sms if sm is not None) if sms and None not in sms else None
    t1, notes = trace_step(w, t, p, cuda_sm=cuda)
    if p.fp8 not in (None, "none") and not only:
        units = "MX" if p.fp8 == "mxfp8" else "fp8"
        notes.append(f"fp8 ({p.fp8}): only the accelerators with {units} units are considered")
    b1 = first_batch(t1, w.batch)
    traces = {b1: t1, **{k * b1: trace_step(at_batch(w, k * b1), t, p, cuda_sm=cuda)[0] for k in (2, 3)}}
    peaks = {b: layout_memory(tr, step_peak(tr, strategy, shard, p.bucket_view), strategy) for b, tr in traces.items()}
    n_allocs = allocation_count(t1)
    whole, states = rank_states(t1, peaks[b1], p, lambda: replay(t1).persistent) if t.train else (None, None)
    if pp > 1:  # the largest pipeline rank: its states, its micro-batches in flight
        # (split from the replay's live bytes with the states it holds, the experts of other
        # expert-parallel ranks then taken out of the rank's share)
        staged = {b: schedule_peak(tr, peaks[b], whole.total if whole else 0, pp=pp, vpp=p.vpp,
                                   microbatches=p.per_schedule,
                                   schedule=p.schedule, framework=p.framework,
                                   kept=pipeline_gathered(tr, strategy)) for b, tr in traces.items()}
        peaks = {b: without_experts(x[0], x[1], whole.total if whole else 0, states.total if states else 0)
                 for b, x in staged.items()}
        notes.append(f"pipeline ranks of {p.schedule} at batch {b1}: " + ", ".join(
            f"rank {f['rank']} {f['need'] / 2**30:.3g} GiB ({f['in_flight']:g} micro-batches in flight)"
            for f in staged[b1][1]))
        if m < pp:
            notes.append(f"{m} micro-batch(es) through {pp} pipeline ranks: most of the step is the bubble; "
                         "give --grad-accum (the micro-batches a step) as the run does")
    scaling = Scaling(peaks, None) if pp > 1 else Scaling.of(traces, peaks)
    pair = scaling.pair if pp == 1 else aligned_pair(traces)
    if pp > 1:
        how = ("largest batch: a line through the largest pipeline rank's need at three batch sizes; throughput "
               "there: operator costs extrapolated from the traces" if pair else "")
    elif pair is not None:
        bp, bq = pair
        r = next(b for b in traces if b not in pair)
        guess = scaling.peak_at(r)
        if abs(guess - peaks[r].peak_bytes) > 0.01 * peaks[r].peak_bytes:
            notes.append(f"the peak at batch {r} is {peaks[r].peak_bytes / 2**30:.3g} GiB, {guess / 2**30:.3g} GiB "
                         f"from the traces at {bp} and {bq}: largest batches are approximate")
        how = (f"largest batch: live bytes at every operator, affine in the batch, from traces at {bp} and {bq} "
               f"(checked at {r}); throughput there: operator costs extrapolated from the same traces")
    else:
        notes.append("the traces at three batch sizes ran different operators: largest batch from a line through "
                     "their peaks, throughput from a line through the predicted times")
        how = ""
    cache: dict[int, Any] = {}

    def trace_at(b: int) -> Any:
        if b in traces:
            return traces[b]
        if pair is None:
            return None
        if b not in cache:
            cache[b] = extrapolate(traces[pair[0]], traces[pair[1]], pair[0], pair[1], b)
        return cache[b]

    def latency(tr: Trace, acc: Accelerator) -> Prediction:
        return estimate_latency(tr, acc, tf32=tf32, efficiency=efficiency, fp8=p.fp8, compiled=w.compile,
                                cuda_graphs=w.cuda_graphs, micro_batches=p.grad_accum)

    no_link: list[str] = []

    def with_comm(tr: Trace, acc: Accelerator, pred: Prediction) -> StepTime | None:
        """One rank's training step with its communication (None: one rank, or no link figure)."""
        if not t.train or (gpus == 1 and m == 1 and p.sharding not in FSDP_STRATEGIES):
            return None
        step = layout_step(tr, acc, pred, p, net)
        if step is None:
            no_link.append(acc.id)
        return step

    out_rows: list[FitRow] = []
    for acc in rows_db:
        extras = layout_extras(acc, n_allocs, t.train, p)
        fixed = sum(extras.values())
        cap = acc.memory_bytes
        # on an NVIDIA GPU the extras are modelled, the verdict is against the whole memory
        use = 1.0 if models_extras(acc) else utilisation
        need = needed(acc, peaks[b1].peak_bytes + fixed, utilisation)
        provision = math.ceil((peaks[b1].peak_bytes + fixed) / utilisation)
        room = cap * use - fixed
        largest = scaling.largest(room)
        if largest is not None:  # the traced peak at the batch asked overrules the extrapolation there
            largest = max(largest, b1) if need <= cap else min(largest, b1 - 1)
        if acc.bandwidth is None and not acc.calibrated:
            out_rows.append(FitRow(acc, cap, need, need <= cap, largest, None, None, None,
                                   reason="no bandwidth figure: run `footprint calibrate` on it", extras=extras,
                                   provision=provision))
            continue
        pred = latency(traces[b1], acc)
        step = with_comm(traces[b1], acc, pred)

        def total(tr: Trace) -> float:
            pr = latency(tr, acc)
            st = with_comm(tr, acc, pr)
            return st.time_s if st is not None else pr.time_s

        thr, thr_b = None, None
        if largest:
            tl = trace_at(largest)
            if tl is not None:
                secs = total(tl)
            else:  # a line through the predicted times at the first two batch sizes
                t0 = step.time_s if step is not None else pred.time_s
                t2 = total(traces[2 * b1])
                secs = t0 + (t2 - t0) * (largest - b1) / b1
            thr, thr_b = (largest * dp * m / secs if secs > 0 else None), largest
        row = FitRow(acc, cap, need, need <= cap, largest, pred, thr, thr_b, step=step, extras=extras,
                     provision=provision)
        if target_s is not None:
            row.meets_target = row.fits and (row.latency_s or 0.0) <= target_s
        out_rows.append(row)
    notes += attention_kernels(out_rows, t1.settings.get("attention") or [])
    pick, why = rank(out_rows, target_s)
    missing: dict[str, list[str]] = {}
    for row in out_rows:
        for d in row.prediction.missing_dtypes if row.prediction else []:
            missing.setdefault(d, []).append(row.accelerator.id)
    for d, ids in missing.items():
        notes.append(f"no published {d} rate for {', '.join(ids)}: their fp32 rate is used")
    if gpus > 1:
        how_many = f"{dp} data-parallel ranks ({strategy})" + (f" x {tp} tensor-parallel" if tp > 1 else "") + (
            f" x {pp} pipeline stages" if pp > 1 else "")
        notes.append(f"{how_many}: memory per rank; " + (
            "latency is one rank's training step with its communication (ring collectives over the "
            "accelerator's link_gbs); throughput is samples per second over all ranks" if t.train else
            "throughput is the sum over the data-parallel ranks"))
        if no_link:
            notes.append(f"no interconnect figure for {', '.join(sorted(set(no_link)))}: their communication is "
                         "not timed")
        if t.train and gpus > p.gpus_per_node:
            nodes = -(-gpus // p.gpus_per_node)
            notes.append(f"{gpus} GPUs span {nodes} nodes of {p.gpus_per_node}: " + (
                f"their rings cross {net.name} ({net.nics} x {net.port_gbps:g} Gb/s per node, {net.source})"
                if net else "no --network given, so the GPUs' own link is assumed between nodes too (optimistic)"))
    if how:
        notes.append(how)
    settings = dict(t1.settings, precision=precision_of(w), checkpointing=t.checkpointing,
                    utilisation=utilisation, model=t1.model, inputs=t1.inputs)
    return FitResult(rows=out_rows, pick=pick, why=why, batch=b1, gpus=gpus, strategy=strategy, settings=settings,
                     states=states, peak=peaks[b1], notes=notes, target_s=target_s, tp=tp)
