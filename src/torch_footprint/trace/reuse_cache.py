"""Repeated blocks that write a key/value cache (:mod:`.reuse`): the serving trace's prefill and
decode steps pass every layer the model's cache object, and each layer writes its own slot of it.

A call given a cache (a transformers ``Cache``: a ``layers`` list and an ``update`` method) is
replayed only where what it did to the cache is known and repeatable:

* its slot is the one ``layer_idx`` its modules hold (one value), and each read of a
  ``layer_idx`` attribute during the recorded call passed it straight to a ``.update(...)`` call
  as the layer index (checked on the source of the line that read it), the cache's ``update``
  being called as many times, with that index: the index chose the slot and nothing else;
* the cache was read for nothing but ``update`` outside ``update`` itself, and kept its own
  attributes and its list of layers; of its layers, only the slot's attributes changed;
* the slot's layer is keyed by its class and its attributes (tensors by shape, strides, dtype
  and storage size, plain values by value; anything else is not keyed), the cache by its class,
  its plain attributes and its count of layers;
* the slot's tensors it replaced were freed inside the call, and the replayed call's are held
  by as many references (of the tensor object and of its storage) as the recorded call's were,
  so they are freed at the same place.

The replay writes the slot's new attributes: tensors on storages the call made (under the
storage ids a full trace would give them) and plain values as recorded.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .blockkeys import SLOT, simple, tensor_key, traced_tensor


def is_cache(x: Any) -> bool:
    """A transformers-style cache object: a list of layers and an ``update`` method."""
    d = getattr(x, "__dict__", None)
    return d is not None and type(d.get("layers")) is list and callable(getattr(type(x), "update", None)) \
        and not isinstance(x, (nn.Module, torch.Tensor))


def cache_key(cache: Any) -> tuple[Any, ...] | None:
    """The cache's class, plain attributes (others by identity) and count of layers."""
    parts: list[Any] = [type(cache), len(cache.layers)]
    for k, v in sorted(cache.__dict__.items()):
        if k != "layers":
            parts.append((k, v) if simple(v) or isinstance(v, type) else (k, type(v), id(v)))
    return tuple(parts)


def slot_of(subs: list[tuple[str, nn.Module]]) -> int | None:
    """The one integer ``layer_idx`` the block's modules hold (None: none, or several)."""
    found = {m.__dict__[SLOT] for _, m in subs if type(m.__dict__.get(SLOT)) is int}
    return next(iter(found)) if len(found) == 1 else None


