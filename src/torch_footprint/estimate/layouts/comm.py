"""Communication of one training step over N ranks, and the step time that includes it.

Ring collectives (Thakur, Rabenseifner and Gropp 2005, "Optimization of Collective
Communication Operations in MPICH"; NCCL's "Performance reported by NCCL tests" page, which
calls ``S x 2(N-1)/N / t`` the bus bandwidth): with N ranks, each sending to the next at B
bytes/s (the link's bandwidth, one direction), ``a`` seconds per ring step and ``c`` per call,

    all-reduce of S bytes                 2(N-1)/N x S / B + 2(N-1) a + c
    reduce-scatter or all-gather of S     (N-1)/N  x S / B +  (N-1) a + c   (S: the whole buffer)

What each strategy issues in one step (W: parameter bytes, G: gradient bytes, A: a
layer's activation [batch, sequence, hidden] in the compute dtype):

    ddp    all-reduce of G in buckets (DDP's ``bucket_cap_mb`` = 25 MiB, the first 1 MiB),
           launched as buckets fill during the backward (Li et al. 2020, "PyTorch
           Distributed", section 3.2.3): hidden behind the backward but for the last bucket
    zero1  DDP's all-reduce of G, then each rank's updated shard sent to the others
           (ZeroRedundancyOptimizer: (N-1)/N x W, an all-gather's volume) after the step,
           exposed; the optimizer step itself runs on 1/N of the parameters
    zero2  FSDP2 without resharding after forward (ZeRO-2 with W gathered once):
           all-gather of W in the forward, reduce-scatter of G in the backward
    zero3  FSDP2 (fully_shard; ZeRO-3, Rajbhandari et al. 2020, section 5): all-gather of
    fsdp   W in the forward, again in the backward, reduce-scatter of G; each wrapped unit's
           gather prefetched behind the previous unit's compute (the FSDP2 design notes,
           pytorch/pytorch#114299): hidden but for the first unit's gather and the last
           unit's reduce-scatter
    tp     per row-parallel linear, an all-reduce of A in the forward; per column-parallel
           linear, an all-reduce of its input's gradient (A) in the backward (DTensor's
           ColwiseParallel reduces each one's; Megatron-LM fuses q, k and v: two per layer
           each way, Shoeybi et al. 2019, figure 3); with sequence parallelism or under
           Megatron-core, one per module that holds column-parallel linears (the attention,
           the MLP): its input gathered once, its gradient reduce-scattered once (Korthikanti
           et al. 2022, figure 6); on the critical path, not overlapped. Blocks whose forward
           activation checkpointing runs again in the backward run its collectives again
           (:func:`recomputed_share`)

ZeRO's own accounting (paper, section 7): DDP moves 2W per rank per step, ZeRO-1/2 the
same 2W (reduce-scatter + all-gather), ZeRO-3 3W: the ring formulas give these at large N.

Overlap: a phase's hidden collectives cost ``max(0, collectives - compute)`` beyond the
compute of that phase, plus the part that cannot overlap (the last bucket, the first
gather). The link: ``footprint calibrate --nproc N`` measures it here (a bus bandwidth
and a per-step latency from all-reduces of two sizes); otherwise the database's
``link_gbs`` x LINK_EFFICIENCY (NCCL's all-reduce bus bandwidth reaches about 80% of the
NVLink figure on 8 GPUs in NVIDIA's published nccl-tests runs) and NCCL's own latencies:
a base per call plus a latency per ring step (NCCL_BASE_LATENCY_S, NCCL_STEP_LATENCY_S).

Contention (:func:`contention_s`): on a GPU, a collective hidden behind compute still takes
streaming multiprocessors and memory bandwidth from it (NCCL's kernels hold one block per
channel for the whole call), so the compute it overlaps runs slower. Measured across A100,
H100, MI250 and MI210 running GPT and Llama layers beside their collectives: 18.9% slower
on average (at most 40%) than the same compute alone (arXiv:2507.03114, abstract); an H100
profile of a GEMM beside an all-gather shows NCCL holding 24 of its 132 SMs (18%). The
compute beside the hidden collectives is priced that much slower (OVERLAP_SLOWDOWN). Async
TP's chunks move on the copy engines, which take no SMs: not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ...errors import FootprintError
from ...hardware.db import Accelerator
from ...hardware.networks import Network
from ...trace import Trace
from .memo import once, once_shared
from .sharding import expert_modules, wrap_units
from .tensor_parallel import tp_plan_of_trace

LINK_EFFICIENCY = 0.8
# NCCL's own cost model for a ring with its low-latency (LL) protocol, the one it picks for the
# small messages where latency matters (src/graph/tuning.cc, ncclTunerConstantsDefaults, NCCL
# 2.2x-2.27): a base latency per call of 6.6 us plus 0.6 us per ring step over NVLink, 1.0 us
# over PCIe. An 8-rank all-reduce of a few bytes: 6.6 + 14 x 0.6 = 15 us over NVLink.
NCCL_BASE_LATENCY_S = 6.6e-6
NCCL_STEP_LATENCY_S = {"nvlink": 0.6e-6, "pcie": 1.0e-6}
NCCL_NET_STEP_LATENCY_S = 2.7e-6  # the same table's network (NET) ring LL step
DDP_BUCKET = 25 * 2**20
DDP_FIRST_BUCKET = 2**20
SHARDED_OPTIMIZER = ("zero1", "zero2", "zero3", "fsdp")
# compute run beside a hidden collective on a GPU: 18.9% slower on average (arXiv:2507.03114;
# module docstring), not fitted here
OVERLAP_SLOWDOWN = 0.189


@dataclass(frozen=True)
class Link:
    """What one rank sends per second to its ring neighbour, the cost of one ring step and the
    cost of a call beyond its steps."""

    bandwidth: float  # bytes/s, one direction
    latency: float  # seconds per ring step
    source: str
    base: float = 0.0  # seconds per collective call


def nccl_link(bandwidth: float, link: str, source: str) -> Link:
    """A GPU link priced with NCCL's latencies (NCCL_STEP_LATENCY_S): NVLink's where ``link``
    names NVLink or another GPU fabric, PCIe's otherwise."""
    pcie = link.lower().startswith("pcie")
    return Link(bandwidth, NCCL_STEP_LATENCY_S["pcie" if pcie else "nvlink"], source, NCCL_BASE_LATENCY_S)


