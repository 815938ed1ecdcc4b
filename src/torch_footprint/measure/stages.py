"""Pipeline stages of a decoder-only language model for ``footprint bench --nproc N --pp N``,
cut by hand as torchtitan cuts Llama: each stage keeps its contiguous run of the repeated
blocks, the first also the embeddings, the last also the final norm and the output head.
Chunk ``c`` of the ``p x v`` chunks sits on pipeline rank ``c mod p`` (Megatron-LM's and
torch's ScheduleInterleaved1F1B's layout), the cut that
:func:`torch_footprint.estimate.layouts.pipeline.stage_map` prices.

Supported: Hugging Face models laid out as Llama (``model.embed_tokens``, ``model.layers``,
``model.rotary_emb``, ``model.norm``, ``lm_head``) and as GPT-2 (``transformer.wte``,
``transformer.wpe``, ``transformer.h``, ``transformer.ln_f``, ``lm_head``). A tied head
(GPT-2's) gets a weight of its own on the last stage, as a pipeline must: its first and last
stages sit on different ranks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..errors import FootprintError
from ..trace.step import cross_entropy_of

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved-1f1b": "ScheduleInterleaved1F1B"}


class Stage(nn.Module):
    """One chunk of the model: its blocks, with the embeddings on the first chunk and the final
    norm and head on the last; the forward takes token ids (first) or hidden states."""

    def __init__(self, kind: str, parts: dict[str, nn.Module | None], blocks: list[nn.Module]) -> None:
        super().__init__()
        self.kind = kind
        self.embed = parts.get("embed")
        self.pos = parts.get("pos")
        self.rotary = parts.get("rotary")
        self.layers = nn.ModuleList(blocks)
        self.norm = parts.get("norm")
        self.head = parts.get("head")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
        if self.embed is not None:
            h = self.embed(x)
            if self.pos is not None:
                h = h + self.pos(positions)
        if self.kind == "llama":
            assert self.rotary is not None
            pe = self.rotary(h, position_ids=positions)
            for layer in self.layers:
                h = layer(h, attention_mask=None, position_embeddings=pe, position_ids=positions, use_cache=False)
        else:
            for layer in self.layers:
                h = layer(h, attention_mask=None, use_cache=False)
        if self.head is not None:
            assert self.norm is not None
            h = self.head(self.norm(h))
        return h


def _layout(model: nn.Module) -> tuple[str, nn.Module, str]:
    inner = getattr(model, "model", None)
    if inner is not None and hasattr(inner, "embed_tokens") and hasattr(inner, "layers") and hasattr(model, "lm_head"):
        return "llama", inner, "layers"
    inner = getattr(model, "transformer", None)
    if inner is not None and hasattr(inner, "wte") and hasattr(inner, "h") and hasattr(model, "lm_head"):
        return "gpt2", inner, "h"
    raise FootprintError(f"bench --pp cuts decoder-only language models laid out as Llama or GPT-2; "
                         f"{type(model).__name__} is neither")


def build_stages(model: nn.Module, rank: int, pp: int, vpp: int) -> list[tuple[int, Stage]]:
    """This pipeline rank's chunks of ``model``: (stage index, module) for chunks ``rank``,
    ``rank + pp``, ... The blocks other ranks hold are dropped from this rank."""
    kind, inner, attr = _layout(model)
    blocks = list(getattr(inner, attr))
    chunks = pp * vpp
    if len(blocks) % chunks:
        raise FootprintError(f"--pp {pp} x --vpp {vpp} = {chunks} stages do not divide the model's {len(blocks)} "
                             "blocks")
    per = len(blocks) // chunks
    out = []
    for c in range(rank, chunks, pp):
        parts: dict[str, Any] = {"rotary": getattr(inner, "rotary_emb", None)}
        if c == 0:
            parts.update(embed=getattr(inner, "embed_tokens", None) or inner.wte, pos=getattr(inner, "wpe", None))
        if c == chunks - 1:
            head: nn.Linear = model.lm_head  # type: ignore[assignment]
            embed = getattr(inner, "embed_tokens", None) or inner.wte
            if head.weight is embed.weight:
                head.weight = nn.Parameter(head.weight.detach().clone())  # untied: the embedding is on rank 0
            parts.update(norm=getattr(inner, "norm", None) or getattr(inner, "ln_f", None), head=head)
        out.append((c, Stage(kind, parts, blocks[c * per:(c + 1) * per])))
    return out


def schedule_for(name: str, stages: list[Any], microbatches: int) -> Any:
    """torch.distributed.pipelining's schedule ``name`` over this rank's ``PipelineStage``s; the
    loss is the cross entropy of the last stage's output (the logits), as a one-rank step's
    (:func:`~torch_footprint.trace.step.cross_entropy_of`)."""
    from torch.distributed import pipelining

    cls = getattr(pipelining, SCHEDULES[name])

    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return cross_entropy_of(out)

    if name == "interleaved-1f1b":
        return cls(stages, microbatches, loss_fn=loss, scale_grads=False)
    if len(stages) != 1:
        raise FootprintError(f"--pp-schedule {name} runs one stage per rank: --vpp needs interleaved-1f1b")
    return cls(stages[0], microbatches, loss_fn=loss, scale_grads=False)


class PipelineStep:
    """One rank's share of a pipelined training step: the schedule's forwards and backwards of
    every micro-batch (inputs fed on the first stage's rank, the loss on the last one's), then
    the optimizer over this rank's parameters. Outputs are not kept for the caller
    (``return_outputs=False``), as torchtitan runs it."""

    def __init__(self, model: nn.Module, rank: int, pp: int, vpp: int, schedule: str, microbatches: int,
                 device: str) -> None:
        from torch.distributed.pipelining import PipelineStage

        chunks = build_stages(model, rank, pp, vpp)
        self.modules = [m for _, m in chunks]
        self.first = any(c == 0 for c, _ in chunks)
        self.last = any(c == pp * vpp - 1 for c, _ in chunks)
        stages = [PipelineStage(m, c, pp * vpp, torch.device(device)) for c, m in chunks]
        self.schedule = schedule_for(schedule, stages, microbatches)

    def parameters(self) -> list[nn.Parameter]:
        return [q for m in self.modules for q in m.parameters()]

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        x = args[0] if args else next(iter(kwargs.values()))
        if self.first:
            self.schedule.step(x, target=torch.zeros(x.shape[0]) if self.last else None, return_outputs=False)
        elif self.last:
            self.schedule.step(target=torch.zeros(x.shape[0], device=x.device), return_outputs=False)
        else:
            self.schedule.step(return_outputs=False)
