"""What a repeated block's call is keyed and compared by (:mod:`.reuse`): plain values that are
provably equal, tensors by shape, stride, dtype and storage size, a module's kind before it
runs, and a subclass that notes which attributes a forward reads; and what a recorded call keeps."""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

from .records import OpEvent
from .reuse_through import still_passes

# nn.Module's own bookkeeping in every module's __dict__ (tables compared on their own)
INTERNAL = frozenset(nn.Module().__dict__)
HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
         "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called")
SIMPLE = (type(None), bool, int, float, complex, str, torch.dtype, torch.device, torch.memory_format, torch.layout)


def simple(v: Any) -> bool:
    """A plain value: None, a number, a string, a dtype or device, or a tuple or dict of them."""
    if isinstance(v, SIMPLE) or v is Ellipsis:
        return True
    if type(v) in (tuple, list, torch.Size, frozenset):
        return all(simple(x) for x in v)
    if type(v) is dict:
        return all(simple(k) and simple(x) for k, x in v.items())
    return False


def same_value(a: Any, b: Any, owners: tuple[Any, Any] | None = None) -> bool:
    """Whether two attribute values are provably the same to a forward: the same object, or
    equal plain values of one type (numbers, strings, tuples and dicts of them), partial
    applications of one function to such values. ``owners``: the modules that hold ``a`` and
    ``b``, which stand for each other in them (a forward of its own made per module:
    ``partial(f, module)``)."""
    if a is b or (owners is not None and a is owners[0] and b is owners[1]):
        return True
    if type(a) is functools.partial and type(b) is functools.partial:  # an activation made per module
        same = functools.partial(same_value, owners=owners)
        return (a.func is b.func and len(a.args) == len(b.args) and all(map(same, a.args, b.args))
                and a.keywords.keys() == b.keywords.keys()
                and all(same(a.keywords[k], b.keywords[k]) for k in a.keywords))
    if type(a) is not type(b) or not (simple(a) and simple(b)):
        return False
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an odd __eq__: not provably equal
        return False


def _hook_key(fn: Any) -> tuple[Any, ...] | None:
    """A hook this tool put on a module (sequence parallelism's gathers and reduce-scatters),
    by its code and what it closes over (plain values, or the same objects); None for any other
    hook, whose effects a replay could not stand for."""
    code = getattr(fn, "__code__", None)
    if code is None or not str(getattr(fn, "__module__", "")).startswith("torch_footprint."):
        return None
    cells = tuple(c.cell_contents for c in fn.__closure__ or ())
    return code, tuple(("v", c) if simple(c) else ("id", id(c)) for c in cells)


def hooks_key(m: nn.Module) -> tuple[Any, ...] | None:
    """A module's own hooks, in order, each by :func:`_hook_key` and the flags it was registered
    with (its handle's position in the flag tables); None where one is not this tool's."""
    out: list[Any] = []
    for name in ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks"):
        table = m.__dict__.get(name) or {}
        flags = [m.__dict__.get(f) or {} for f in (f"{name}_with_kwargs", "_forward_hooks_always_called")]
        for handle, fn in table.items():
            key = _hook_key(fn)
            if key is None:
                return None
            out.append((name, key, tuple(handle in f for f in flags)))
    return tuple(out)


def tensor_key(t: torch.Tensor) -> tuple[Any, ...]:
    return (type(t), tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad,
            t.untyped_storage().nbytes())


def traced_tensor(x: Any) -> bool:
    """A tensor a replay can stand for: a plain tensor on meta, or a fake tensor (a mixed-precision
    step's, whose autocast needs a device's tensors) of the mode it was made in."""
    if type(x) in (torch.Tensor, nn.Parameter):
        return x.device.type == "meta"
    return getattr(x, "fake_mode", None) is not None and type(x).__name__ == "FakeTensor"


