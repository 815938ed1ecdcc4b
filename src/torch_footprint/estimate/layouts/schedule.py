"""A training step of several micro-batches: gradient accumulation (``--grad-accum``) and
pipeline parallelism (``--pp``, ``--vpp``, ``--pp-schedule``), priced from one micro-batch's
trace and its per-operator times.

Each pipeline rank's share comes from the traced per-layer figures (:func:`.pipeline.stage_map`:
chunks of the repeated blocks; the embeddings with the first, the final norm, head and loss
with the last). With m micro-batches, p ranks and v chunks per rank, one step is

    m x T + (p-1)/v x T     the slowest rank's forward and backward of one micro-batch T, m
                            times, and the bubble (:func:`.pipeline.bubble_fraction`)
    + the optimizer          over the slowest rank's share of the parameters
    + its data-parallel collectives: DDP's all-reduce once a step (no_sync on the other
      micro-batches), FSDP's gathers and reduce-scatters every micro-batch (FSDP2's default);
      tensor-parallel all-reduces every micro-batch
    + point-to-point sends of the boundary activation [batch, sequence, hidden]: the first
      micro-batch's forward crosses p-1 boundaries before the last rank starts, the last one's
      gradient crosses them back (2(p-1) sends exposed; the steady state's sends overlap
      compute)

Memory of rank r, the larger of two moments: in the forward and backward, its share of the
model states, the activations of the micro-batches it holds at once (:func:`.pipeline.in_flight`)
and the largest transient there beyond the states and saved activations (the logits, say),
counted on every rank (an upper bound for the ranks without the head); in the optimizer step,
its share of what is live then."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace
from typing import Any

import torch

from ...analysis.memory import MemoryPeak
from ...hardware.db import Accelerator
from ...hardware.networks import Network
from ...settings import Parallel
from ...trace import Trace
from ..kernels import constants as fitted
from ..kernels.bandwidth import transfer_s
from ..kernels.prediction import Prediction
from ..kernels.roofline import estimate_latency
from .comm import Collective, Link, StepTime, activation_bytes, add_contention, alltoall_link, link_of, step_time
from .cp_ep import (
    DEEPEP_NIC_SHARE,
    context_parallel,
    deepep_share,
    expert_parallel,
    expert_prediction,
    ring_extra,
    ring_prediction,
)
from .memo import once
from .pipeline import StageMap, bubble_fraction, in_flight, stage_map
from .ranks import RankPrediction, phase_times
from .sharding import experts_away, fsdp_copy_bytes
from .stage_memory import event_chunks, transients_above

FSDP = ("zero2", "zero3", "fsdp")


def fsdp_rounds(strategy: str, pp: int, microbatches: int) -> int:
    """How often a step's FSDP gathers, reduce-scatters and their copies run: every micro-batch,
    but once a step in a pipeline (torch.distributed.pipelining's stages hold off FSDP2's
    resharding and gradient sync until the last micro-batch's backward, and torchtitan does not
    reshard after the forward there); once for the other strategies."""
    return microbatches if strategy in FSDP and pp == 1 else 1


def rank_shares(trace: Trace, pred: Prediction, sm: StageMap) -> dict[str, list[Any]]:
    """Per pipeline rank: forward, loss and backward seconds of one micro-batch, its share of
    the parameter bytes, and one micro-batch's saved activations (bytes) by the modules that
    made them (``activations`` of :class:`MemoryPeak`, filled by :func:`schedule_peak`)."""
    return once(pred, ("rank shares", id(trace), sm.p, sm.v), lambda: _rank_shares(trace, pred, sm))


def _rank_shares(trace: Trace, pred: Prediction, sm: StageMap) -> dict[str, list[Any]]:
    p = sm.p
    index, seconds = once(pred, "op events and times", lambda: (
        torch.tensor([o.index for o in pred.ops], dtype=torch.int64),
        torch.tensor([o.time_s for o in pred.ops], dtype=torch.float64)))
    chunk = event_chunks(trace, sm)[index.clamp(max=len(sm.events))]  # -1: the step, or past the events
    mine = chunk >= 0
    times = torch.zeros(p, dtype=torch.float64).index_add_(0, chunk[mine] % p, seconds[mine]).tolist()
    params = [0] * p
    for q in trace.params:
        params[sm.rank(sm.chunk_of_module(q.module))] += q.nbytes
    total = sum(params) or 1
    return {"time_s": times, "share": [b / total for b in params]}


def _rank_trace(trace: Trace, sm: StageMap, rank: int) -> Trace:
    """``trace`` with only pipeline rank ``rank``'s parameters and modules (its collectives);
    the containers that own no parameter (the root, the blocks' list) stay, so FSDP's units
    are found as in the whole model. Made once per trace, split and rank."""
    return once(trace, ("rank trace", sm.p, sm.v, rank), lambda: _slice(trace, sm, rank))


def _slice(trace: Trace, sm: StageMap, rank: int) -> Trace:
    mine = {c for c in range(sm.p * sm.v) if sm.rank(c) == rank}
    return dataclasses.replace(trace, params=[q for q in trace.params if sm.chunk_of_module(q.module) in mine],
                               modules=[m for m in trace.modules
                                        if sm.chunk_of_module(m.path) in mine
                                        or not (m.param_bytes or m.path.startswith(sm.blocks + "."))])


def send_s(nbytes: float, link: Link) -> float:
    """One point-to-point send of ``nbytes``: the bytes over the link, one step and a call."""
    return nbytes / link.bandwidth + link.latency + link.base if nbytes > 0 else 0.0


def schedule_step(trace: Trace, pred: Prediction, phases: dict[str, float], *, strategy: str, shard: int,
                  replicas: int, tp: int, pp: int, vpp: int, microbatches: int, schedule: str,
                  link: Link | None, tp_link: Link | None, replica_link: Link | None, pp_link: Link | None,
                  param_dtype: str | None = None, reduce_dtype: str | None = None,
                  tp_overlap: bool = False, per_run: int | None = None, fp8_gather: bool = False,
                  tp_overlap_sums: bool = True) -> StepTime:
    """One step of ``microbatches`` micro-batches over ``pp`` pipeline ranks (module docstring);
    ``phases``: one micro-batch's compute by phase on one device (the whole model's). ``per_run``:
    the micro-batches one run of the schedule takes (all of them by default); each run fills and
    drains the pipeline: its bubble and its first and last stage boundaries, once per run."""
    m = microbatches
    per = per_run or m
    runs = max(1, m // per)
    kw: dict[str, Any] = dict(tp_link=tp_link, replicas=replicas, replica_link=replica_link,
                              param_dtype=param_dtype, reduce_dtype=reduce_dtype, tp_overlap=tp_overlap,
                              fp8_gather=fp8_gather, tp_overlap_sums=tp_overlap_sums)
    if pp == 1:
        sm = None
        ranks = [(trace, sum(v for k, v in phases.items() if k != "optimizer"), 1.0)]
    else:
        sm = stage_map(trace, pp, vpp)
        shares = rank_shares(trace, pred, sm)
        ranks = [(_rank_trace(trace, sm, r), shares["time_s"][r], shares["share"][r]) for r in range(pp)]
    slowest = max(t for _, t, _ in ranks)
    bubble = runs * (pp - 1) / vpp * slowest
    opt = phases.get("optimizer", 0.0)
    worst: StepTime | None = None
    worst_tail = -1.0
    for tr, t, share in ranks:
        one = {k: (v * share if k == "optimizer" else v) for k, v in phases.items()}
        if sm is not None:  # this rank's own forward and backward of one micro-batch
            total = sum(v for k, v in phases.items() if k != "optimizer") or 1.0
            one = {k: (v * share if k == "optimizer" else v * t / total) for k, v in phases.items()}
        dp = step_time(tr, one, strategy, shard, link, 1, **kw)
        tps = step_time(tr, one, "ddp", 1, link, tp, **kw)
        again = fsdp_rounds(strategy, pp, m)
        tail = dp.compute_s.get("optimizer", 0.0) + again * dp.exposed_s + m * tps.exposed_s
        if tail > worst_tail:
            worst_tail = tail
            worst = dp
            worst.collectives = [dataclasses.replace(c, calls=c.calls * again, time_s=c.time_s * again)
                                 for c in dp.collectives] + \
                                [dataclasses.replace(c, calls=c.calls * m, time_s=c.time_s * m, nbytes=c.nbytes * m)
                                 for c in tps.collectives]
    assert worst is not None
    out = StepTime(strategy, shard * replicas * tp * pp, {"micro-batches": m * slowest, "pipeline bubble": bubble,
                                                            "optimizer": worst.compute_s.get("optimizer", opt)},
                   worst.collectives, worst_tail - worst.compute_s.get("optimizer", 0.0), link)
    if sm is not None and pp_link is not None:
        boundary = activation_bytes(trace, f"{sm.blocks}.{sm.per_chunk - 1}")
        each = send_s(boundary, pp_link)
        calls = 2 * m * vpp  # each micro-batch's activation out of each chunk, its gradient back
        out.collectives.append(Collective("stage boundary activations and gradients", "send/recv",
                                          boundary * calls, calls, "pipeline", True, calls * each))
        out.exposed_s += runs * 2 * (pp - 1) * each
    out.pipeline = {"schedule": schedule if pp > 1 else "gradient accumulation", "stages": pp,
                    "virtual_stages": vpp, "microbatches": m, "runs": runs,
                    "bubble_fraction": bubble_fraction(pp, per, vpp) if pp > 1 else 0.0,
                    "rank_microbatch_s": [t for _, t, _ in ranks]}
    note = f"{m} micro-batches a step"
    if pp > 1:
        chunks = f", {vpp} chunks each" if vpp > 1 else ""
        note += (f" through {pp} pipeline ranks ({schedule}{chunks}"
                 f"{f', in {runs} runs of {per}' if runs > 1 else ''}): bubble {bubble_fraction(pp, per, vpp):.1%} of "
                 "the pipeline's time, (p-1)/(v m) of the ideal (Narayanan et al. 2021)")
    out.notes.append(note)
    return out


def tied_head_bytes(trace: Trace, sm: StageMap) -> int:
    """The weight a pipeline's last stage holds a copy of: an output head tied to the input
    embedding (GPT-2's ``lm_head``, ``tie_word_embeddings``) owns no parameter in a one-rank
    trace, the embedding on the first rank does; with the stages on different ranks, the last
    one keeps its own (torchtitan and Megatron-LM untie it, Megatron all-reducing the two
    gradients). Found as a parameterless linear of the last chunk whose output width is the
    rows of a matrix on another rank; 0 when there is none."""
    last = sm.p * sm.v - 1
    for mod in trace.modules:
        if mod.type != "Linear" or mod.param_bytes or not mod.out_shapes or sm.chunk_of_module(mod.path) != last:
            continue
        width = mod.out_shapes[0][-1]
        for q in trace.params:
            if len(q.shape) == 2 and q.shape[0] == width and sm.rank(sm.chunk_of_module(q.module)) != sm.rank(last):
                return q.nbytes
    return 0


def _rank_figures(trace: Trace, peak: MemoryPeak, pp: int, vpp: int) -> tuple[Any, ...]:
    """Each pipeline rank's share of ``peak`` (one micro-batch, the whole model on one rank): the
    stage map, saved activations, parameter bytes (and their total), gradients, the optimizer
    step's high, the transients above the states (:func:`.stage_memory.transients_above`), a stage boundary's
    activation and the model's output bytes."""
    sm = stage_map(trace, pp, vpp)
    acts = [0] * pp
    for module, nbytes in peak.activations_by_module.items():
        acts[sm.rank(sm.chunk_of_module(module))] += nbytes
    params = [0] * pp
    for q in trace.params:
        params[sm.rank(sm.chunk_of_module(q.module))] += q.nbytes
    total = sum(params) or 1
    params[sm.rank(pp * vpp - 1)] += tied_head_bytes(trace, sm)  # its states as a parameter of its own
    grads = peak.persistent.get("gradients", 0) * sum(params) / total  # the gradients, as states are spread
    # live bytes at each operator's high point (peak.highs[i + 1]: event i), in the forward and
    # backward, and in the optimizer step
    highs = once(peak, "highs by event", lambda: torch.tensor(peak.highs[1:] or [peak.peak_bytes] * len(trace.events),
                                                               dtype=torch.int64))
    steps, out_bytes = once(trace, "step events and kept output", lambda: _step_and_output(trace))
    steps = steps[steps < len(highs)]
    opt = int(highs[steps].max()) if len(steps) else 0
    above = transients_above(trace, highs, sm, acts)
    # a stage boundary's activation: what each receive (:func:`receive_buffers`) holds
    boundary = activation_bytes(trace, f"{sm.blocks}.{sm.per_chunk - 1}")
    return sm, acts, params, total, grads, opt, above, boundary, out_bytes


def _step_and_output(trace: Trace) -> tuple[torch.Tensor, int]:
    """The optimizer step's events, and the bytes the last stage keeps of each micro-batch until
    its backward: the model's output (the logits) and what its loss saved for the backward (the
    log-probabilities); GPipe holds all m of them at once, 1F1B one (the transient counts one)."""
    outputs = set(trace.tags.get("output", []))
    out_bytes = sum(n for e in trace.events if e.phase == "forward" for uid, n in e.allocs if uid in outputs)
    loss = [i for i, e in enumerate(trace.events) if e.phase == "loss"]
    if loss:
        freed = {f.storage: f.after for f in trace.frees}
        out_bytes += sum(n for i in loss for uid, n in trace.events[i].allocs
                         if freed.get(uid, len(trace.events)) > loss[-1])
    return torch.tensor([i for i, e in enumerate(trace.events) if e.phase == "optimizer"], dtype=torch.int64), out_bytes


def receive_buffers(framework: str, pp: int, vpp: int, rank: int, microbatches: int, held: float,
                    boundary: int) -> int:
    """The bytes pipeline rank ``rank`` holds to receive stage boundaries (``boundary`` bytes each:
    an activation forward, its gradient back), as each runtime allocates them.

    torch (``torch.distributed.pipelining``, torchtitan): each stage allocates, once, a receive
    buffer per micro-batch for its input activation (but the first chunk's) and for its output's
    gradient (but the last chunk's); they stay allocated between steps: m x boundary x the
    chunk ends that receive.

    megatron (Megatron-core's ``schedules.py`` through ``p2p_communication.py``): every receive is a
    fresh ``torch.empty`` of the boundary's shape; a received activation is the chunk's input,
    kept (``input_tensors``) until that micro-batch's backward through the chunk: the ``held``
    micro-batches in flight (:func:`.pipeline.in_flight`, in units of the rank's v chunks) of each
    chunk that receives; a received gradient lives while one backward runs: one more boundary on
    a rank with a chunk that is not the last. (The outputs Megatron frees after sending them,
    ``deallocate_pipeline_outputs``, stay counted in the rank's activations: an upper bound.)"""
    chunks = pp * vpp
    mine = range(rank, chunks, pp)
    if framework == "megatron":
        receiving = sum(c > 0 for c in mine)
        return math.ceil(boundary * (held * receiving + any(c < chunks - 1 for c in mine)))
    return microbatches * boundary * sum((c > 0) + (c < chunks - 1) for c in mine)


def schedule_peak(trace: Trace, peak: MemoryPeak, states: int, *, pp: int, vpp: int, microbatches: int,
                  schedule: str, framework: str = "torch", kept: int = 0) -> tuple[MemoryPeak, list[dict[str, Any]]]:
    """The largest pipeline rank's peak (module docstring): ``peak`` is one micro-batch's peak
    of the whole model on a rank of the data-parallel layout, ``states`` its model states;
    ``framework`` the runtime whose receive buffers it holds (:func:`receive_buffers`); ``kept``
    what the whole model keeps beyond ``states`` through a pipelined step, each rank its share
    (FSDP2's gathered parameters and whole gradients: :func:`~.sharding.pipeline_gathered`)."""
    # what does not depend on the states or the micro-batches: worked out once per peak and split
    sm, acts, params, total, grads, opt, above, boundary, out_bytes = once(
        peak, ("pipeline ranks", id(trace), pp, vpp), lambda: _rank_figures(trace, peak, pp, vpp))
    transients = [x - states if x is not None else 0 for x in above]
    chunks = pp * vpp
    more_outputs = (microbatches - 1) * out_bytes if schedule == "gpipe" else 0
    best, at = -1, 0
    figures = []
    kept = kept if pp > 1 else 0
    for r in range(pp):
        held = in_flight(schedule, pp, r, microbatches, vpp)
        share = params[r] / total
        transient = transients[r]
        buffers = receive_buffers(framework, pp, vpp, r, microbatches, held, boundary) if pp > 1 else 0
        if r == sm.rank(chunks - 1):
            transient += more_outputs
        held_states = (states + kept) * share
        # never below its states: a transient can come out negative where the replay's high lacks
        # state the steady step holds (the optimizer's moments in a first step's forward)
        moment = max(held_states + held * acts[r] + transient, held_states)
        if pp > 1 and held >= max(2, microbatches):
            # every forward of the step runs before this rank's first backward (GPipe; 1F1B with no more
            # micro-batches than ranks ahead): the gradients, set to None at the step's start, do not exist
            # yet when the most activations do; they come as the first micro-batch's are freed (one
            # micro-batch: the traced step as it is)
            moment = max(moment - grads * share, moment - acts[r])
        need = math.ceil(max(moment + buffers, opt * share + buffers))
        figures.append({"rank": r, "states": math.ceil(states * share), "in_flight": held,
                        "gathered": math.ceil(kept * share),
                        "activations": math.ceil(held * acts[r]), "transient": transient, "receive buffers": buffers,
                        "need": need})
        if need > best:
            best, at = need, r
    f = figures[at]
    return MemoryPeak(peak_bytes=best, baseline_bytes=f["states"], event=-1, phase="pipeline", module=f"rank {at}",
                      op="", breakdown={"model states": f["states"], "activations in flight": f["activations"],
                                        **({"parameters gathered, gradients whole (FSDP in a pipeline)":
                                            f["gathered"]} if f["gathered"] else {}),
                                        "largest transient": f["transient"],
                                        "stage receive buffers": f["receive buffers"]},
                      persistent={k: math.ceil(v * params[at] / total) for k, v in peak.persistent.items()}), figures


def layout_step(trace: Trace, acc: Accelerator, pred: Prediction, p: Parallel,
                network: Network | None) -> StepTime | None:
    """One rank's training step under the layout ``p`` on ``acc`` (``trace``: one rank's
    micro-batch, ``pred`` its operators' times): its collectives on the links they run over,
    its micro-batches and pipeline (:func:`schedule_step`). None when the layout has several
    GPUs and ``acc`` no link figure."""
    # the context-parallel ranks hold the same weights: gradients reduce over data x context ranks
    tp, dp, strategy, shard = p.tensor, p.data * p.cp, p.sharding, p.state_shards
    replicas = dp // shard
    # rank order as torchtitan and Megatron-LM lay it out: tensor-parallel ranks adjacent, then
    # context-parallel, then the FSDP group, then its replicas, pipeline stages outermost
    # (the data-parallel groups take in the context-parallel ranks: their stride is the tensor group's)
    per_node = p.gpus_per_node
    link = link_of(acc, ranks=shard, per_node=per_node, network=network, stride=tp)
    tp_link = link_of(acc, ranks=tp, per_node=per_node, network=network)
    rep_link = link_of(acc, ranks=replicas, per_node=per_node, network=network, stride=tp * shard)
    if link is None and p.gpus > 1:
        return None
    reduce = p.fsdp_reduce_dtype or p.fsdp_param_dtype  # FSDP2 reduces in param_dtype unless told
    # each rank's attention over every block of the ring, in its stages' and phases' compute; its
    # own experts' gradients accumulated, not every expert's
    rank_pred = expert_prediction(trace, ring_prediction(pred, p.cp), p.ep)
    step = _data_step(trace, rank_pred, p, strategy, shard, replicas, link, tp_link, rep_link, reduce, acc, network)
    if step is not None and strategy in FSDP:  # its copy kernels, each micro-batch (as it gathers)
        away = experts_away(trace) if p.ep > 1 else 0.0
        if p.pp == 1:
            mine = [trace]
        else:  # each pipeline rank copies its own stages' parameters: the most-loaded rank's
            sm = stage_map(trace, p.pp, p.vpp)
            mine = [_rank_trace(trace, sm, r) for r in range(p.pp)]
        copies = max(fsdp_copy_bytes(t, strategy, shard, p.fsdp_param_dtype, reduce, away) for t in mine)
        step.compute_s["FSDP copies"] = fsdp_rounds(strategy, p.pp, p.grad_accum) * transfer_s(acc, copies,
                                                                                             fitted.current())
    if step is not None and (p.cp > 1 or p.ep > 1):
        add_cp_ep(step, trace, pred, p, acc, network)
    return add_contention(step, acc) if step is not None else None


def add_cp_ep(step: StepTime, trace: Trace, pred: Prediction, p: Parallel, acc: Accelerator,
              network: Network | None) -> None:
    """Context and expert parallelism's communication (:mod:`.cp_ep`) added to ``step``, once per
    micro-batch; the ring attention's further blocks, which the step's compute already carries
    (:func:`ring_prediction`), named apart where the step is one micro-batch's phases."""
    m = p.grad_accum
    if p.cp > 1:
        cp_link = link_of(acc, ranks=p.cp, per_node=p.gpus_per_node, network=network, stride=p.tensor)
        extra = ring_extra(pred, p.cp)
        if "micro-batches" in step.compute_s:
            step.notes.append(f"context parallelism: each rank's attention runs over {p.cp} blocks of the ring, "
                              f"{sum(extra.values()):.3g} s more per micro-batch over all the model's layers "
                              "(each rank its stage's share), in the micro-batches' and the bubble's time")
        else:
            for ph, s in extra.items():
                step.compute_s[ph] = step.compute_s.get(ph, 0.0) - s
            step.compute_s["context-parallel attention"] = sum(extra.values())
        if cp_link is not None:
            cs, exposed = context_parallel(trace, pred, p.cp, cp_link, p.pp)
            step.collectives += [replace(c, nbytes=m * c.nbytes, calls=m * c.calls, time_s=m * c.time_s) for c in cs]
            step.exposed_s += m * exposed
            _in_the_bubble(step, exposed)
    moe = trace.settings.get("moe")
    if p.ep > 1 and moe:
        # the data-parallel ranks a tensor-parallel group apart, or, folded, adjacent ranks
        stride = 1 if p.ep_folded else p.tensor
        deepep = p.moe_dispatcher == "deepep"
        share = deepep_share(moe, p.ep, p.gpus_per_node // stride) if deepep else 1.0
        ep_link = alltoall_link(acc, ranks=p.ep, per_node=p.gpus_per_node, network=network, stride=stride,
                                remote_share=share, nic_efficiency=DEEPEP_NIC_SHARE if deepep else None)
        if share < 1:  # (1 where the group sits inside one node)
            step.notes.append(f"DeepEP: a token crosses to another node once, {share:.0%} of an all-to-all's copies")
        if ep_link is not None:
            cs, exposed = expert_parallel(trace, moe, p.ep, ep_link, pp=p.pp)
            a2a = left = m * exposed
            hidden = p.overlap_moe_expert_parallel_comm
            if hidden:  # beside another micro-batch's forward or backward: what the step's compute cannot cover
                behind = sum(v for k, v in step.compute_s.items() if k != "pipeline bubble")
                left = max(0.0, a2a - behind)
                step.notes.append(f"expert parallelism's all-to-alls ({a2a:.3g} s) overlap the compute of other "
                                  f"micro-batches ({behind:.3g} s): {left:.3g} s exposed")
            step.collectives += [replace(c, nbytes=m * c.nbytes, calls=m * c.calls, time_s=m * c.time_s,
                                         overlapped=hidden) for c in cs]
            step.exposed_s += left
            if not hidden:
                _in_the_bubble(step, exposed)
    elif p.ep > 1:
        step.notes.append("expert parallelism: the model config names no top-k or hidden size; its all-to-alls "
                          "are not timed")


def _in_the_bubble(step: StepTime, per_microbatch_s: float) -> None:
    """A pipeline's fill and drain wait for a stage's exposed communication too: ``per_microbatch_s``
    (one micro-batch's, on the most loaded rank) times the bubble's (p - 1) / v micro-batch slots."""
    pipe = step.pipeline or {}
    if pipe.get("stages", 1) > 1 and per_microbatch_s > 0:
        slots = pipe["runs"] * (pipe["stages"] - 1) / pipe["virtual_stages"]
        step.compute_s["pipeline bubble"] = step.compute_s.get("pipeline bubble", 0.0) + slots * per_microbatch_s


def _data_step(trace: Trace, pred: Prediction, p: Parallel, strategy: str, shard: int, replicas: int,
               link: Link | None, tp_link: Link | None, rep_link: Link | None, reduce: str | None,
               acc: Accelerator, network: Network | None) -> StepTime | None:
    tp, dp, m, pp, per_node = p.tensor, p.data * p.cp, p.grad_accum, p.pp, p.gpus_per_node
    phases = dict(once(pred, "phase times", lambda: phase_times(pred)))
    # torchao's float8 tensor-parallel styles (tensorwise) gather each module's input in fp8; Transformer Engine's not
    megatron = p.framework == "megatron"
    fp8_gather = p.fp8 == "tensorwise" and not p.te_fp8 and p.sequence_parallel and tp > 1
    if m > 1 or pp > 1:
        pp_link = link_of(acc, ranks=2, per_node=per_node, network=network, stride=tp * dp)
        return schedule_step(trace, pred, phases, strategy=strategy, shard=shard, replicas=replicas,
                             tp=tp, pp=pp, vpp=p.vpp, microbatches=m, schedule=p.schedule, link=link,
                             tp_link=tp_link, replica_link=rep_link, pp_link=pp_link,
                             param_dtype=p.fsdp_param_dtype, reduce_dtype=reduce, tp_overlap=p.async_tp,
                             per_run=p.per_schedule, fp8_gather=fp8_gather, tp_overlap_sums=megatron)
    return step_time(trace, phases, strategy, shard, link, tp, tp_link=tp_link, replicas=replicas,
                     replica_link=rep_link, param_dtype=p.fsdp_param_dtype, reduce_dtype=reduce,
                     tp_overlap=p.async_tp, fp8_gather=fp8_gather, tp_overlap_sums=megatron)


def predict_pipeline(trace: Trace, pp: int, vpp: int, microbatches: int, schedule: str,
                     acc: Accelerator | None = None, share: float = 1.0) -> RankPrediction:
    """Each of ``pp`` pipeline ranks (no data parallelism) as ``fit --pp`` prices it: one
    micro-batch's ``trace`` replayed, its model states, and :func:`schedule_peak`'s
    cut and micro-batches in flight; ``peak`` is the largest rank's, ``stages`` every rank's.
    The step time, on ``acc`` where it has a link figure: :func:`schedule_step`."""
    from .sharding import gather_bytes, model_states, step_peak

    one = step_peak(trace, "ddp", 1)
    states = model_states(one.persistent, "ddp", 1, gather_bytes(trace, "ddp"), False)
    peak, figures = schedule_peak(trace, one, states.total, pp=pp, vpp=vpp, microbatches=microbatches,
                                  schedule=schedule)
    step = None
    link = link_of(acc) if acc is not None and (acc.bandwidth is not None or acc.calibrated) else None
    if acc is not None and link is not None:
        pred = estimate_latency(trace, acc)
        step = schedule_step(trace, pred, phase_times(pred, share), strategy="ddp", shard=1, replicas=1, tp=1, pp=pp,
                             vpp=vpp, microbatches=microbatches, schedule=schedule, link=link, tp_link=None,
                             replica_link=None, pp_link=link)
        step.notes.append(f"link: {link.source}")
        add_contention(step, acc)
    return RankPrediction("pp", 1, 1, peak, step, stages=figures)