def across_nodes(link: Link, network: Network, nodes: int, per_node: int, efficiency: float = LINK_EFFICIENCY,
                 members: int = 1) -> Link:
    """``link`` for a ring over ``nodes`` nodes of ``per_node`` GPUs joined by ``network``, with
    ``members`` of the ring's ranks on each node. NCCL runs one ring per channel, each leaving a
    node through its own NIC, so a node's NICs carry the ring's whole traffic between nodes;
    the node's ``per_node / members`` groups of the same layout run their collectives at
    once and share those NICs: one ring gets ``members / per_node`` of them, ``members`` x
    each GPU's share (a ring of one GPU per node: that GPU's share; of all eight: the node's
    NICs). The ring runs at the slower of that and its own link (x ``efficiency``); NCCL's
    latency per step is its network one there (2.7 us for ring LL, src/graph/tuning.cc), its
    base per call unchanged."""
    members = max(1, min(members, per_node))
    bandwidth = min(link.bandwidth, network.per_gpu(per_node) * members * efficiency)
    return Link(bandwidth, max(link.latency, NCCL_NET_STEP_LATENCY_S),
                f"{link.source} within a node; across {nodes} nodes {network.name}, {network.nics} x "
                f"{network.port_gbps:g} Gb/s per node of {per_node} GPUs, {members} of the ring's ranks on each "
                f"({efficiency:.0%})", link.base)