def tensor_like(key: tuple[Any, ...], storage: Any, mode: Any) -> torch.Tensor:
    """A tensor of ``key``'s type, shape, strides, offset, dtype and device on ``storage`` (a new one
    of its size when None): a meta tensor, or a fake tensor of ``mode`` over one (call with the
    dispatch modes disabled)."""
    cls, shape, stride, offset, dtype, device, _, nbytes = key
    st = torch.UntypedStorage(nbytes, device="meta") if storage is None else storage
    t = torch.empty(0, dtype=dtype, device="meta").set_(st, offset, shape, stride)
    if cls is torch.Tensor:
        return t
    from torch._subclasses.fake_tensor import FakeTensor

    return FakeTensor(mode, t, device)


def kind_of(m: nn.Module) -> tuple[Any, ...]:
    """What a module is before it runs: its class, its submodules' and its parameters' shapes and dtypes."""
    return (type(m), *((rel, type(s), *((tuple(p.shape), p.dtype) for p in s._parameters.values() if p is not None))
                       for rel, s in m.named_modules(remove_duplicate=False)))


def watching(cls: type, owner: Any) -> type:
    """A subclass of ``cls`` that notes in ``owner._reads`` which watched attributes
    (``owner._watched``) of its instances are read."""
    get = cls.__getattribute__

    def __getattribute__(self: Any, name: str) -> Any:
        names = owner._watched.get(id(self))
        if names is not None and name in names:
            owner._reads.add((id(self), name))
            running = owner.stack.forward
            if not running or running[-1] != owner.stack.paths.get(id(self)):  # not its own forward's read
                owner._outer.add((id(self), name))
            if name == SLOT and owner.slot_reads is not None:  # where a cache's slot index is read
                f = sys._getframe(1)
                owner.slot_reads.append((f.f_code, f.f_lasti))
        return get(self, name)

    mine = {"__getattribute__": __getattribute__, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
    sub = type(cls.__name__, (cls,), dict(mine))
    for k in [k for k in vars(sub) if k not in mine and k not in ("__doc__", "__dict__", "__weakref__")]:
        delattr(sub, k)  # what a base's __init_subclass__ added (transformers re-wraps forward)
    return sub


def params_of(subs: list[tuple[str, nn.Module]]) -> list[torch.Tensor]:
    """The parameters of a block's modules, in the order of its (non-deduplicated) module list."""
    return [p for _, m in subs for p in m._parameters.values() if p is not None]


def is_container(v: Any) -> bool:
    """A list, dict or set: an attribute a forward may fill in place."""
    return type(v) in (list, dict, set)


def copy_of(v: Any) -> Any:
    """A shallow copy of a container, to tell later whether it was filled."""
    return list(v) if type(v) is list else (set(v) if type(v) is set else dict(v))


def changed(v: Any, saved: Any) -> bool:
    """Whether a container holds other objects than its copy ``saved``."""
    if type(v) is list:
        return len(v) != len(saved) or any(a is not b for a, b in zip(v, saved))
    if type(v) is set:
        return v != saved
    return v.keys() != saved.keys() or any(v[k] is not saved[k] for k in saved)


@dataclass
class OutLeaf:
    """How to make one output leaf: a new storage (``uid`` relative to the block's first), a
    view of input leaf ``source``, the input object itself, or a plain value."""

    kind: str  # "new", "view", "same", "value"
    value: Any = None
    uid: int = 0
    source: int = 0
    key: tuple[Any, ...] = ()


@dataclass
class Recorded:
    """One call traced in full, ready to be replayed for an equal one."""

    module: nn.Module
    values: dict[tuple[str, str], Any]  # the attributes its forward read, as they were
    events: list[OpEvent] = field(default_factory=list)
    # (after - first event, uid - uid0 or the cache slot's attribute it was held as, nbytes)
    frees: list[tuple[int, Any, int]] = field(default_factory=list)
    nuids: int = 0
    uid0: int = 0  # the last storage id before the call
    casts: list[int] = field(default_factory=list)  # storages made by casting a parameter (relative ids)
    log: list[tuple[str, list[list[int]]]] = field(default_factory=list)
    spec: Any = None
    outs: list[OutLeaf] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    params: list[int | None] = field(default_factory=list)
    usable: bool = True
    attention: list[tuple[dict[str, Any], int]] = field(default_factory=list)  # the kernels' notes of its calls
    # a training step's (reuse_train.py): the structure key, the group's modules foreseen to make
    skey: Any = None  # equal calls, the saved activations (relative ids), the inputs its graph saved, its backward
    matching: list[int] | None = None
    kept: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    backward: Any = None
    saved_outs: list[int] = field(default_factory=list)  # outputs its graph saved (relative ids)
    mode: Any = None  # the fake tensor mode its outputs were made in (None: meta tensors)
    own: bool = False  # the block checkpoints itself: its graph saved its inputs, and recomputes the rest
    cached: list[tuple[int, int]] = field(default_factory=list)  # autocast's cached casts no graph saved
    cache: Any = None  # what it did to a key/value cache's slot (reuse_cache.CacheCall)
    passes: dict[str, Any] = field(default_factory=dict)  # its pass-through submodules' inputs (reuse_through.py)


SLOT = "layer_idx"  # the attribute a layer indexes a key/value cache with (reuse_cache.py)


def _submodule(mod: nn.Module | None, rel: str) -> nn.Module | None:
    try:
        return mod.get_submodule(rel) if mod is not None else None
    except AttributeError:
        return None


def equal_reads(done: Recorded, subs: list[tuple[str, nn.Module]], known: dict[Any, bool]) -> bool:
    """Whether every attribute the recorded call read has the same value in this call's modules
    (a cache's slot index apart, where the call was given a cache: keyed on its own; a
    pass-through submodule's apart, where it still passes its input through: ``reuse_through.py``)."""
    mods = dict(subs)
    for (rel, name), value in done.values.items():
        if name == SLOT and done.cache is not None:
            continue
        d = mods[rel].__dict__
        if name not in d:
            return False
        if not same_value(d[name], value, (mods[rel], _submodule(done.module, rel))) and (
                rel not in done.passes or not still_passes(mods[rel], done.passes[rel], known)):
            return False
    return True


def all_differ(done: Recorded, group: list[nn.Module]) -> bool:
    """Whether an attribute the recorded call read has another value in every block of its
    kind (a layer index, a drop-path rate growing with depth where its module is not a pass-through)."""
    for rel, name in (v for v in done.values if (done.cache is None or v[1] != SLOT) and v[0] not in done.passes):
        try:
            subs = [g.get_submodule(rel) for g in group]
        except AttributeError:
            continue
        values = [m.__dict__.get(name) for m in subs]
        if all(not same_value(a, b, (subs[i], subs[j])) for i, a in enumerate(values)
               for j, b in enumerate(values[i + 1:], i + 1)):
            return True
    return False


# set to True on a custom autograd function whose context holds tensors only through
# ``save_for_backward`` (the rest plain values): its node's saved tensors are all it keeps
SAVES_ONLY = "footprint_saves_only_for_backward"


def saved_by_graph(outs: list[torch.Tensor], leaves: list[Any]) -> set[int] | None:
    """The storages the block's autograd graph saved (walked from its outputs down to its
    inputs' nodes and the parameters' accumulators), or None where a node is a custom autograd
    function (its context may hold tensors no one can see) not marked :data:`SAVES_ONLY`."""
    stop = {id(x.grad_fn) for x in leaves if isinstance(x, torch.Tensor) and x.grad_fn is not None}
    todo = [t.grad_fn for t in outs if t.grad_fn is not None]
    seen: set[int] = set()
    saved: set[int] = set()
    with _disable_current_modes():
        while todo:
            node = todo.pop()
            if node is None or id(node) in seen or id(node) in stop or type(node).__name__ == "AccumulateGrad":
                continue
            seen.add(id(node))
            if hasattr(node, "_forward_cls"):
                if not getattr(node._forward_cls, SAVES_ONLY, False):
                    return None
                saved.update(t.untyped_storage()._cdata for t in node.saved_tensors)
            for name in dir(node):
                if name.startswith("_saved_"):
                    value = getattr(node, name)
                    for t in value if isinstance(value, (list, tuple)) else (value,):
                        if isinstance(t, torch.Tensor):
                            saved.add(t.untyped_storage()._cdata)
            todo.extend(n for n, _ in node.next_functions)
    return saved
