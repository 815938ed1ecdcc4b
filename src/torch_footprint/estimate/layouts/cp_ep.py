"""Context parallelism (ring attention) and expert parallelism (all-to-all dispatch and combine),
priced in time and memory for one rank.

Context parallelism over ``cp`` ranks (torchtitan's ``context_parallel_degree``, Megatron-LM's
``--context-parallel-size``): each rank holds ``seq/cp`` of every sequence, so the step is traced at
that length (its activations, its linears' FLOPs). Attention needs every key: the ranks pass their
key/value blocks round a ring, ``cp - 1`` hops in the forward, each overlapped with the attention of
the block already there; the backward passes the key/value blocks again and their gradients back
(Megatron-LM's ring: K, V forward; K, V and dK, dV backward, so twice the bytes). With the causal
load balancing both use (each rank holds a chunk from either end of the sequence), each rank's
attention work is ``1/cp`` of the whole sequence's, ``cp`` times the traced ``seq/cp`` call's: the
attention kernels run ``cp`` times over, once per block. Each rank keeps the block it computes with
and the one arriving (double buffering); the backward also the gradients' two.
The gradients are reduced over the data- x context-parallel ranks (they hold the same weights):
torchtitan's FSDP shards over that mesh (``dp_shard_cp``), Megatron-LM's data-parallel group
includes the context-parallel ranks.

Expert parallelism over ``ep`` ranks (torchtitan's ``expert_parallel_degree``, Megatron-LM's
``--expert-model-parallel-size``): each rank holds ``experts/ep`` of each mixture-of-experts layer.
Per layer each rank sends its tokens' hidden states to the ranks holding their ``top_k`` experts
(dispatch, an all-to-all of ``tokens x top_k x hidden`` elements) and gets the results back
(combine, the same size); the backward does both again with the gradients. ``(ep-1)/ep`` of each
crosses the link, not overlapped (the default of both frameworks). With a capacity factor ``c``
(Megatron-LM's ``--moe-expert-capacity-factor`` with padding) every expert's buffer is padded to
``c`` times its even share: the dispatch, combine and expert compute grow by ``c``. The experts'
parameters are split ``ep`` ways: unsharded strategies hold ``1/ep`` of them; under FSDP a rank
already holds ``1/N`` of everything, so only the gathered experts shrink (to ``1/ep``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch

from ...analysis.memory import MemoryPeak
from ...errors import FootprintError
from ...trace import Trace
from ..kernels.prediction import OpTime, Prediction
from .comm import Collective, Link
from .sharding import ModelStates, expert_modules, experts_away

ATTENTION_OPS = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk", "top_k", "moe_top_k")
# DeepEP's normal kernels between nodes reach their NICs' rate: 43, 58 and 51 GB/s of RDMA
# "bottleneck bandwidth" dispatching at EP 16, 32 and 64 over CX7 400 Gb/s cards of "~50 GB/s
# maximum bandwidth" (DeepEP's README, V1 performance table, H800)
DEEPEP_NIC_SHARE = 1.0
EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts")  # routed experts a layer


def split_sequence(shape: tuple[int, ...], cp: int) -> tuple[int, ...]:
    """One context-parallel rank's share of an input ``[batch, sequence, ...]``."""
    if len(shape) < 2:
        raise FootprintError(f"--cp {cp} splits the sequence (an input's second dimension): an input of shape "
                             f"{list(shape)} has none")
    if shape[1] % cp:
        raise FootprintError(f"--cp {cp} does not divide the sequence length {shape[1]}")
    return (shape[0], shape[1] // cp, *shape[2:])


def _is_attention(op: str) -> bool:
    return any(k in op for k in ATTENTION_OPS)


def kv_block_bytes(trace: Trace) -> list[int]:
    """Bytes of the local key and value blocks (one rank's ``seq/cp`` of ``batch x kv_heads x
    head_dim`` each) of each attention call of the forward (the largest call's block for each)."""
    shape = trace.inputs[0]["shape"] if trace.inputs and trace.inputs[0]["shape"] else [1]
    batch = int(shape[0])
    sizes = [batch * c["kv_heads"] * c["seq_k"] * (c.get("head_dim_k", c["head_dim"]) + c.get("head_dim_v",
                                                                                               c["head_dim"]))
             * getattr(torch, c["dtype"]).itemsize for c in trace.settings.get("attention") or []]
    calls = sum(1 for e in trace.events if e.phase == "forward" and _is_attention(e.op))
    return [max(sizes)] * calls if sizes else []


def ring_buffers(trace: Trace, cp: int) -> int:
    """Bytes the ring holds beyond the trace: the block arriving beside the one computed with, for
    keys and values and, in the backward, their gradients (the largest layer's)."""
    blocks = kv_block_bytes(trace)
    return 2 * max(blocks) if cp > 1 and blocks else 0


def attention_seconds(pred: Prediction) -> dict[str, float]:
    """The traced attention kernels' device time by phase."""
    out: dict[str, float] = {}
    for o in pred.ops:
        if _is_attention(o.op):
            out[o.phase] = out.get(o.phase, 0.0) + o.device_s
    return out


def stage_layers(layers: int, pp: int) -> int:
    """The layers of ``layers`` the most loaded of ``pp`` pipeline ranks runs (an even split)."""
    return math.ceil(layers / pp) if pp > 1 else layers


def _scaled(o: OpTime, factor: float) -> OpTime:
    """Operator ``o`` with its work (FLOPs, bytes, device time) ``factor`` times over."""
    return replace(o, flops=int(o.flops * factor), bytes=int(o.bytes * factor), compute_s=o.compute_s * factor,
                   memory_s=o.memory_s * factor, kernels_s=o.kernels_s * factor)


def ring_prediction(pred: Prediction, cp: int) -> Prediction:
    """``pred`` with each attention kernel run ``cp`` times over, a rank's whole ring attention
    (the module docstring), so that the phases, the pipeline's stages and its bubble, and the
    compute that hides the collectives all carry it."""
    if cp <= 1:
        return pred
    return replace(pred, ops=[_scaled(o, cp) if _is_attention(o.op) else o for o in pred.ops])


def expert_prediction(trace: Trace, pred: Prediction, ep: int) -> Prediction:
    """``pred`` with the experts' gradient accumulation (each micro-batch's weight gradients added
    into the step's, an in-place add of a parameter's shape in the backward) on the experts a rank
    holds: 1/``ep`` of them. The trace runs every expert on the rank's own tokens; a rank runs its
    own experts on every rank's tokens for them, the same matrix FLOPs, but accumulates only its own
    experts' gradients."""
    if ep <= 1:
        return pred
    experts = expert_modules(trace)
    shapes = {(q.module, tuple(q.shape)) for q in trace.params if q.module in experts}
    mine = {i for i, e in enumerate(trace.events) if e.phase == "backward" and e.op.startswith("aten.add_")
            and e.out_shapes and (e.module, tuple(e.out_shapes[0])) in shapes}
    if not mine:
        return pred
    return replace(pred, ops=[_scaled(o, 1 / ep) if o.index in mine else o for o in pred.ops])


def p2p_s(nbytes: float, link: Link) -> float:
    """One send to a ring neighbour."""
    return nbytes / link.bandwidth + link.latency + link.base if nbytes > 0 else 0.0


def ring_extra(pred: Prediction, cp: int) -> dict[str, float]:
    """The attention compute ring attention over ``cp`` ranks adds to the traced call's, by phase."""
    return {ph: (cp - 1) * s for ph, s in attention_seconds(pred).items()} if cp > 1 else {}


def context_parallel(trace: Trace, pred: Prediction, cp: int, link: Link,
                     pp: int = 1) -> tuple[list[Collective], float]:
    """Ring attention over ``cp`` ranks: the key/value passes, and their time not hidden behind the
    attention of the block already there; under ``pp`` pipeline ranks, the most loaded rank's
    attention layers (:func:`stage_layers`)."""
    if cp <= 1:
        return [], 0.0
    att = attention_seconds(pred)
    blocks = kv_block_bytes(trace)
    calls = len(blocks)  # the model's attention calls: each block's share of the traced attention
    blocks = blocks[:stage_layers(calls, pp)]
    fwd_bytes = (cp - 1) * sum(blocks)
    # per hop: a block's send against one block of attention (the traced call's time)
    per_fwd = att.get("forward", 0.0) / calls if calls else 0.0
    per_bwd = att.get("backward", 0.0) / calls if calls else 0.0
    t_f = sum(p2p_s(b, link) for b in blocks) * (cp - 1)
    t_b = sum(p2p_s(2 * b, link) for b in blocks) * (cp - 1)
    exposed = sum(max(0.0, p2p_s(b, link) - per_fwd) + max(0.0, p2p_s(2 * b, link) - per_bwd)
                  for b in blocks) * (cp - 1)
    hops = len(blocks) * (cp - 1)
    cs = [Collective("key/value blocks round the context-parallel ring", "send/recv", fwd_bytes, hops,
                     "forward", True, t_f),
          Collective("key/value blocks and their gradients round the ring", "send/recv", 2 * fwd_bytes,
                     hops, "backward", True, t_b)]
    return cs, exposed


def moe_shape(model: Any) -> dict[str, int] | None:
    """A mixture-of-experts model's top-k and hidden size from its config, and its expert layers; its
    routed experts and group-limited routing (DeepSeek-V3's n_group, topk_group) where it names them."""
    cfg = getattr(model, "config", None)
    top_k = next((getattr(cfg, k) for k in TOP_K_KEYS if isinstance(getattr(cfg, k, None), int)), None)
    hidden = getattr(cfg, "hidden_size", None)
    layers = sum(1 for n, _ in model.named_modules() if n.rsplit(".", 1)[-1] == "experts")
    if not (top_k and hidden and layers):
        return None
    out = {"top_k": int(top_k), "hidden": int(hidden), "layers": layers}
    experts = next((getattr(cfg, k) for k in EXPERT_KEYS if isinstance(getattr(cfg, k, None), int)), None)
    for key, value in (("experts", experts), ("n_group", getattr(cfg, "n_group", None)),
                       ("topk_group", getattr(cfg, "topk_group", None))):
        if isinstance(value, int) and value > 0:
            out[key] = value
    return out


def deepep_share(moe: dict[str, int], ranks: int, members: int) -> float:
    """DeepEP's bytes between nodes against an all-to-all's, for ``ranks`` expert-parallel ranks,
    ``members`` to a node. DeepEP's normal kernels send a token to each other node once (RDMA to
    the GPU of the same local rank, then NVLink to the experts' GPUs: the DeepEP README), where an
    all-to-all sends a copy per expert chosen: the share is the distinct nodes among a token's
    top_k experts over top_k. With the experts spread evenly over the nodes and chosen alike, a node
    holds none of them with probability C(E - E/N, k) / C(E, k); group-limited routing (topk_group
    of n_group groups, each group within a node where the groups are at least the nodes) reaches
    at most topk_group groups' nodes. 1 where the model names no expert count."""
    nodes = max(1, ranks // max(1, members))
    k, experts = moe["top_k"], moe.get("experts", 0)
    if nodes <= 1 or not experts or experts % nodes or k > experts:
        return 1.0
    distinct = nodes * (1 - math.comb(experts - experts // nodes, k) / math.comb(experts, k))
    if moe.get("n_group") and moe.get("topk_group"):
        distinct = min(distinct, moe["topk_group"] * max(1.0, nodes / moe["n_group"]))
    return min(1.0, distinct / k)


def alltoall_s(nbytes: float, n: int, link: Link) -> float:
    """An all-to-all of ``nbytes`` per rank over ``n`` ranks: (n-1)/n of it leaves the rank."""
    return 0.0 if n <= 1 or nbytes <= 0 else (n - 1) / n * nbytes / link.bandwidth + (n - 1) * link.latency + link.base


def dispatch_bytes(trace: Trace, moe: dict[str, int], capacity: float = 1.0) -> int:
    """One dispatch (or combine) of one layer: tokens x top_k x hidden in the activations' dtype;
    under sequence parallelism a rank dispatches its 1/tp of the sequence (Megatron-core's
    all-to-all dispatcher takes the tokens as the sequence-parallel region holds them)."""
    shape = trace.inputs[0]["shape"] if trace.inputs else [1, 1]
    tokens = math.prod(shape[:2]) if len(shape) >= 2 else math.prod(shape)
    tokens = math.ceil(tokens / int(trace.settings.get("sequence_split", 1)))
    return math.ceil(tokens * moe["top_k"] * moe["hidden"] * activation_size(trace) * capacity)


def activation_size(trace: Trace) -> int:
    """Bytes of one element of the hidden states: 2 under autocast or FSDP's 16-bit compute, else
    the element size of the model's floating-point weights (most of their bytes: a model held in
    bf16 sends bf16)."""
    if trace.settings.get("autocast") or trace.settings.get("fsdp_compute_dtype"):
        return 2
    by_size: dict[int, int] = {}
    for q in trace.params:
        dtype = getattr(torch, q.dtype, None)
        if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
            by_size[dtype.itemsize] = by_size.get(dtype.itemsize, 0) + q.nbytes
    return max(by_size, key=lambda k: by_size[k]) if by_size else 4


def expert_parallel(trace: Trace, moe: dict[str, int], ep: int, link: Link, capacity: float = 1.0,
                    pp: int = 1) -> tuple[list[Collective], float]:
    """The all-to-alls of expert parallelism over ``ep`` ranks (module docstring), all exposed;
    under ``pp`` pipeline ranks, the most loaded rank's mixture-of-experts layers (:func:`stage_layers`)."""
    if ep <= 1:
        return [], 0.0
    b = dispatch_bytes(trace, moe, capacity)
    one = alltoall_s(b, ep, link)
    n = stage_layers(moe["layers"], pp)
    cs = [Collective("tokens to their experts and back (dispatch, combine)", "all-to-all", 2 * n * b, 2 * n,
                     "forward", False, 2 * n * one),
          Collective("their gradients, dispatch and combine", "all-to-all", 2 * n * b, 2 * n, "backward", False,
                     2 * n * one)]
    return cs, 4 * n * one


def layout_memory(trace: Trace, peak: MemoryPeak, strategy: str) -> MemoryPeak:
    """One rank's peak under the trace's context and expert parallelism (``trace.settings`` "cp",
    "ep"): the ring's arriving key/value blocks added; the experts held on other ranks taken out of
    the model states (unsharded strategies: their weights, gradients and, under ddp, optimizer
    state; FSDP: the gathered experts)."""
    cp, ep = int(trace.settings.get("cp", 1)), int(trace.settings.get("ep", 1))
    if cp <= 1 and ep <= 1:
        return peak
    out = replace(peak, breakdown=dict(peak.breakdown))
    ring = ring_buffers(trace, cp)
    if ring:
        out.breakdown["key/value ring buffers"] = ring
        out.peak_bytes += ring
    if ep > 1:
        away = experts_away(trace)
        # FSDP's gathered experts and their gradients are left out where its moments are made
        # (sharding.fsdp_moments, expert_grads_away)
        cats = () if strategy in ("zero2", "zero3", "fsdp") else (
            ("weights", "gradients", "optimizer state", "buffers (outside the model)") if strategy == "ddp" else
            ("weights", "gradients", "buffers (outside the model)"))
        for cat in cats:
            if cat in out.breakdown:
                cut = math.floor(out.breakdown[cat] * away)
                out.breakdown[cat] -= cut
                out.peak_bytes -= cut
    return out


def layout_states(trace: Trace, states: ModelStates, strategy: str) -> ModelStates:
    """The per-rank model states without the experts other expert-parallel ranks hold (unsharded
    strategies: weights, gradients, DDP's buckets, and under ddp the optimizer state; FSDP: the
    gathered experts)."""
    away = experts_away(trace)
    if not away:
        return states
    keep = 1 - away
    if strategy in ("zero2", "zero3", "fsdp"):
        return replace(states, extra=math.ceil(states.extra * keep))
    return replace(states, weights=math.ceil(states.weights * keep), gradients=math.ceil(states.gradients * keep),
                   extra=math.ceil(states.extra * keep),
                   optimizer=math.ceil(states.optimizer * keep) if strategy == "ddp" else states.optimizer)


def without_experts(staged: MemoryPeak, figures: list[dict[str, Any]], whole: int, held: int) -> MemoryPeak:
    """The largest pipeline rank's need (:func:`~.schedule.schedule_peak`, split with the ``whole``
    model states the replay holds) less its share of the experts other expert-parallel ranks hold
    (``held``: :func:`layout_states`' total)."""
    if held >= whole or not whole or not figures:
        return staged
    worst = max(figures, key=lambda f: f["need"])
    cut = math.floor((whole - held) * worst["states"] / whole)
    return replace(staged, peak_bytes=staged.peak_bytes - cut)
