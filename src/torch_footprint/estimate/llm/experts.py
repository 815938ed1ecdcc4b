"""Experts that loop over the experts a batch routes to (``nonzero`` on the routing mask: a
shape fake tensors cannot know), run for the trace as one grouped matrix product per projection,
as transformers runs the experts it declares with ``use_experts_implementation`` (its default
``grouped_mm``: tokens sorted by expert, ``torch._grouped_mm`` over offsets, every expert's
weights passed whole) and as serving engines run a fused mixture of experts.

DBRX (transformers' ``DbrxExperts``: the experts' w1, v1 and w2 stored as one
[experts x ffn, hidden] matrix each) is the model that needs it; the arithmetic is its own
forward's (gate = x w1^T, up = x v1^T, act(gate) * up, then w2), per token and expert."""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import nn

_LOOPED = ("DbrxExperts",)


def _grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """(S, in) by each expert's (in, out) over the rows its offsets give."""
    return torch._grouped_mm(x, w, offs=offs)


def _dbrx_forward(self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                  top_k_weights: torch.Tensor) -> torch.Tensor:
    batch = hidden_states.shape[0]
    h = hidden_states.reshape(-1, self.hidden_size)
    k = top_k_index.size(-1)
    experts = self.num_experts
    ids, perm = torch.sort(top_k_index.reshape(-1))
    x = h[perm // k]
    weights = top_k_weights.reshape(-1)[perm]
    counts = torch.histc(ids.float(), bins=experts, min=0, max=experts - 1)
    offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
    shape = (experts, self.ffn_hidden_size, self.hidden_size)
    mlp = self.mlp
    gate = _grouped_mm(x, mlp.w1.view(shape).transpose(1, 2), offs)
    up = _grouped_mm(x, mlp.v1.view(shape).transpose(1, 2), offs)
    down = _grouped_mm(mlp.activation_fn(gate) * up, mlp.w2.view(shape), offs)
    out = torch.zeros_like(h).index_add_(0, perm // k, down * weights[:, None].to(down.dtype))
    return out.view(batch, -1, self.hidden_size)


def group_experts(model: nn.Module) -> list[nn.Module]:
    """Give each looping experts module of ``model`` the grouped forward (an attribute of the
    instance: ``del module.forward`` restores the class's); returns the modules changed."""
    changed = []
    for module in model.modules():
        if type(module).__name__ in _LOOPED and "forward" not in vars(module):
            module.forward = types.MethodType(_dbrx_forward, module)  # type: ignore[method-assign]
            changed.append(module)
    return changed
