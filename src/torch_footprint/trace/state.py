"""A model's state before a traced run, put back exactly afterwards.

A forward may change its module: a detection head caches anchors, strides and the input
shape in attributes it makes on its first call (Ultralytics' Detect, torchvision's anchor
generator), a lazy module becomes another class, a module counts its calls. Under the trace
those caches hold meta or fake tensors, and a model that keeps them fails its next real
forward. So the trace takes a :class:`ModelState` before anything runs and restores it after:
per module a shallow copy of ``__dict__`` (attributes of every kind, the training flag, the
parameter, buffer, submodule and hook tables) and of the plain containers in it (dicts,
lists and sets: the tables, and caches that are filled in place), the module's class, each
parameter's and buffer's ``requires_grad`` and ``grad``, and the global random generators
(torch's CPU generator and CUDA's once initialised, Python's ``random`` and NumPy's where
imported). Restoring puts back the very objects that were there (a hook handle keeps its
table) and removes attributes the run made. Taking it costs a dictionary copy per module.
"""

from __future__ import annotations

import random
import sys
from collections import OrderedDict, defaultdict
from typing import Any

import torch
from torch import nn

_CONTAINERS = (dict, OrderedDict, defaultdict, list, set)


def _copy(value: Any) -> Any:
    return list(value) if type(value) is list else (set(value) if type(value) is set else value.copy())


def _refill(target: Any, saved: Any) -> None:
    if type(target) is list:
        if len(target) != len(saved) or any(a is not b for a, b in zip(target, saved)):
            target[:] = saved
        return
    target.clear()
    target.update(saved)


class ModelState:
    """Everything of a module tree that a run may change (see the module's docstring)."""

    def __init__(self, model: nn.Module) -> None:
        self.modules: list[tuple[nn.Module, type, dict[str, Any]]] = []
        self.filled: list[tuple[Any, Any]] = []  # containers with contents, and a copy of them
        self.empty: list[Any] = []  # containers that were empty (most hook tables)
        self.tensors: list[tuple[torch.Tensor, bool, torch.Tensor | None]] = []
        seen: set[int] = set()
        for mod in model.modules():
            attrs = mod.__dict__
            for v in attrs.values():
                if type(v) in _CONTAINERS:
                    if v:
                        self.filled.append((v, _copy(v)))
                    else:
                        self.empty.append(v)
            self.modules.append((mod, type(mod), attrs.copy()))
            for table in (mod._parameters, mod._buffers):
                for t in table.values():
                    if t is not None and id(t) not in seen:
                        seen.add(id(t))
                        self.tensors.append((t, t.requires_grad, t.grad))
        self.rng = _rng_state()
        self.clean = True  # nothing ran since it was taken or restored

    def restore(self) -> None:
        """Put the model (and the random generators) back as they were when this was taken."""
        for mod, cls, saved in self.modules:
            if type(mod) is not cls:  # a lazy module that became its class-to-be
                mod.__class__ = cls
            attrs = mod.__dict__
            if attrs.keys() != saved.keys():
                for name in [n for n in attrs if n not in saved]:
                    del attrs[name]
            attrs.update(saved)
        for target, contents in self.filled:
            _refill(target, contents)
        for target in self.empty:
            if target:
                target.clear()
        for t, requires_grad, grad in self.tensors:
            if t.grad is not grad:
                t.grad = grad
            if t.requires_grad != requires_grad:
                t.requires_grad_(requires_grad)
        _set_rng_state(self.rng)
        self.clean = True


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.random.default_generator.get_state(), "random": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    np = sys.modules.get("numpy")
    if np is not None:
        state["numpy"] = np.random.get_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.random.default_generator.set_state(state["torch"])
    random.setstate(state["random"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        sys.modules["numpy"].random.set_state(state["numpy"])
