"""Trace a repeated block once: later calls of an equal block replay its recorded events.

A transformer calls one block class 12 to 126 times on inputs of one shape. Each call of a
candidate (a child of an ``nn.ModuleList`` or ``nn.Sequential``, with submodules of its
own, of which the model has another of the same class, submodules and parameter shapes)
is keyed by what its trace can depend on, on meta tensors where no value exists: the
block's class and its submodules' classes, training flags and attribute names,
the shapes, strides, dtypes and ``requires_grad`` of its parameters and buffers (and which
of them are shared), no hooks of its own, the inputs' tree, shapes, strides, dtypes and
aliasing (other inputs by value: numbers, strings, None; anything else is not keyed and the
call runs as it is), and the grad, inference and autocast modes.

The first call of a key runs in full while recording, and its module classes are swapped
for a subclass that notes which of their attributes the forward reads. A later call of the
same key whose read attributes all equal the recorded call's (``layer_idx`` is read by a
layer that updates a cache or branches on it, Gemma-2's ``sliding_window`` is read by
every attention: those split calls apart; an attribute never read cannot change what runs)
is replayed: the events come back under the call's own module paths, with its own parameter
indices, fresh storage ids in the same order a full trace would give, the frees made inside
the block at the same places, and outputs made as new meta tensors of the recorded shapes,
strides and storage sizes (views of the call's own inputs where the recorded outputs were).

A recorded call is used only if everything it did is accounted for: every event inside the
block's own modules, every storage it freed made inside it, every storage it made and kept
is one of its outputs (in a training step: or freed by its backward), its outputs are plain
tensors or simple values, and it changed no attribute of its modules. Otherwise (a state a
block keeps, a free the collector made in the middle) later calls run in full; a key/value
cache object given to the block, whose slot it writes, is the exception of :mod:`.reuse_cache`. Autocast's
casts of the block's weights that no graph saved are the exception: its cache holds them until
it exits, and the replayed calls' are held as long. Replay covers meta tensors and the fake
tensors of a mixed-precision step, inference and training steps (the backward, and a block
checkpointed whole: :mod:`.reuse_train`); real tensors, models with recurrent layers and
checkpoints inside a block trace every call in full.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten

from . import reuse_train as train
from .blockkeys import (
    HOOKS,
    INTERNAL,
    OutLeaf,
    Recorded,
    all_differ,
    changed,
    copy_of,
    equal_reads,
    hooks_key,
    is_container,
    kind_of,
    params_of,
    saved_by_graph,
    simple,
    tensor_key,
    tensor_like,
    traced_tensor,
    watching,
)
from .modules import ModuleStack
from .recorder import Recorder
from .records import MemFree, OpEvent
from .reuse_cache import CacheCall, cache_key, is_cache, replayable, slot_key, slot_of, write_slot
from .reuse_through import passes

MAX_RECORDED = 3  # calls of one structure recorded (and checked) at most; later misses run as they are


@dataclass
class Stats:
    """What the last traced run did with its repeated blocks (for tests and benchmarks)."""

    recorded: int = 0  # calls traced in full while recording
    replayed: int = 0  # calls replayed from a recorded one
    retraced: bool = False  # a training step's replay could not be proven equal: traced again in full


LAST = Stats()


def reusable(stack: ModuleStack, *, reuse: bool, tensors: str, backward: bool, step: Any) -> bool:
    """Whether a run may replay blocks: asked for, meta or fake tensors (a mixed-precision step's:
    autocast acts on a device's tensors), no recurrent layer, and no global module hooks but the
    trace's own (a training step's: :mod:`.reuse_train`)."""
    LAST.recorded = LAST.replayed = 0
    LAST.retraced = False
    glob = torch.nn.modules.module
    return (reuse and tensors in ("meta", "fake") and not stack.recurrent and len(glob._global_forward_pre_hooks) == 1
            and len(glob._global_forward_hooks) == 1
            and not glob._global_backward_hooks and not glob._global_backward_pre_hooks)


class BlockReuse:
    """Replays equal calls of repeated blocks during one traced run (see the module's docstring)."""

    def __init__(self, model: nn.Module, stack: ModuleStack, rec: Recorder, kernels: Any = None,
                 training: bool = False) -> None:
        self.training = training  # a training step: calls with gradients on replay their backward too
        self.stack = stack
        self.rec = rec
        self.kernels = kernels  # the device's kernels (trace/kernels.py): a replay notes its attention calls
        self.recorded: dict[Any, list[Recorded]] = {}
        self.tries: dict[Any, int] = {}
        self.busy = False  # a call is being recorded: the blocks inside it run as they are
        self._installed: list[nn.Module] = []
        self._classes: dict[type, type] = {}
        self._reads: set[tuple[int, str]] = set()
        self._outer: set[tuple[int, str]] = set()  # of those, read outside their own module's forward
        self._known: dict[Any, bool] = {}  # pass-through submodules checked (reuse_through.py)
        self._watched: dict[int, frozenset[str]] = {}
        self._wrappers: set[int] = set()  # the forward functions put on candidates (not attributes of theirs)
        self.slot_reads: list[tuple[Any, int]] | None = None  # where a recorded call read its cache slot
        self.cached: list[torch.Tensor] = []  # replayed calls' casts autocast's cache would hold
        # candidates by what they are before any call (class, submodules, parameter shapes): one
        # alone of its kind can never be replayed, and is left as it is; so is a module without
        # submodules (a few operators: keying the call would cost what replaying saves)
        self.groups: dict[Any, list[nn.Module]] = {}
        seen: set[int] = set()
        for mod in model.modules():
            if not isinstance(mod, (nn.ModuleList, nn.Sequential)):
                continue
            for k in mod.children():
                if id(k) not in seen and "forward" not in k.__dict__ and k._modules:
                    seen.add(id(k))
                    self.groups.setdefault(kind_of(k), []).append(k)
        self.group_of: dict[int, list[nn.Module]] = {}
        for group in self.groups.values():
            if len(group) > 1:
                for k in group:
                    self.group_of[id(k)] = group
                    self._install(k)

    def _install(self, mod: nn.Module) -> None:
        original = mod.forward
        ref = weakref.ref(mod)

        def forward(*args: Any, **kwargs: Any) -> Any:
            m = ref()
            assert m is not None
            return self.call(m, original, args, kwargs)

        mod.forward = forward  # type: ignore[method-assign]
        self._wrappers.add(id(forward))
        self._installed.append(mod)

    def _attrs(self, m: nn.Module) -> dict[str, Any]:
        """A module's own attributes: its __dict__ but for nn.Module's tables and the wrapper put
        on it here (a ``forward`` of its own, a library's hook, is an attribute like any other)."""
        return {k: v for k, v in m.__dict__.items()
                if k not in INTERNAL and not (k == "forward" and id(v) in self._wrappers)}

    def release_cached(self) -> None:
        """Autocast has exited (its cache dropped the recorded calls' casts): the replayed calls' go too."""
        self.cached.clear()

    def remove(self) -> None:
        for mod in self._installed:
            mod.__dict__.pop("forward", None)
        self._installed.clear()

    # ------------------------------------------------------------------ keys

    def _structure(self, mod: nn.Module) -> tuple[Any, list[tuple[str, nn.Module]]] | None:
        """The block's structure key and its submodules (None: hooks of its own not keyed by
        :func:`.blockkeys.hooks_key`)."""
        subs = list(mod.named_modules(remove_duplicate=False))
        first: dict[int, int] = {}
        ptr: dict[int, int] = {}  # which tensors are shared
        parts: list[Any] = [type(mod)]
        for i, (rel, m) in enumerate(subs):
            d = m.__dict__
            hooks = hooks_key(m) if any(d.get(h) for h in HOOKS) else ()
            if hooks is None:
                return None
            parts.append((rel, type(m), m.training, first.setdefault(id(m), i), tuple(sorted(self._attrs(m))), hooks))
            if first[id(m)] != i:  # a module met again: its tensors are keyed once
                continue
            for kind, table in (("p", m._parameters), ("b", m._buffers)):
                for name, t in table.items():
                    parts.append((kind, rel, name, ptr.setdefault(id(t), len(ptr)),
                                  tensor_key(t) if t is not None else None))
        return tuple(parts), subs

    def _inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[Any]] | None:
        """The inputs' key and leaves (None: a leaf that is neither a plain tensor nor a simple value)."""
        leaves, spec = tree_flatten((args, kwargs))
        parts: list[Any] = [spec, torch.is_grad_enabled(), torch.is_inference_mode_enabled(),
                            torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), self.rec.phase]
        storages: dict[int, int] = {}
        for i, x in enumerate(leaves):
            if isinstance(x, torch.Tensor):
                if not traced_tensor(x):
                    return None
                key = x.untyped_storage()._cdata
                parts.append((tensor_key(x), storages.setdefault(key, i), self.rec.param_index.get(key)))
            elif simple(x) or is_cache(x):  # a cache: its slot keyed in call()
                parts.append((type(x), x) if simple(x) else cache_key(x))
            else:
                return None
        try:
            return (tuple(parts), leaves) if hash(tuple(parts)) is not None else None
        except TypeError:
            return None

    # ------------------------------------------------------------------ a call

    def call(self, mod: nn.Module, original: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
        grad = self.training and torch.is_grad_enabled()
        if self.busy or (grad and not train.grad_mode_replayable()):
            return original(*args, **kwargs)
        structure = self._structure(mod)
        inputs = self._inputs(args, kwargs) if structure is not None else None
        if structure is None or inputs is None:
            return original(*args, **kwargs)
        skey, subs = structure
        own = False  # the block checkpoints itself (a Hugging Face layer's switch): replayed whole
        if grad and train.checkpointing(subs):
            own = train.checkpoints_itself(subs)
            if not own:
                return original(*args, **kwargs)
        cache = next((x for x in inputs[1] if is_cache(x)), None)
        slot = slot_of(subs) if cache is not None else None
        ckey = None if cache is None or slot is None or grad else slot_key(cache, slot)
        if cache is not None and ckey is None:
            return original(*args, **kwargs)
        key = (skey, inputs[0], ckey)
        for done in self.recorded.get(key, ()):
            if done.usable and equal_reads(done, subs, self._known):
                if done.cache is not None and not replayable(done.cache, cache, slot, self.rec):  # type: ignore[arg-type]
                    return original(*args, **kwargs)
                what = train.role(self, done, mod) if grad else "replay"
                if what != "replay":
                    return (train.last_call(self, done, subs, original, args, kwargs, inputs[1]) if what == "last"
                            else original(*args, **kwargs))
                return self._replay(done, subs, inputs[1], grad, slot)
            if (done.usable and self.tries.get(skey, 0) < MAX_RECORDED
                    and all_differ(done, self.group_of.get(id(mod), []))):
                self.tries[skey] = MAX_RECORDED  # no two calls will be equal: none is recorded again
        if self.tries.get(skey, 0) >= MAX_RECORDED:
            return original(*args, **kwargs)
        self.tries[skey] = self.tries.get(skey, 0) + 1
        return self._record(mod, key, subs, original, args, kwargs, inputs[1], grad, own,
                            CacheCall(cache, slot) if cache is not None and slot is not None else None)

    def _record(self, mod: nn.Module, key: Any, subs: list[tuple[str, nn.Module]], original: Callable[..., Any],
                args: tuple[Any, ...], kwargs: dict[str, Any], leaves: list[Any], grad: bool = False,
                own: bool = False, cc: CacheCall | None = None) -> Any:
        rec, stack = self.rec, self.stack
        unique = {id(m): (rel, m) for rel, m in reversed(subs)}  # the first name of each module
        before = {id(m): self._attrs(m) for _, m in unique.values()}
        contents = {(i, k): copy_of(v) for i, attrs in before.items() for k, v in attrs.items() if is_container(v)}
        self._reads, self._outer, self._watched = set(), set(), {i: frozenset(a) for i, a in before.items()}
        classes = {i: type(m) for i, (_, m) in unique.items()}
        ev0, fr0, uid0, pc0 = len(rec.events), len(rec.frees), rec._uid, len(rec.param_casts)
        noted = self.kernels.attention_counts() if self.kernels is not None else []
        log: list[tuple[str, list[list[int]]]] = []
        prev_log, stack.log, stack.through = stack.log, log, []
        self.busy = True
        swapped = []
        if cc is not None:
            cc.start(rec)
            self.slot_reads = cc.reads
        try:
            for i, (_, m) in unique.items():
                sub = self._watcher(classes[i])
                if sub is not None:
                    m.__class__ = sub
                    swapped.append(m)
            with train.checkpoint_seen() if grad else contextlib.nullcontext([]) as ckpt:
                out = original(*args, **kwargs)
        finally:
            for m in swapped:
                if type(m) is self._classes.get(classes[id(m)]):
                    m.__class__ = classes[id(m)]
            self.busy = False
            stack.log, through, stack.through = prev_log, stack.through, None
            if cc is not None:
                cc.stop()
                self.slot_reads = None
        values = {(unique[i][0], name): before[i][name] for i, name in self._reads}
        done = Recorded(module=mod, values=values, nuids=rec._uid - uid0, uid0=uid0, log=log, skey=key[0], own=own,
                         paths=[stack.paths.get(id(m), "?") for _, m in subs],
                         attention=self.kernels.attention_since(noted) if self.kernels is not None else [])
        done.usable = (len(ckpt) == own and len(swapped) == len(unique)
                       and all(type(m) is classes[id(m)] for _, m in unique.values())
                       and self._unchanged(unique, before, contents) and (cc is None or cc.accounted(rec, uid0)))
        done.cache = cc
        done.passes = passes(through, log, rec.events[ev0:], unique, stack.paths, self._outer)
        if done.usable:
            done.casts = [u - uid0 for u in rec.param_casts[pc0:]]
            done.usable = self._capture(done, subs, ev0, fr0, uid0, out, leaves, grad)
        self.recorded.setdefault(key, []).append(done)
        LAST.recorded += 1
        return out

    def _watcher(self, cls: type) -> type | None:
        if cls not in self._classes:
            try:
                self._classes[cls] = watching(cls, self)
            except Exception:  # noqa: BLE001 - a class that cannot be subclassed: not watched, not replayed
                return None
        return self._classes[cls]

    def _unchanged(self, unique: dict[int, tuple[str, nn.Module]], before: dict[int, dict[str, Any]],
                   contents: dict[tuple[int, str], Any]) -> bool:
        for i, (_, m) in unique.items():
            now = self._attrs(m)
            if now.keys() != before[i].keys() or any(now[k] is not v for k, v in before[i].items()):
                return False
        return all(not changed(before[i][k], saved) for (i, k), saved in contents.items())

    def _capture(self, done: Recorded, subs: list[tuple[str, nn.Module]], ev0: int, fr0: int, uid0: int,
                 out: Any, leaves: list[Any], grad: bool = False) -> bool:
        """Keep what the recorded call did, if all of it is accounted for."""
        rec = self.rec
        inside = set(done.paths)
        events = rec.events[ev0:]
        made = [u for e in events for u, _ in e.allocs]
        if (made != list(range(uid0 + 1, rec._uid + 1)) or any(e.module not in inside for e in events)
                or any(path not in inside for path, _ in done.log)):  # a module outside the block ran
            return False
        index = rec.param_index
        done.params = [index.get(p.untyped_storage()._cdata) for p in params_of(subs)]
        own = {w for w in done.params if w is not None}
        if any(w not in own for e in events for w in e.weights):
            return False
        old = done.cache.old_uids if done.cache is not None else {}  # a cache slot's tensors it replaced
        for f in rec.frees[fr0:]:
            if not uid0 < f.storage <= rec._uid and f.storage not in old:
                return False
            done.frees.append((f.after - ev0, old.get(f.storage, f.storage - uid0), f.nbytes))
        # storages made here and still alive must be outputs
        alive = {uid for uid, _ in rec.live.values() if uid > uid0} - (done.cache.kept(rec) if done.cache else set())
        out_leaves, done.spec = tree_flatten(out)
        by_storage = {x.untyped_storage()._cdata: i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)}
        for x in out_leaves:
            if not isinstance(x, torch.Tensor):
                if not simple(x):
                    return False
                done.outs.append(OutLeaf("value", value=x))
                continue
            if type(x) is nn.Parameter or not traced_tensor(x) or (x.requires_grad and not grad):
                return False
            done.mode = getattr(x, "fake_mode", None)
            st = x.untyped_storage()._cdata
            uid = rec.live.get(st, (0, 0))[0]
            if uid > uid0:
                alive.discard(uid)
                done.outs.append(OutLeaf("new", uid=uid - uid0, key=tensor_key(x)))
            elif st in by_storage:
                src = by_storage[st]
                same = next((i for i, y in enumerate(leaves) if y is x), None)
                if same is None and x.requires_grad:  # a view of an input, in autograd's eyes: not replayed
                    return False
                done.outs.append(OutLeaf("same", source=same) if same is not None
                                 else OutLeaf("view", source=src, key=tensor_key(x)))
            else:
                return False
        saved: set[int] | None = set()
        if grad and not done.own:  # what the graph keeps for the backward: saved activations and inputs
            saved = saved_by_graph([x for x in out_leaves if isinstance(x, torch.Tensor) and x.requires_grad],
                                   leaves)
        if saved is None or (grad and any(o.kind == "new" and o.key[6] for o in done.outs)
                             and not any(isinstance(x, torch.Tensor) and x.requires_grad for x in leaves)):
            return False
        # autocast's casts of the block's weights no graph saved: its cache holds them until it exits
        casts = set(done.casts)
        storages = {uid: (st, n) for st, (uid, n) in rec.live.items() if uid in alive}
        done.cached = [(u - uid0, storages[u][1]) for u in sorted(alive)
                       if u - uid0 in casts and storages[u][0] not in saved]
        alive -= {uid0 + u for u, _ in done.cached}
        if alive and not grad:
            return False
        if grad:
            done.kept = sorted(u - uid0 for u in alive)
            # a checkpoint holds every input, to run the block again in the backward
            done.held = [i for i, x in enumerate(leaves)
                         if isinstance(x, torch.Tensor) and (done.own or x.untyped_storage()._cdata in saved)]
            done.saved_outs = [o.uid for o, x in zip(done.outs, out_leaves)
                               if o.kind == "new" and x.untyped_storage()._cdata in saved]
        done.events = events
        return True

    def _replay(self, done: Recorded, subs: list[tuple[str, nn.Module]], leaves: list[Any], grad: bool = False,
                slot: int | None = None) -> Any:
        rec, stack = self.rec, self.stack
        mine = [stack.paths.get(id(m), "?") for _, m in subs]
        paths = dict(zip(done.paths, mine))
        index = rec.param_index
        now = [index.get(p.untyped_storage()._cdata) for p in params_of(subs)]
        weights = {a: b for a, b in zip(done.params, now) if a is not None and b is not None}
        shift = rec._uid  # the block's storages get the next ids, in the order a full trace gives them
        old = done.uid0
        base = len(rec.events)
        ev = rec.events
        for e in done.events:
            ev.append(OpEvent(e.op, paths[e.module], e.phase, e.flops, e.macs, e.kind, e.bytes_read,
                              e.bytes_written, e.out_shapes, e.out_dtypes,
                              [[shift + u - old, n] for u, n in e.allocs] if e.allocs else [],
                              e.scratch, [weights[w] for w in e.weights] if e.weights else [], e.transposed,
                              e.problem, e.loop))
        made: dict[int, torch.Tensor] = {}
        olds = (write_slot(done.cache, leaves, slot, rec, shift, made, done.mode, {u for _, u, _ in done.frees
                                                                                  if isinstance(u, str)})
                if done.cache is not None and slot is not None else {})
        rec.frees.extend(MemFree(after=base + a, storage=shift + u if isinstance(u, int) else olds[u], nbytes=n)
                         for a, u, n in done.frees)
        rec.param_casts.extend(shift + u for u in done.casts)
        rec._uid += done.nuids
        if done.cached:  # the casts autocast's cache holds until it exits (release_cached)
            with _disable_current_modes():
                for u, n in done.cached:
                    t = torch.empty(n, dtype=torch.uint8, device="meta")
                    rec.adopt(t, shift + u)
                    self.cached.append(t)
        if self.kernels is not None and done.attention:
            self.kernels.add_attention(done.attention)

        def make(kinds: tuple[str, ...]) -> list[Any]:
            outs: list[Any] = []
            with _disable_current_modes():
                for o in done.outs:
                    if o.kind not in kinds:
                        outs.append(None)
                    elif o.kind == "value":
                        outs.append(o.value)
                    elif o.kind == "same":
                        outs.append(leaves[o.source])
                    else:
                        st = (leaves[o.source].untyped_storage() if o.kind == "view"
                              else made[o.uid].untyped_storage() if o.uid in made else None)
                        t = tensor_like(o.key, st, done.mode)
                        if o.kind == "new" and o.uid not in made:
                            made[o.uid] = t
                            rec.adopt(t, shift + o.uid)
                        outs.append(t)
            return outs

        outs = (train.node_outputs(train.Replayed(self, done, mine, now, subs, leaves, shift, made), make) if grad
                else make(("new", "same", "value", "view")))
        for path, shapes in done.log:
            q = paths[path]
            stack.calls[q] = stack.calls.get(q, 0) + 1
            stack.out_shapes.setdefault(q, shapes)
            if stack.log is not None:
                stack.log.append((q, shapes))
        rec._folded = None  # (read only inside recurrent layers, which a run that replays has none of)
        LAST.replayed += 1
        return tree_unflatten(outs, done.spec)
