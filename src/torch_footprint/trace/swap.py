"""Swap a model's parameters and buffers for tensors of another kind for one run, and back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..dtypes import name_of
from .records import TensorInfo


def swap_tensors(model: nn.Module, make: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
    """Replace every parameter and buffer with ``make(t)``, keeping shared ones shared.

    Returns a function that puts the original tensors back."""
    memo: dict[int, torch.Tensor] = {}
    saved: list[tuple[dict[str, Any], str, Any]] = []
    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                memo[id(p)] = nn.Parameter(make(p), requires_grad=p.requires_grad)
            saved.append((mod._parameters, name, p))
            mod._parameters[name] = memo[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is None:
                continue
            if id(b) not in memo:
                memo[id(b)] = make(b)
            saved.append((mod._buffers, name, b))
            mod._buffers[name] = memo[id(b)]

    # tensors a module keeps as plain attributes (caches such as torchvision's anchors) may be
    # replaced during the run by tensors of the run's kind: put those back too
    for mod in model.modules():
        for name, value in list(vars(mod).items()):
            if name.startswith("_"):
                continue
            if isinstance(value, torch.Tensor) or (
                    isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value)):
                saved.append((vars(mod), name, value))

    def restore() -> None:
        for table, name, original in saved:
            table[name] = original

    return restore


def param_infos(model: nn.Module) -> tuple[list[TensorInfo], list[TensorInfo]]:
    params = [
        TensorInfo(name=n, module=n.rpartition(".")[0], shape=list(p.shape), dtype=name_of(p.dtype),
                   numel=p.numel(), nbytes=p.numel() * p.element_size(), trainable=p.requires_grad)
        for n, p in model.named_parameters()
    ]
    buffers = [
        TensorInfo(name=n, module=n.rpartition(".")[0], shape=list(b.shape), dtype=name_of(b.dtype),
                   numel=b.numel(), nbytes=b.numel() * b.element_size())
        for n, b in model.named_buffers()
    ]
    return params, buffers


def materialize(model: nn.Module, device: str) -> Callable[[], None]:
    """Give the model real storage (for the real fallback): parameters get small random
    values; buffers keep their own values where they have any (buffers are state that a
    forward may read: a convolution's stride kept as an int64 buffer, say), else zeros."""
    gen = torch.Generator().manual_seed(0)
    buffers = {id(b) for b in model.buffers()}

    def make(t: torch.Tensor) -> torch.Tensor:
        if id(t) in buffers and t.device.type != "meta":
            return t.detach().to(device, copy=True)
        out = torch.empty(t.shape, dtype=t.dtype, device=device)
        if out.is_floating_point():
            out.normal_(0.0, 0.02, generator=gen)
        else:
            out.zero_()
        return out

    restore = swap_tensors(model, make)
    for mod in model.modules():
        if isinstance(mod, nn.modules.batchnorm._NormBase) and mod.running_var is not None:
            mod.running_var.fill_(1.0)
    return restore
