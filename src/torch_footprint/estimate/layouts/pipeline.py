"""A model's layout over pipeline and expert-parallel ranks: its repeated blocks (what the
pipeline's stages split) and its experts (what expert parallelism splits), and the checks a
layout must pass against them."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ...errors import FootprintError
from ...settings import Parallel
from ...trace import Trace
from .memo import once

# what a model config calls its experts per mixture-of-experts layer (transformers' names)
EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def repeated_blocks(model: nn.Module) -> tuple[str, int]:
    """The longest run of repeated blocks (the largest ``nn.ModuleList``): its path and length;
    ("", 0) when the model has none."""
    best = ("", 0)
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) > best[1] and "expert" not in name.rsplit(".", 1)[-1]:
            best = (name, len(mod))
    return best


def expert_count(model: nn.Module) -> int | None:
    """Experts per mixture-of-experts layer: the model config's count, else the longest
    ``experts`` list of modules; None when it has none."""
    config = getattr(model, "config", None)
    for key in EXPERT_COUNT_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    lists = [len(m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList) and n.endswith("experts")]
    return max(lists) if lists else None


def check_layout(model: nn.Module, p: Parallel) -> None:
    """Refuse a layout the model cannot take: ``--pp`` x ``--vpp`` stages that do not divide its
    repeated blocks (an even split, as Megatron-LM's) or that torchtitan's split cannot make
    (:func:`split_blocks`), ``--ep`` that does not divide its experts."""
    if p.pp > 1:
        path, n = repeated_blocks(model)
        stages = p.pp * p.vpp
        what = f"--pp {p.pp}" + (f" x --vpp {p.vpp}" if p.vpp > 1 else "")
        if not n:
            raise FootprintError(f"{what}: found no run of repeated blocks to split into pipeline stages")
        split_blocks(n, stages, p.stage_weights, f"{what} = {stages} stages", path)
    if p.ep > 1:
        experts = expert_count(model)
        if experts is None:
            raise FootprintError(f"--ep {p.ep} splits the experts of mixture-of-experts layers: this model has none")
        if experts % p.ep:
            raise FootprintError(f"--ep {p.ep} does not divide the model's {experts} experts per layer")


def split_blocks(n: int, stages: int, weights: tuple[int, int] | None = None, what: str = "",
                 path: str = "") -> list[int]:
    """Blocks per pipeline stage. ``weights`` None: an even split (Megatron-LM's), which must
    divide ``n``. Else torchtitan's (torchtitan/distributed/pipeline_parallel.py,
    generate_llm_fqn_per_model_part): the embedding counts as ``weights[0]`` blocks on the first
    stage and the final norm and head as ``weights[1]`` on the last; the ``n + w0 + w1``
    effective blocks are spread evenly, the first ``(n + w0 + w1) mod stages`` stages taking one
    more; each stage needs at least one effective block and neither weight may exceed the even
    share."""
    where = f" ({path})" if path else ""
    if weights is None:
        if n % stages:
            raise FootprintError(f"{what or f'{stages} stages'} do not divide the model's {n} blocks{where}; "
                                 "--pp-first-stage-less-layers and --pp-last-stage-less-layers split them unevenly "
                                 "as torchtitan does")
        return [n // stages] * stages
    first, last = weights
    effective = n + first + last
    each, extra = divmod(effective, stages)
    if each == 0 or first > each or last > each:
        raise FootprintError(f"{what or f'{stages} stages'}: torchtitan's split of {n} blocks{where} with the "
                             f"embedding as {first} and the head as {last} leaves a stage empty or over-weighted "
                             f"({effective} effective blocks, {each} a stage)")
    sizes = [each + (s < extra) for s in range(stages)]
    sizes[0] -= first
    sizes[-1] -= last  # the sizes now add up to n
    return sizes


# --------------------------------------------------------------------------- pipeline schedules

def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """The pipeline's idle share of a step. Narayanan et al. 2021 ("Efficient Large-Scale
    Language Model Training on GPU Clusters Using Megatron-LM", SC'21, sections 2.2.1-2.2.2):
    the bubble takes (p-1) x (t_f + t_b) against the ideal m x (t_f + t_b) for GPipe and 1F1B,
    (p-1)/v of it with v interleaved chunks per rank: (p-1)/(v m) of the ideal time. Of the
    whole step that is ((p-1)/v) / (m + (p-1)/v); for v = 1, (p-1)/(m+p-1)."""
    idle = (p - 1) / v
    return idle / (m + idle)


def in_flight(schedule: str, p: int, rank: int, m: int, v: int = 1) -> float:
    """Micro-batches whose activations pipeline rank ``rank`` (0: the first stage) holds at
    once, in units of one micro-batch through all of the rank's layers. GPipe: all m
    forwards run before the backwards. 1F1B (PipeDream-Flush): p - rank - 1 warm-up forwards,
    then one more before each backward, so p - rank. Interleaved 1F1B, as Megatron-LM
    schedules it (megatron/core/pipeline_parallel/schedules.py): (p - rank - 1) x 2 +
    (v - 1) x p warm-up forwards of one chunk (1/v of the rank's layers) each, plus the one
    before the first backward; never more than the m x v there are."""
    if schedule == "gpipe":
        return float(m)
    if schedule == "1f1b" or v == 1:
        return float(min(p - rank, m))
    chunks = min((p - rank - 1) * 2 + (v - 1) * p + 1, m * v)
    return chunks / v


def blocks_of_trace(trace: Trace) -> tuple[str, int]:
    """The trace's longest run of repeated blocks (as :func:`repeated_blocks` finds it in a
    model): its path and length."""
    best = ("", 0)
    for mod in trace.modules:
        if mod.type == "ModuleList" and "expert" not in mod.path.rsplit(".", 1)[-1]:
            pre = mod.path + "."
            n = sum(1 for x in trace.modules if x.path.startswith(pre) and "." not in x.path[len(pre):])
            if n > best[1]:
                best = (mod.path, n)
    return best


@dataclass
class StageMap:
    """Which of the ``p x v`` chunks (chunk c on pipeline rank c mod p, as Megatron-LM lays out
    virtual stages) each event, module and parameter of a trace belongs to."""

    p: int
    v: int
    blocks: str
    per_chunk: int  # blocks in the first chunk (at least 1): its last one's output crosses to the next stage
    events: list[int]  # chunk of each event; -1: the optimizer step (shared by parameter)
    modules: dict[str, int]

    def rank(self, chunk: int) -> int:
        return chunk % self.p

    def chunk_of_module(self, module: str) -> int:
        return self.modules.get(module, 0)


def stage_map(trace: Trace, p: int, v: int = 1) -> StageMap:
    """Split ``trace`` into ``p x v`` chunks of its repeated blocks; what runs before the first
    block in the forward (embeddings) goes with the first chunk, what runs after the last
    (final norm, head, loss) with the last; in the backward the other way round. Worked out
    once per trace and split."""
    return once(trace, ("stage map", p, v), lambda: _stage_map(trace, p, v))


def _stage_map(trace: Trace, p: int, v: int) -> StageMap:
    path, n = once(trace, "repeated blocks", lambda: blocks_of_trace(trace))
    chunks = p * v
    if not n:
        raise FootprintError(f"--pp {p} x --vpp {v} = {chunks} stages: found no run of repeated blocks")
    weights = trace.settings.get("stage_weights")
    sizes = split_blocks(n, chunks, tuple(weights) if weights else None, f"--pp {p} x --vpp {v} = {chunks} stages")
    chunk_list = [c for c, k in enumerate(sizes) for _ in range(k)]
    chunk_of_block = torch.tensor(chunk_list, dtype=torch.int64)
    pre = path + "."

    block, phase, first = once(trace, ("event blocks", path, n), lambda: _event_blocks(trace, pre, n))
    last = chunks - 1
    # each event's chunk: its block's in the forward and backward; before the phase's first block
    # op the embeddings' end (forward: the first chunk; backward: the last), after its last one
    # the other end; between two, the chunk of the op before; the loss the last chunk's; the
    # optimizer step none (-1)
    fill = torch.full_like(block, -2)
    mine = block >= 0
    fill[mine] = chunk_of_block[block[mine]]
    for code, ends in ((0, (0, last)), (1, (last, 0))):
        at = (phase == code).nonzero().flatten()
        own = at[mine[at]]
        lo, hi = (int(own[0]), int(own[-1])) if own.numel() else (len(block), -1)
        fill[at[(at < lo) & ~mine[at]]] = ends[0]
        fill[at[(at > hi) & ~mine[at]]] = ends[1]
    fill[phase == 3] = last
    fill[phase == 2] = -1
    known = fill >= 0  # the others (-2) take the chunk of the last event before them with one (0 before any)
    since = torch.where(known, torch.arange(len(fill)), -1).cummax(0).values
    prev = torch.cat([torch.zeros(1, dtype=torch.int64), fill.clamp(min=0)])[since + 1]
    events: list[int] = torch.where(fill == -2, prev, fill).tolist()
    modules: dict[str, int] = {m: events[i] for m, i in first.items()}
    in_blocks = once(trace, ("modules' blocks", path, n),
                     lambda: [(mod.path, b) for mod in trace.modules if (b := _block_index(mod.path, pre, n)) >= 0])
    modules.update((m, chunk_list[b]) for m, b in in_blocks)
    return StageMap(p, v, path, max(sizes[0], 1), events, modules)


def _block_index(module: str, pre: str, n: int) -> int:
    """The index of the block (``pre`` + index, of ``n``) that ``module`` is in; -1: none."""
    head = module[len(pre):].split(".", 1)[0] if module.startswith(pre) else ""
    return int(head) if head.isdigit() and int(head) < n else -1


def _event_blocks(trace: Trace, pre: str, n: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, int]]:
    """Per event: the index of the block (``pre`` + index) its module is in (-1: none, or not the
    forward or backward) and its phase (0 forward, 1 backward, 2 the optimizer step, 3 the
    loss and others); and each module's first forward event."""
    index: dict[str, int] = {}  # by module path: a model has far fewer than events

    def of(module: str) -> int:
        if module not in index:
            index[module] = _block_index(module, pre, n)
        return index[module]

    codes = {"forward": 0, "backward": 1, "optimizer": 2}
    phase = [codes.get(e.phase, 3) for e in trace.events]
    block = [of(e.module) if c < 2 else -1 for e, c in zip(trace.events, phase)]
    first: dict[str, int] = {}
    for i, e in enumerate(trace.events):
        if e.phase == "forward" and e.module not in first:
            first[e.module] = i
    return torch.tensor(block, dtype=torch.int64), torch.tensor(phase, dtype=torch.int8), first

