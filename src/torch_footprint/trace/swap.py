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

    # a module may keep a parameter of another as a plain attribute (a tied weight): it
    # follows the swap (the trace's ModelState puts every attribute back afterwards)
    for mod in model.modules():
        for name, value in list(vars(mod).items()):
            if isinstance(value, torch.Tensor) and id(value) in memo and not name.startswith("_"):
                saved.append((vars(mod), name, value))
                vars(mod)[name] = memo[id(value)]

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


def materialize(model: nn.Module, device: str) -> tuple[Callable[[], None], bool]:
    """Give the model real storage (for the real fallback): copies of its own values where it
    has any (a model on a real device), else small random values for the parameters and
    zeros for the buffers (a batch norm's running variance ones); tensors kept as plain
    attributes are copied too (zeros for meta ones), so a forward that writes into them
    leaves the model's alone.
    Returns the function that puts the originals back, and whether every parameter kept
    its own values."""
    gen = torch.Generator().manual_seed(0)
    own = all(p.device.type != "meta" for p in model.parameters())
    fresh_var = {id(m) for m in model.modules() if isinstance(m, nn.modules.batchnorm._NormBase)
                 and m.running_var is not None and m.running_var.device.type == "meta"}

    def make(t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "meta":
            return t.detach().to(device, copy=True)
        out = torch.empty(t.shape, dtype=t.dtype, device=device)
        if out.is_floating_point():
            out.normal_(0.0, 0.02, generator=gen)
        else:
            out.zero_()
        return out

    restore = swap_tensors(model, make)
    copies: dict[int, torch.Tensor] = {}

    def copied(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter):
            if id(v) not in copies:  # a meta tensor (a table a constructor made on meta): zeros
                copies[id(v)] = (torch.zeros(v.shape, dtype=v.dtype, device=device) if v.device.type == "meta"
                                 else v.detach().to(device, copy=True))
            return copies[id(v)]
        return v

    for mod in model.modules():
        if id(mod) in fresh_var:
            mod.running_var.fill_(1.0)
        for name, value in list(vars(mod).items()):
            if name.startswith("_"):
                continue
            if isinstance(value, torch.Tensor):
                vars(mod)[name] = copied(value)
            elif type(value) in (list, tuple) and any(isinstance(v, torch.Tensor) for v in value):
                vars(mod)[name] = type(value)(copied(v) for v in value)
    return restore, own