def link_of(acc: Accelerator, efficiency: float = LINK_EFFICIENCY, *, ranks: int = 1, per_node: int = 8,
            network: Network | None = None, stride: int = 1) -> Link | None:
    """The link of ``acc`` for a group of ``ranks`` ranks ``stride`` apart (a data-parallel
    group of a layout with tensor parallelism inside it: ``stride`` = --tp): measured by
    ``footprint calibrate --nproc N`` where it ran, else the database's figure x
    ``efficiency``; None when neither is known. A group spanning more than one node of
    ``per_node`` goes through ``network`` (:func:`across_nodes`) where it is given; one that
    sits inside a node stays on the GPUs' own link (NVLink)."""
    link = _link_of(acc, efficiency)
    span = ranks * stride
    if link is not None and network is not None and ranks > 1 and span > per_node:
        members = max(1, min(ranks, per_node // stride))
        return across_nodes(link, network, math.ceil(span / per_node), per_node, efficiency, members)
    return link


def alltoall_link(acc: Accelerator, efficiency: float = LINK_EFFICIENCY, *, ranks: int = 1, per_node: int = 8,
                  network: Network | None = None, stride: int = 1, remote_share: float = 1.0,
                  nic_efficiency: float | None = None) -> Link | None:
    """The link an all-to-all over ``ranks`` ranks ``stride`` apart runs at, in the terms of
    ``(n-1)/n x bytes / bandwidth``. Unlike a ring, whose hops between nodes are a few of many
    (:func:`across_nodes`), an all-to-all sends each rank's bytes for another node straight there:
    (ranks - members) / ranks of them, ``members`` being the group's ranks on its node, all through
    the GPU's share of its node's NICs (every GPU of the node sends at once), the rest over the
    GPUs' own link beside it. ``remote_share``: the share of those bytes a dispatcher that sends a
    token to a node once really sends (:func:`.cp_ep.deepep_share`); ``nic_efficiency``: the share
    of the NICs' rate it reaches (default ``efficiency``, NCCL's). Within a node: the GPUs' own
    link (:func:`link_of`)."""
    link = _link_of(acc, efficiency)
    if link is None or network is None or ranks <= 1 or ranks * stride <= per_node:
        return link_of(acc, efficiency, ranks=ranks, per_node=per_node, network=network, stride=stride)
    members = max(1, min(ranks, per_node // stride))
    share = efficiency if nic_efficiency is None else nic_efficiency
    nic = network.per_gpu(per_node) * share
    nodes = math.ceil(ranks * stride / per_node)
    bandwidth = min(link.bandwidth, nic * (ranks - 1) / (ranks - members) / max(remote_share, 1e-9))
    return Link(bandwidth, max(link.latency, NCCL_NET_STEP_LATENCY_S),
                f"{link.source} within a node; across {nodes} nodes {network.name}, each GPU's share of "
                f"{network.nics} x {network.port_gbps:g} Gb/s per node of {per_node} GPUs ({share:.0%}), "
                f"{ranks - members} of the {ranks} ranks on other nodes", link.base)


def _link_of(acc: Accelerator, efficiency: float) -> Link | None:
    cal = (acc.calibrated or {}).get("link")
    if cal:
        return Link(cal["busbw_gbs"] * 1e9, cal["latency_us"] * 1e-6,
                    f"calibrated over {cal.get('nproc', '?')} ranks ({cal.get('backend', '?')})")
    if acc.link_bandwidth is None:
        return None
    return nccl_link(acc.link_bandwidth * efficiency, acc.link,
                     f"{acc.link}, {efficiency:.0%} of {acc.link_gbs:g} GB/s")


def all_reduce_s(nbytes: float, n: int, link: Link) -> float:
    """Ring all-reduce of ``nbytes`` over ``n`` ranks (module docstring)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (n - 1) / n * nbytes / link.bandwidth + 2 * (n - 1) * link.latency + link.base


def gather_s(nbytes: float, n: int, link: Link) -> float:
    """Ring all-gather or reduce-scatter of a buffer of ``nbytes`` (whole) over ``n`` ranks."""
    return 0.0 if n <= 1 or nbytes <= 0 else (n - 1) / n * nbytes / link.bandwidth + (n - 1) * link.latency + link.base


@dataclass
class Collective:
    """The calls of one kind a step makes: ``calls`` of them moving ``nbytes`` in all."""

    what: str
    op: str  # all-reduce, all-gather, reduce-scatter
    nbytes: int
    calls: int
    phase: str  # forward, backward, optimizer
    overlapped: bool
    time_s: float
    copy_engines: bool = False  # moved by the copy engines (DMA), not by kernels on the SMs (async TP)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class StepTime:
    """One rank's training step: compute by phase, the collectives, and what they add."""

    strategy: str
    ranks: int
    compute_s: dict[str, float]
    collectives: list[Collective]
    exposed_s: float  # communication not hidden behind compute
    link: Link | None
    notes: list[str] = field(default_factory=list)
    pipeline: dict[str, Any] | None = None  # micro-batches, pipeline ranks and the bubble (.schedule)

    @property
    def comm_s(self) -> float:
        return sum(c.time_s for c in self.collectives)

    @property
    def time_s(self) -> float:
        return sum(self.compute_s.values()) + self.exposed_s

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "ranks": self.ranks, "time_s": self.time_s, "compute_s": self.compute_s,
                "comm_s": self.comm_s, "exposed_comm_s": self.exposed_s,
                "link": self.link.__dict__ if self.link else None,
                "collectives": [c.to_dict() for c in self.collectives], "notes": self.notes,
                **({"pipeline": self.pipeline} if self.pipeline else {})}


def contention_s(step: StepTime, acc: Accelerator) -> float:
    """How much longer ``step``'s compute runs on ``acc`` beside its hidden collectives: the
    overlapped collectives' time that compute covers (all of it, or as much compute as there is),
    times OVERLAP_SLOWDOWN; none for what the copy engines move (async TP: they take no SMs), none off
    a GPU (no measurement of gloo beside CPU compute)."""
    if acc.kind != "gpu":
        return 0.0
    hidden = sum(c.time_s for c in step.collectives if c.overlapped and not c.copy_engines)
    compute = sum(v for k, v in step.compute_s.items() if k not in ("pipeline bubble", "optimizer"))
    return OVERLAP_SLOWDOWN * min(hidden, compute)


def add_contention(step: StepTime, acc: Accelerator) -> StepTime:
    """``step`` with :func:`contention_s` priced as its own line of compute, where there is any."""
    slower = contention_s(step, acc)
    if slower:
        step.compute_s["beside hidden collectives"] = slower
    return step


def ddp_buckets(nbytes: int) -> list[tuple[int, int]]:
    """DDP's gradient buckets as (bytes, how many of that size) in their order: the first of 1 MiB,
    the rest of 25 MiB, the last what is left (a 70B model's gradients fill some 5,600)."""
    if nbytes <= 0:
        return []
    first = min(DDP_FIRST_BUCKET, nbytes)
    full, last = divmod(nbytes - first, DDP_BUCKET)
    return [(size, count) for size, count in ((first, 1), (DDP_BUCKET, full), (last, 1)) if size and count]


def activation_bytes(trace: Trace, path: str) -> int:
    """Bytes of the output of module ``path`` in the forward (what a row-parallel linear all-reduces)."""
    return once_shared(trace, trace.events, "output bytes", lambda: _output_bytes(trace)).get(path, 0)


def _output_bytes(trace: Trace) -> dict[str, int]:
    """Each module's largest output in the forward, in one pass over the trace (a view, such as
    a linear's transposed weight, is not an output of the module's own)."""
    best: dict[str, int] = {}
    for e in trace.events:
        if e.phase == "forward" and e.kind != "view" and e.out_shapes and e.out_dtypes:
            nbytes = math.prod(e.out_shapes[0]) * getattr(torch, e.out_dtypes[0]).itemsize
            if nbytes > best.get(e.module, 0):
                best[e.module] = nbytes
    return best


def recomputed_share(trace: Trace) -> float:
    """The share of the forward's linear layers that activation checkpointing runs again in the
    backward: a linear's forward GEMM reads its weight transposed (``transposed``), so those
    found in the backward phase are recomputations. Their tensor-parallel collectives (the
    gathers and reduce-scatters inside a checkpointed block) run again with them: all of them
    under full checkpointing; under torchtitan's per-operator policy, which saves every other
    matmul and each reduce-scatter, about half."""
    def share() -> float:
        counts = {"forward": 0, "backward": 0}
        for e in trace.events:
            if e.kind == "matrix" and e.transposed and e.phase in counts:
                counts[e.phase] += 1
        return counts["backward"] / counts["forward"] if counts["forward"] else 0.0

    return float(once(trace, "recomputed share", share))


def param_bytes(trace: Trace) -> tuple[int, int]:
    """The trace's parameter bytes, and its trainable ones' (a rank's gradients), once per trace."""
    return once(trace, "parameter bytes", lambda: (sum(p.nbytes for p in trace.params),
                                                   sum(p.nbytes for p in trace.params if p.trainable)))


DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def fsdp_bytes(trace: Trace, param_dtype: str | None = None, reduce_dtype: str | None = None) -> tuple[int, int]:
    """What FSDP2 gathers and reduce-scatters per step, whole-model bytes: the parameters in
    ``param_dtype`` (MixedPrecisionPolicy.param_dtype; None: as stored) and the trainable
    ones' gradients in ``reduce_dtype`` (None: as the gradients are, the parameters' dtype).
    Under expert parallelism a rank's FSDP gathers and reduces its own experts only (torchtitan's
    and NeMo AutoModel's experts sharded over the data-parallel ranks that hold the same ones):
    1/ep of the experts' bytes (:func:`~.sharding.expert_modules`), as the memory counts them."""
    ep = int(trace.settings.get("ep", 1))
    experts = expert_modules(trace) if ep > 1 else set()

    def size(p: Any, dtype: str | None) -> float:
        whole = p.numel * DTYPE_BYTES[dtype] if dtype and p.dtype.startswith(("float", "bfloat")) else p.nbytes
        return whole / ep if p.module in experts else whole

    return (math.ceil(sum(size(p, param_dtype) for p in trace.params)),
            math.ceil(sum(size(p, reduce_dtype) for p in trace.params if p.trainable)))


def step_time(trace: Trace, phases: dict[str, float], strategy: str, n: int, link: Link | None,
              tp: int = 1, *, tp_link: Link | None = None, replicas: int = 1, replica_link: Link | None = None,
              param_dtype: str | None = None, reduce_dtype: str | None = None, tp_overlap: bool = False,
              fp8_gather: bool = False, tp_overlap_sums: bool = True) -> StepTime:
    """One rank's step time under ``strategy`` over ``n`` data-parallel ranks (and ``tp``
    tensor-parallel ones, ``trace`` being one rank's share): ``phases`` is the compute time
    of each phase on one device (the roofline's by-phase times). ``link`` carries the
    data-parallel rings, ``tp_link`` (default ``link``) the tensor-parallel all-reduces.
    HSDP: ``n`` ranks shard, ``replicas`` such groups each all-reduce their gradient shard
    over ``replica_link`` after its reduce-scatter. FSDP2's mixed precision: all-gathers in
    ``param_dtype``, reduce-scatters in ``reduce_dtype`` (:func:`fsdp_bytes`). ``tp_overlap``
    (async TP): the tensor-parallel collectives hidden behind their phase's compute, exposed
    only beyond it. ``fp8_gather`` (torchao's float8 tensor-parallel styles under sequence
    parallelism, tensorwise scaling): each forward all-gather of a module's input carries fp8, one
    byte a value, beside its bf16 reduce-scatter. ``tp_overlap_sums`` False (PyTorch's async TP,
    Inductor's micro-pipeline pass: torch/_inductor/fx_passes/micro_pipeline_tp.py fuses a
    reduce-scatter only with a matmul that produces its input, ``_find_producer_matmul``): the
    backward's reduce-scatter of an input gradient summed over several column-parallel linears
    (q, k and v; gate and up) stays exposed; Megatron-core's overlaps it with the weight
    gradients' GEMMs."""
    compute = {k: v for k, v in phases.items()}
    if strategy in SHARDED_OPTIMIZER and n > 1 and "optimizer" in compute:
        compute["optimizer"] /= n  # each rank steps its shard only
    out = StepTime(strategy, n * replicas * tp, compute, [], 0.0, link)
    if n * replicas * tp <= 1:
        return out
    tp_link = tp_link or link
    if link is None or tp_link is None:
        raise FootprintError("no interconnect figure for this accelerator: add link_gbs to its row, or run "
                             "`footprint calibrate --nproc N` on this machine")
    weights, _ = param_bytes(trace)
    fwd, bwd = compute.get("forward", 0.0), compute.get("backward", 0.0)
    cs = out.collectives
    exposed = 0.0
    if n > 1 and strategy in ("ddp", "zero1"):
        own, own_grads = fsdp_bytes(trace)  # (a rank's own experts only, under expert parallelism)
        buckets = ddp_buckets(own_grads)
        t = sum(all_reduce_s(b, n, link) * k for b, k in buckets)
        cs.append(Collective("gradient buckets", "all-reduce", own_grads, sum(k for _, k in buckets), "backward",
                             True, t))
        last = all_reduce_s(buckets[-1][0] if buckets else 0, n, link)
        exposed += last + max(0.0, t - last - bwd)
        if strategy == "zero1":
            t = gather_s(own, n, link)
            cs.append(Collective("updated parameter shards", "all-gather", own, 1, "optimizer", False, t))
            exposed += t
    elif (n > 1 or replicas > 1) and strategy in ("zero2", "zero3", "fsdp"):
        gathered, reduced = fsdp_bytes(trace, param_dtype, reduce_dtype)
        units = [b for b in wrap_units(trace).values() if b] or [weights]
        rest = max(0, weights - sum(units))  # the root's own parameters
        if rest:
            units = [rest, *units]
        units = [u * gathered / weights for u in units] if weights else units
        ag = sum(gather_s(u, n, link) for u in units)
        first = gather_s(units[0], n, link)
        cs.append(Collective("parameters, forward", "all-gather", gathered, len(units), "forward", True, ag))
        exposed += first + max(0.0, ag - first - fwd)
        bwd_comm = 0.0
        if strategy != "zero2":
            cs.append(Collective("parameters, backward", "all-gather", gathered, len(units), "backward", True, ag))
            bwd_comm += ag
        share = reduced / gathered if gathered else 0.0
        rs = sum(gather_s(u * share, n, link) for u in units)
        cs.append(Collective("gradients", "reduce-scatter", reduced, len(units), "backward", True, rs))
        last = gather_s(units[0] * share, n, link)
        if replicas > 1:  # HSDP: each reduce-scatter's shard all-reduced across the replicas
            rl = replica_link or link
            ar = sum(all_reduce_s(u * share / n, replicas, rl) for u in units)
            cs.append(Collective("gradient shards across replicas", "all-reduce", reduced // n, len(units),
                                 "backward", True, ar))
            rs += ar
            last += all_reduce_s(units[0] * share / n, replicas, rl)
        bwd_comm += rs
        exposed += last + max(0.0, bwd_comm - last - bwd)
    elif n > 1:
        raise FootprintError(f"unknown strategy '{strategy}'")
    if tp > 1:
        plan = tp_plan_of_trace(trace)
        rows = [p for p, s in plan.items() if s == "rowwise"]
        cols = [p for p, s in plan.items() if s == "colwise"]
        summed = 0  # modules whose input gradient sums several column-parallel linears' (q, k, v; gate, up)
        if trace.settings.get("tp_inputs") == "per module":  # one collective for the module's linears
            parents = [c.rsplit(".", 1)[0] for c in cols]
            cols = sorted(set(parents))
            summed = sum(parents.count(c) > 1 for c in cols)
        size = activation_bytes(trace, rows[0]) if rows else 0  # [batch, sequence, hidden]
        fw, bw = len(rows) * all_reduce_s(size, tp, tp_link), len(cols) * all_reduce_s(size, tp, tp_link)
        # PyTorch's async TP fuses a reduce-scatter only with the one matmul that produces it (below)
        unfused = summed * gather_s(size, tp, tp_link) if tp_overlap and not tp_overlap_sums else 0.0
        sent = size  # the forward's bytes a call: a reduce-scatter and an all-gather of the activation
        if fp8_gather:  # the all-gather's half in fp8 (1 byte a value of the traced 2)
            sent = size * 3 // 4
            fw = len(rows) * (gather_s(size, tp, tp_link) + gather_s(size / 2, tp, tp_link))
        # async TP's peer-to-peer chunks run on the copy engines, beside the SMs (PyTorch's SymmetricMemory,
        # Transformer Engine's ring exchange)
        cs.append(Collective("row-parallel outputs", "all-reduce", sent * len(rows), len(rows), "forward", tp_overlap,
                             fw, copy_engines=tp_overlap))
        # (an all-reduce of S is a reduce-scatter and an all-gather of S: the unfused reduce-scatters' half apart)
        cs.append(Collective("column-parallel input gradients", "all-reduce", size * len(cols) - size * summed // 2
                             if unfused else size * len(cols), len(cols), "backward", tp_overlap, bw - unfused,
                             copy_engines=tp_overlap))
        if unfused:
            cs.append(Collective("summed input gradients, not fused", "reduce-scatter", size * summed, summed,
                                 "backward", False, unfused))
        if again := recomputed_share(trace):  # the checkpointed blocks' forward collectives, in the backward
            cs.append(Collective("row-parallel outputs, recomputed", "all-reduce", round(sent * len(rows) * again),
                                 round(len(rows) * again), "backward", tp_overlap, fw * again,
                                 copy_engines=tp_overlap))
            bw += fw * again
        exposed += max(0.0, fw - fwd) + unfused + max(0.0, bw - unfused - bwd) if tp_overlap else fw + bw
    out.exposed_s = exposed
    return out
