"""A submodule that left its input as it was: its own attributes may differ in a replayed call.

torchvision's ConvNeXt, Swin, EfficientNet and MaxViT blocks (and timm's, given a drop-path
rate) end in a drop path whose rate grows with depth (``StochasticDepth.p``, ``DropPath.drop_prob``).
Outside training it returns its input as it is, but its forward reads the rate, so keyed by the
attributes a forward reads (:mod:`.reuse`) no two such blocks would be equal.

A leaf submodule is a pass-through of a recorded call where, in that call, each time it was called
(Swin calls its drop path twice) it was given one plain meta tensor and nothing else and returned
that tensor itself, it ran no operator, and
its attributes were read by its own forward only (a parent that reads ``self.drop.p`` and
branches on it is not covered, and keeps its call keyed by the value). A later call whose only
differing attributes are a pass-through's is replayed when that submodule's forward, run alone
with the later call's attributes on a meta tensor like each recorded input, again returns the
tensor itself, runs no operator (the trace's modes are off while it runs, and a mode of its own
sees any that would) and changes none of its attributes. Anything else is traced as it is.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

Spec = tuple[tuple[int, ...], tuple[int, ...], torch.dtype, bool]


def spec_of(args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Spec | None:
    """The input's shape, stride, dtype and ``requires_grad`` where a module's call returned its
    one argument, a plain meta tensor, as it was (None otherwise)."""
    if kwargs or len(args) != 1 or output is not args[0] or type(output) is not torch.Tensor:
        return None
    if output.device.type != "meta" or output.storage_offset() != 0:
        return None
    return tuple(output.shape), output.stride(), output.dtype, output.requires_grad


def passes(through: list[tuple[str, Spec]], log: list[tuple[str, Any]], events: list[Any],
           unique: dict[int, tuple[str, nn.Module]], paths: dict[int, str],
           outer: set[tuple[int, str]]) -> dict[str, tuple[Spec, ...]]:
    """The recorded call's pass-through submodules, by their name in the block, with their inputs."""
    calls: dict[str, int] = {}
    for path, _ in log:
        calls[path] = calls.get(path, 0) + 1
    ran = {e.module for e in events}
    seen: dict[str, list[Spec]] = {}
    for path, spec in through:
        seen.setdefault(path, []).append(spec)
    read_outside = {i for i, _ in outer}
    found: dict[str, tuple[Spec, ...]] = {}
    for i, (rel, m) in unique.items():
        path = paths.get(i, "?")
        if (rel and not m._modules and path in seen and calls.get(path) == len(seen[path]) and path not in ran
                and i not in read_outside):
            found[rel] = tuple(dict.fromkeys(seen[path]))
    return found


class _Ops(TorchDispatchMode):
    """Notes whether any operator runs."""

    def __init__(self) -> None:
        super().__init__()
        self.ran = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ran = True
        return func(*args, **(kwargs or {}))


def still_passes(m: nn.Module, specs: tuple[Spec, ...], known: dict[Any, bool]) -> bool:
    """Whether ``m``'s forward, with its attributes as they are now, returns a meta tensor of each
    recorded input's kind as it is, running no operator and changing none of its attributes
    (``known``: the answers already found in this run, by module and input)."""
    return all(_passes(m, spec, known) for spec in specs)


def _passes(m: nn.Module, spec: Spec, known: dict[Any, bool]) -> bool:
    key = (id(m), spec)
    if key not in known:
        shape, stride, dtype, grad = spec
        before = dict(m.__dict__)
        with _disable_current_modes():
            x = torch.empty_strided(shape, stride, dtype=dtype, device="meta").requires_grad_(grad)
            ops = _Ops()
            try:
                with ops:
                    out = m.forward(x)
            except Exception:  # noqa: BLE001 - what fails here is left to the full trace
                out = None
        now = m.__dict__
        known[key] = (out is x and not ops.ran and now.keys() == before.keys()
                      and all(now[k] is v for k, v in before.items()))
    return known[key]
