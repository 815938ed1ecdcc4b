"""Is a model as it was? Compare a module tree with a copy of it that was never profiled.

Used by the tests (tests/test_model_state.py, the YOLO and diffusers tests) and by the
model-zoo sweep's state column (benchmarks/model_zoo_sweep.py). Written apart from the
code under test (torch_footprint.trace.state): it walks both trees and compares what it
finds, attribute by attribute, and the two models' outputs on one input.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
          "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs",
          "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
          "_load_state_dict_post_hooks")


def tensor_differs(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """Why two tensors differ (class, shape, dtype, device, requires_grad, values), or None."""
    if type(a) is not type(b):
        return f"{type(a).__name__} vs {type(b).__name__}"
    for what in ("shape", "dtype", "device", "requires_grad"):
        if getattr(a, what) != getattr(b, what):
            return f"{what} {getattr(a, what)} vs {getattr(b, what)}"
    if a.device.type == "meta":
        return None
    if a.layout != torch.strided or b.layout != torch.strided:
        a, b = a.to_dense(), b.to_dense()
    x, y = a.detach(), b.detach()
    if x.dtype.is_floating_point or x.dtype.is_complex:
        same = bool(torch.equal(x, y) or torch.equal(x.isnan(), y.isnan()) and torch.equal(
            torch.nan_to_num(x, nan=0.0), torch.nan_to_num(y, nan=0.0)))
    else:
        same = bool(torch.equal(x, y))
    return None if same else "values differ"


def value_differs(a: Any, b: Any, depth: int = 0) -> str | None:
    """Why two attribute values differ, or None. Tensors by :func:`tensor_differs`; containers
    item by item; modules by identity of place (compared as modules elsewhere); other
    objects by their type and, two levels deep, their attributes."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{type(a).__name__} vs {type(b).__name__}"
        why = tensor_differs(a, b)
        if why is None and isinstance(a, nn.Parameter) and (a.grad is None) != (b.grad is None):
            why = f"grad {a.grad is None} vs {b.grad is None}"
        return why
    if type(a) is not type(b):
        return f"{type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, nn.Module):
        return None
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            why = value_differs(x, y, depth)
            if why:
                return f"[{i}] {why}"
        return None
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"keys {sorted(map(str, a))[:8]} vs {sorted(map(str, b))[:8]}"
        for k in a:
            why = value_differs(a[k], b[k], depth)
            if why:
                return f"[{k!r}] {why}"
        return None
    if isinstance(a, (set, frozenset)):
        return None if a == b else f"{sorted(map(str, a))[:8]} vs {sorted(map(str, b))[:8]}"
    if isinstance(a, float):
        return None if a == b or (math.isnan(a) and math.isnan(b)) else f"{a} vs {b}"
    if isinstance(a, (bool, int, str, bytes, complex, type(None), torch.dtype, torch.device, torch.Size)):
        return None if a == b else f"{a!r} vs {b!r}"
    if callable(getattr(a, "__func__", None)):  # a bound method kept as an attribute (m.forward = m.forward_fuse)
        return None if a.__func__ is b.__func__ else f"method {a.__func__.__name__} vs {b.__func__.__name__}"
    if depth < 2 and hasattr(a, "__dict__") and not isinstance(a, type) and not callable(a):
        return value_differs(vars(a), vars(b), depth + 1)
    return None


def state_differences(model: nn.Module, reference: nn.Module) -> list[str]:
    """Every difference between a module tree and a copy of it: the modules (paths and
    classes), and per module its attributes (every kind, including the training flag and
    any made since the copy), parameters, buffers (values, dtype, device, requires_grad,
    grad) and hooks. An empty list: the same."""
    out: list[str] = []
    mods, refs = dict(model.named_modules(remove_duplicate=False)), dict(reference.named_modules(
        remove_duplicate=False))
    if list(mods) != list(refs):
        out.append(f"modules: {sorted(set(mods) ^ set(refs))[:8]} differ")
    for path, mod in mods.items():
        ref = refs.get(path)
        if ref is None:
            continue
        where = path or "<root>"
        if type(mod) is not type(ref):
            out.append(f"{where}: class {type(mod).__name__} vs {type(ref).__name__}")
            continue
        a, b = vars(mod), vars(ref)
        extra, missing = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        if extra:
            out.append(f"{where}: attributes made since: {extra}")
        if missing:
            out.append(f"{where}: attributes gone: {missing}")
        for name in a.keys() & b.keys():
            if name in _HOOKS:
                if list(a[name]) != list(b[name]):
                    out.append(f"{where}.{name}: {len(a[name])} vs {len(b[name])} hooks")
                continue
            if name == "_modules":
                if list(a[name]) != list(b[name]):
                    out.append(f"{where}: children {list(a[name])} vs {list(b[name])}")
                continue
            why = value_differs(a[name], b[name])
            if why:
                out.append(f"{where}.{name}: {why}")
    return out


def outputs_differ(model: nn.Module, reference: nn.Module, call: Callable[[nn.Module], Any]) -> str | None:
    """Whether the two models give different outputs for ``call(model)`` (the same seed before
    each, no gradients): None when every tensor of the outputs is the same."""
    def run(m: nn.Module) -> list[Any]:
        torch.manual_seed(0)
        with torch.no_grad():
            leaves, _ = tree_flatten(call(m))
        return leaves

    try:
        got = run(model)
    except Exception as e:  # noqa: BLE001 - the point: a profiled model that no longer runs
        return f"the model's forward fails: {type(e).__name__}: {' '.join(str(e).split())[:200]}"
    want = run(reference)
    if len(got) != len(want):
        return f"{len(got)} vs {len(want)} outputs"
    for i, (x, y) in enumerate(zip(got, want)):
        why = value_differs(x, y)
        if why:
            return f"output {i}: {why}"
    return None


def rng_state() -> tuple[Any, ...]:
    """The global random generators a run may draw from."""
    import random

    return torch.random.default_generator.get_state(), random.getstate()


def never_profiled(model: nn.Module) -> nn.Module:
    """The copy to compare with."""
    return copy.deepcopy(model)