def _value_key(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        if traced_tensor(v):
            return ("t", tensor_key(v))
        if type(v) is not torch.Tensor or v.device.type != "cpu" or v.numel() > 64:
            return None
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():  # a small tensor of values (a window's length): keyed by them
            return ("r", tensor_key(v), tuple(v.flatten().tolist()))
    return ("v", type(v), v) if simple(v) else None


def slot_key(cache: Any, slot: int) -> tuple[Any, ...] | None:
    """What the slot's layer is before the call (None: not keyable, or no such layer)."""
    if not 0 <= slot < len(cache.layers):
        return None
    layer = cache.layers[slot]
    parts: list[Any] = [type(layer)]
    for k, v in sorted(layer.__dict__.items()):
        key = _value_key(v)
        if key is None:
            return None
        parts.append((k, key))
    try:
        hash(tuple(parts))
    except TypeError:  # a plain value that is not hashable (a dict): not keyed
        return None
    return tuple(parts)


def _refs(d: dict[str, Any], k: str) -> tuple[int, int]:
    """References to the tensor ``d[k]`` and to its storage (the same counts give the same free)."""
    return sys.getrefcount(d[k]), torch._C._storage_Use_Count(d[k].untyped_storage()._cdata)


def _snapshot(d: dict[str, Any], rec: Any) -> dict[str, Any]:
    """An object's attributes without holding its tensors: tensors by storage id, others as they are."""
    return {k: ("t", rec.uid_of(v), tuple(v.shape)) if isinstance(v, torch.Tensor) else ("o", v) for k, v in d.items()}


def _same(d: dict[str, Any], snap: dict[str, Any], rec: Any) -> bool:
    return d.keys() == snap.keys() and all(_snapshot({k: d[k]}, rec)[k] == snap[k] if snap[k][0] == "t"
                                           else d[k] is snap[k][1] for k in d)


@functools.lru_cache(maxsize=256)
def passed_to_update(code: Any, lasti: int) -> bool:
    """Whether the attribute read at instruction ``lasti`` of ``code`` is an argument of a
    ``.update(...)`` call in the place of its layer index (the third positional argument, or
    ``layer_idx=``), by the source of the function."""
    try:
        line, _, col, end = list(code.co_positions())[lasti // 2]
        lines, start = inspect.getsourcelines(code)
    except (OSError, TypeError, IndexError):
        return False
    indent = len(lines[0]) - len(lines[0].lstrip())
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return False

    def here(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == SLOT and node.lineno + start - 1 == line
                and node.col_offset + indent == col and node.end_col_offset is not None
                and node.end_col_offset + indent == end)

    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
               and ((len(node.args) > 2 and here(node.args[2])) or any(k.arg == SLOT and here(k.value)
                                                                      for k in node.keywords))
               for node in ast.walk(tree))


@dataclass
class CacheCall:
    """A recorded call's dealings with the cache: what it found in the slot and what it left there."""

    cache: Any
    slot: int
    before: dict[str, Any] = field(default_factory=dict)  # the slot's attributes (tensors by storage id)
    held: dict[str, tuple[int, int]] = field(default_factory=dict)  # references to the slot's tensors it made
    old_uids: dict[int, str] = field(default_factory=dict)  # storage id -> the slot attribute it was held as
    updates: list[Any] = field(default_factory=list)  # the layer index of each update call
    foreign: set[str] = field(default_factory=set)  # cache attributes read outside update
    reads: list[tuple[Any, int]] = field(default_factory=list)  # (code, instruction) of each layer_idx read
    after: dict[str, tuple[str, Any]] = field(default_factory=dict)  # changed attribute -> ("v", value) / ("t", ...)
    frees: dict[str, int] = field(default_factory=dict)  # slot attribute -> index in the call's frees

    def start(self, rec: Any) -> None:
        d = self.cache.layers[self.slot].__dict__
        self.before = _snapshot(d, rec)
        self._others = [_snapshot(la.__dict__, rec) for la in self.cache.layers]
        self._own = _snapshot(self.cache.__dict__, rec)
        self._layers = [id(la) for la in self.cache.layers]
        for k in list(d):  # (no other reference to the tensors held meanwhile: they are counted)
            if isinstance(d[k], torch.Tensor) and rec.uid_of(d[k]):  # a storage this trace made: its free shows
                self.held[k] = _refs(d, k)
                self.old_uids[rec.uid_of(d[k])] = k
        self._cls = type(self.cache)
        self.cache.__class__ = _watching(self._cls, self)

    def stop(self) -> None:
        if type(self.cache) is not self._cls:
            self.cache.__class__ = self._cls

    def accounted(self, rec: Any, uid0: int) -> bool:
        """Whether everything the call did to the cache is known (see the module's docstring);
        fills ``after`` with the slot's new attributes."""
        cache = self.cache
        if (self.foreign - {"update", "__class__"} or self.updates != [self.slot] * len(self.updates)
                or len(self.reads) != len(self.updates) or not all(passed_to_update(c, i) for c, i in self.reads)
                or [id(la) for la in cache.layers] != self._layers or not _same(cache.__dict__, self._own, rec)):
            return False
        if any(i != self.slot and not _same(la.__dict__, self._others[i], rec) for i, la in enumerate(cache.layers)):
            return False
        d = cache.layers[self.slot].__dict__
        if not self.before.keys() <= d.keys():
            return False
        for k, v in d.items():
            if k in self.before and _same({k: v}, {k: self.before[k]}, rec):
                continue
            if isinstance(v, torch.Tensor):
                uid = rec.uid_of(v)
                if not traced_tensor(v) or uid is None or uid <= uid0:
                    return False  # a slot tensor the call did not make
                self.after[k] = ("t", (uid - uid0, tensor_key(v)))
            elif simple(v):
                self.after[k] = ("v", v)
            else:
                return False
        return True

    def kept(self, rec: Any) -> set[int | None]:
        """Storage ids the slot now holds (made by the call, kept by the cache)."""
        return {rec.uid_of(v) for k, v in self.cache.layers[self.slot].__dict__.items()
                if k in self.after and isinstance(v, torch.Tensor)}


def replayable(done: CacheCall, cache: Any, slot: int, rec: Any) -> bool:
    """Whether the slot's tensors about to be replaced are held as the recorded call's were (those
    this trace made, whose frees it records; the others, made before it, as the recorded call's)."""
    d = cache.layers[slot].__dict__
    keys = [k for k in d if isinstance(d[k], torch.Tensor)]  # (keys only: a reference held here would count)
    return all((bool(rec.uid_of(d[k])) and _refs(d, k) == done.held[k]) if k in done.held else not rec.uid_of(d[k])
               for k in keys)


def _watching(cls: type, call: CacheCall) -> type:
    """A subclass of the cache's class noting the attributes read outside ``update`` and each
    ``update``'s layer index."""
    get = cls.__getattribute__
    update = cls.update  # type: ignore[attr-defined]
    depth = [0]

    def __getattribute__(self: Any, name: str) -> Any:
        if not depth[0]:
            call.foreign.add(name)
        return get(self, name)

    def watched_update(self: Any, *args: Any, **kwargs: Any) -> Any:
        call.updates.append(args[2] if len(args) > 2 else kwargs.get(SLOT))
        depth[0] += 1
        try:
            return update(self, *args, **kwargs)
        finally:
            depth[0] -= 1

    return type(cls.__name__, (cls,), {"__getattribute__": __getattribute__, "update": watched_update,
                                       "__module__": cls.__module__, "__qualname__": cls.__qualname__})


def write_slot(done: CacheCall, leaves: list[Any], slot: int, rec: Any, shift: int, made: dict[int, torch.Tensor],
               mode: Any, freed: set[str]) -> dict[str, int]:
    """Replay the recorded call's writes to the cache: the slot's new attributes (tensors on the
    storages the call made, ``made`` by relative id); the slot's tensors the recorded call freed
    (``freed``) leave the recorder's live table here, their frees being replayed where they
    fell. Returns the storage ids of those freed tensors, by attribute."""
    from torch.utils._python_dispatch import _disable_current_modes

    from .blockkeys import tensor_like

    cache = next(x for x in leaves if is_cache(x))
    d = cache.layers[slot].__dict__
    olds = {k: rec.uid_of(d[k]) or 0 for k in freed}
    for k in freed:
        rec.live.pop(d[k].untyped_storage()._cdata, None)
    with _disable_current_modes():
        for k, (kind, val) in done.after.items():
            if kind == "v":
                d[k] = val
                continue
            rel, key = val
            t = tensor_like(key, made[rel].untyped_storage() if rel in made else None, mode)
            if rel not in made:
                made[rel] = t
                rec.adopt(t, shift + rel)
            d[k] = t
    return olds
