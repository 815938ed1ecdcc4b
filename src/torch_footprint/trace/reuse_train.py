"""A repeated block replayed in a training step: its forward and its backward (:mod:`.reuse`).

In a training step the blocks' backwards run in the reverse order of their forwards, so the
block whose forward is recorded (the first call of a key) has the last backward. The last call
of a key (foreseen from the group of equal modules: the last whose attributes read equal the
recorded call's) is therefore also traced in full, its forward checked equal to the recorded
one event by event, and its backward recorded between the moment its outputs' gradients are
ready and the moment its inputs' are. The calls between replay their forward and, through one
autograd node standing for the whole block, that backward, under their own module paths, with
their own parameters and storage ids. Only siblings (children of the recorded block's container,
as a model's layers are) replay: an equal block elsewhere may sit in another context.

A block that checkpoints itself (a Hugging Face layer's switch: its forward runs inside torch's
non-reentrant checkpoint) is replayed whole the same way: its forward saves nothing but its
inputs (the checkpoint holds them to run it again), and its recorded backward is the
recomputation and the backward together, the weights autocast casts again in it included.

Lifetimes are stitched as a full trace has them: the storages a replayed forward kept for its
backward (its saved activations) are freed where the recorded backward freed its own; its
outputs and the incoming gradients where the recorded ones were; the block's gradients come
back as new storages (the inputs' gradients, and each parameter's ``.grad`` as the recorded
call's was stolen or accumulated); an output the recorded graph saved keeps its storage held
until then; an input the recorded block's graph saved is held by the
node until the point the recorded backward let its own go (or the end, where another holder
must outlive it: that is checked), and an input it did not save is not held.

Anything that cannot be told equal ends the run with :class:`ReplayMismatch`, and the whole
step is traced again without reuse: a custom autograd function inside the block (its context
may hold anything; but this tool's own, :data:`.blockkeys.SAVES_ONLY`), a storage freed in the
backward that is none of the above, a saved activation the backward did not free, the last
call's forward different from the recorded one, or a replayed block's backward running before
the last call's was recorded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten

from .blockkeys import equal_reads, params_of, tensor_key, tensor_like
from .records import MemFree, OpEvent


class ReplayMismatch(Exception):
    """A replayed training block could not be proven equal to a full trace: trace again in full."""


def grad_mode_replayable() -> bool:
    """Whether a call in a training step may be recorded or replayed: gradients on, not inside a
    backward (a checkpoint's recomputation) and no saved-tensor hooks (a checkpointed region
    saves nothing and recomputes, which one node for the block cannot)."""
    return (torch._C._current_graph_task_id() == -1
            and torch._C._autograd._top_saved_tensors_default_hooks(False) is None)


@contextlib.contextmanager
def checkpoint_seen() -> Iterator[list[bool]]:
    """Notes whether torch's non-reentrant checkpoint ran inside (a checkpointed region's saved
    tensors are recomputed when read: the graph cannot be walked, nor the block replayed); the
    reentrant one is a custom autograd function, which :func:`.blockkeys.saved_by_graph` refuses."""
    import torch.utils.checkpoint as ckpt

    seen: list[bool] = []
    name = "_checkpoint_without_reentrant_generator_impl"
    impl = getattr(ckpt, name, None)
    if impl is None:  # another torch: every call of a block with gradients is traced as it is
        seen.append(True)
        yield seen
        return

    def noted(*args: Any, **kwargs: Any) -> Any:
        seen.append(True)
        return impl(*args, **kwargs)

    setattr(ckpt, name, noted)
    try:
        yield seen
    finally:
        setattr(ckpt, name, impl)


def checkpointing(subs: list[Any]) -> bool:
    """Whether a Hugging Face layer of the block checkpoints itself (its switch is an attribute)."""
    return any(getattr(m, "gradient_checkpointing", False) is True for _, m in subs)


def checkpoints_itself(subs: list[Any]) -> bool:
    """Whether the block is one checkpointed region: its own module's switch on (the forward
    runs inside torch's checkpoint), none of its submodules'. Replayed whole: the forward keeps
    its inputs (the checkpoint's, to run it again), the backward recomputes then differentiates."""
    top = subs[0][1]
    return (getattr(top, "gradient_checkpointing", False) is True and callable(
        top.__dict__.get("_gradient_checkpointing_func")) and not checkpointing(subs[1:]))


@dataclass
class Backward:
    """One block's backward, recorded from the last call of a key (traced in full)."""

    paths: list[str]
    params: list[int | None]
    has_grad: list[bool] = field(default_factory=list)  # each parameter's .grad before the backward
    events: list[OpEvent] = field(default_factory=list)
    # (after - first event, kind, value, nbytes); kind: "b" a storage made in the backward (id
    # relative to the first), "f" a saved activation and "o" an output (relative to the forward's
    # first), "l" an input (leaf index), "g" an incoming gradient (output index)
    frees: list[tuple[int, str, int, int]] = field(default_factory=list)
    nuids: int = 0
    first: int = 0  # the last storage id before the recorded backward
    inputs: list[tuple[Any, ...]] = field(default_factory=list)  # per input needing a gradient
    grads: list[tuple[Any, ...]] = field(default_factory=list)  # per parameter: ("none"|"same"|"new", uid, key)
    attention: list[tuple[dict[str, Any], int]] = field(default_factory=list)
    casts: list[int] = field(default_factory=list)  # parameters cast again in it (a recomputation under autocast)
    ok: bool = True


def forward_equal(rec: Any, done: Any, paths: list[str], params: list[int | None], ev0: int, fr0: int,
                  uid0: int) -> bool:
    """Whether the events and frees since ``ev0``/``fr0`` are the recorded call's, under these paths,
    parameters and storage ids."""
    events, frees = rec.events[ev0:], rec.frees[fr0:]
    if len(events) != len(done.events) or len(frees) != len(done.frees) or rec._uid - uid0 != done.nuids:
        return False
    where = dict(zip(done.paths, paths))
    weights = dict(zip(done.params, params))
    for e, d in zip(events, done.events):
        if (e.op, e.module, e.phase, e.flops, e.macs, e.kind, e.bytes_read, e.bytes_written, e.out_shapes,
                e.out_dtypes, e.scratch, e.transposed, e.problem, e.loop) != (
                d.op, where.get(d.module), d.phase, d.flops, d.macs, d.kind, d.bytes_read, d.bytes_written,
                d.out_shapes, d.out_dtypes, d.scratch, d.transposed, d.problem, d.loop):
            return False
        if [[u - uid0, n] for u, n in e.allocs] != [[u - done.uid0, n] for u, n in d.allocs]:
            return False
        if e.weights != [weights.get(w) for w in d.weights]:
            return False
    return all((f.after - ev0, f.storage - uid0, f.nbytes) == d for f, d in zip(frees, done.frees))


class LastCall:
    """The hooks around the last call of a key: they record its backward into ``done.backward``."""

    def __init__(self, owner: Any, done: Any, subs: list[Any], leaves: list[Any], uid0: int,
                 outs: list[torch.Tensor], out_uids: dict[int, int], same: bool) -> None:
        self.owner, self.done, self.uid0 = owner, done, uid0
        rec = owner.rec
        self.params = params_of(subs)
        self.bw = Backward(paths=[owner.stack.paths.get(id(m), "?") for _, m in subs],
                           params=[rec.param_index.get(p.untyped_storage()._cdata) for p in self.params], ok=same)
        self.leaf_uids = {rec.uid_of(x): i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)}
        grad_in = list({id(x): x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad}.values())
        self.out_uids = out_uids  # relative storage id -> output index
        self.start: tuple[int, int, int] = (0, 0, 0)
        self.gouts: dict[int, int] = {}
        self.gout_keys: list[Any] = []
        self.noted: list[int] = []
        done.backward = self.bw if same else Backward(paths=[], params=[], ok=False)
        if same:
            torch.autograd.graph.register_multi_grad_hook(outs, self.enter)
            torch.autograd.graph.register_multi_grad_hook(grad_in, self.exit)  # (the tensors are not kept)

    def enter(self, grads: Any) -> None:
        rec = self.owner.rec
        self.start = (len(rec.events), len(rec.frees), rec._uid)
        self.gouts = {}
        for j, g in enumerate(grads):
            uid = rec.uid_of(g) if g is not None else None
            if uid is not None:
                self.gouts[uid] = j
        self.gout_keys = [tensor_key(g) if g is not None else None for g in grads]
        self.bw.has_grad = [p.grad is not None for p in self.params]
        self._before = [self.owner.rec.uid_of(p.grad) if p.grad is not None else None for p in self.params]
        kernels = self.owner.kernels
        self.noted = kernels.attention_counts() if kernels is not None else []
        self._casts = len(rec.param_casts)

    def exit(self, grads: Any) -> None:
        try:
            self._exit(grads)
        except Exception:  # noqa: BLE001 - anything unexpected: the replays' backward cannot be proven
            self.bw.ok = False

    def _exit(self, grads: Any) -> None:
        rec, bw = self.owner.rec, self.bw
        ev0, fr0, b0 = self.start
        b1 = rec._uid
        events = rec.events[ev0:]
        inside = set(bw.paths)
        own = {w for w in bw.params if w is not None}
        made = [u for e in events for u, _ in e.allocs]
        casts = rec.param_casts[self._casts:]
        if (made != list(range(b0 + 1, b1 + 1)) or any(e.module not in inside for e in events)
                or any(w not in own for e in events for w in e.weights) or any(not b0 < u <= b1 for u in casts)):
            bw.ok = False
            return
        bw.casts = [u - b0 for u in casts]
        nf = self.done.nuids
        kept = set(self.done.kept)
        freed_b: set[int] = set()
        for f in rec.frees[fr0:]:
            s = f.storage
            if b0 < s <= b1:
                bw.frees.append((f.after - ev0, "b", s - b0, f.nbytes))
                freed_b.add(s - b0)
            elif self.uid0 < s <= self.uid0 + nf:
                rel = s - self.uid0
                bw.frees.append((f.after - ev0, "o" if rel in self.out_uids else "f", rel, f.nbytes))
                kept.discard(rel)
            elif s in self.leaf_uids:
                bw.frees.append((f.after - ev0, "l", self.leaf_uids[s], f.nbytes))
            elif s in self.gouts:
                bw.frees.append((f.after - ev0, "g", self.gouts[s], f.nbytes))
            else:
                bw.ok = False
                return
        if kept:  # a saved activation this backward did not free: a replay could not free it
            bw.ok = False
            return
        grads_made: set[int] = set()
        for g in grads:
            bw.inputs.append(self._grad(g, b0, b1, grads_made))
        for p, before in zip(self.params, self._before):
            g = p.grad
            if g is None:
                bw.grads.append(("none",) if before is None else ("bad",))
            elif before is not None:
                bw.grads.append(("same",) if rec.uid_of(g) == before else ("bad",))
            else:
                bw.grads.append(self._grad(g, b0, b1, grads_made))
        if any(k[0] == "bad" for k in bw.inputs + bw.grads) or set(range(1, b1 - b0 + 1)) - freed_b != grads_made:
            bw.ok = False
            return
        bw.events = events
        bw.nuids = b1 - b0
        bw.first = b0
        kernels = self.owner.kernels
        bw.attention = kernels.attention_since(self.noted) if kernels is not None else []

    def _grad(self, g: torch.Tensor | None, b0: int, b1: int, made: set[int]) -> tuple[Any, ...]:
        if g is None:
            return ("none",)
        uid = self.owner.rec.uid_of(g)
        if uid is not None and b0 < uid <= b1:
            made.add(uid - b0)
            return ("new", uid - b0, tensor_key(g))
        if uid in self.gouts and tensor_key(g) == self.gout_keys[self.gouts[uid]]:
            return ("gout", self.gouts[uid])
        return ("bad",)


class Replayed:
    """What one replayed call's autograd node needs for its backward."""

    def __init__(self, owner: Any, done: Any, paths: list[str], params: list[int | None], subs: list[Any],
                 leaves: list[Any], shift: int, made: dict[int, torch.Tensor]) -> None:
        self.owner, self.done, self.paths, self.params, self.shift = owner, done, paths, params, shift
        self.own = params_of(subs)
        self.made = made  # the outputs made (relative storage id -> tensor), until the node has them
        self.storages: list[Any] = []
        self.out_keys: dict[int, int] = {}  # relative storage id -> the output storage's address (no reference)
        # inputs the recorded call's graph saved are held as its graph would hold them
        self.held: dict[int, Any] = {i: leaves[i] for i in done.held}
        self.leaf_keys = {i: x.untyped_storage()._cdata for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)}
        self.grad_in = list({id(x): x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad}.values())

    def backward(self, grads: tuple[Any, ...]) -> list[Any]:
        try:
            return self._backward(grads)
        except ReplayMismatch:
            raise
        except Exception as exc:  # no model code runs here: whatever failed is the replay's, not the model's
            raise ReplayMismatch(f"a replayed block's backward failed: {exc}") from exc

    def _backward(self, grads: tuple[Any, ...]) -> list[Any]:
        bw: Backward | None = getattr(self.done, "backward", None)
        if bw is None or not bw.ok:
            raise ReplayMismatch("a replayed block's backward has no recorded backward to replay")
        if [p.grad is not None for p in self.own] != bw.has_grad:
            raise ReplayMismatch("a replayed block's parameters hold gradients its recorded call's did not")
        rec = self.owner.rec
        where = dict(zip(bw.paths, self.paths))
        weights = dict(zip(bw.params, self.params))
        ev = rec.events
        base, b0 = len(ev), rec._uid
        rec._uid += bw.nuids
        rec.param_casts.extend(b0 + u for u in bw.casts)
        frees = iter(bw.frees)
        nxt = next(frees, None)
        while nxt is not None and nxt[0] < 0:  # freed before the block's first operator ran
            self._free(nxt, base, b0, grads)
            nxt = next(frees, None)
        for i, e in enumerate(bw.events):
            ev.append(OpEvent(e.op, where[e.module], e.phase, e.flops, e.macs, e.kind, e.bytes_read,
                              e.bytes_written, e.out_shapes, e.out_dtypes,
                              [[b0 + u - bw.first, n] for u, n in e.allocs] if e.allocs else [],
                              e.scratch, [weights[w] for w in e.weights] if e.weights else [], e.transposed,
                              e.problem, e.loop))
            while nxt is not None and nxt[0] == i:
                self._free(nxt, base, b0, grads)
                nxt = next(frees, None)
        n = len(rec.frees)
        self.held.clear()  # the inputs (and saved outputs) another holder keeps: letting them go must free nothing
        self.storages = []
        if len(rec.frees) != n:
            raise ReplayMismatch("an input of a replayed block was freed at the end of its backward")
        if self.owner.kernels is not None and bw.attention:
            self.owner.kernels.add_attention(bw.attention)
        made: dict[int, torch.Tensor] = {}
        out = [self._make(k, b0, grads, made) for k in bw.inputs]
        with _disable_current_modes():
            for p, k in zip(self.own, bw.grads):
                if k[0] == "new":
                    p.grad = self._make(k, b0, grads, made)
        rec._folded = None
        return out

    def _free(self, f: tuple[int, str, int, int], base: int, b0: int, grads: tuple[Any, ...]) -> None:
        rec = self.owner.rec
        after, kind, value, nbytes = f
        if kind == "l":
            st = self.leaf_keys.get(value)
            for i in [i for i in self.held if self.leaf_keys[i] == st]:
                del self.held[i]  # dropped where the recorded graph let its own go: freed if no one else holds it
            return
        if kind == "b":
            uid = b0 + value
        elif kind == "f":
            uid = self.shift + value
        else:
            key = self.out_keys.get(value) if kind == "o" else grads[value].untyped_storage()._cdata
            entry = rec.live.get(key) if key is not None else None
            if entry is None:
                raise ReplayMismatch(f"a replayed block's output or gradient is not the storage its recorded one was "
                                     f"({kind})")
            uid = entry[0]
            del rec.live[key]  # freed here, as the recorded one was: its finalizer must not free it again
        rec.frees.append(MemFree(after=base + after, storage=uid, nbytes=nbytes))

    def _make(self, k: tuple[Any, ...], b0: int, grads: tuple[Any, ...], made: dict[int, torch.Tensor]) -> Any:
        if k[0] == "none":
            return None
        if k[0] == "gout":
            return grads[k[1]]
        _, rel, key = k
        with _disable_current_modes():
            t = tensor_like(key, made[rel].untyped_storage() if rel in made else None, self.done.mode)
        if rel not in made:
            made[rel] = t
            self.owner.rec.adopt(t, b0 + rel)
        return t


class BlockFunction(torch.autograd.Function):
    """One autograd node for a replayed block: its outputs made in the forward, its recorded
    backward replayed in the backward."""

    @staticmethod
    def forward(ctx: Any, state: Replayed, make: Any, *inputs: Any) -> Any:  # noqa: ARG004
        ctx.state = state
        outs, plain, saved = make()
        if plain:
            ctx.mark_non_differentiable(*plain)
        # outputs the recorded graph saved: their storages held as it held them (the storage, not the
        # tensor: no cycle through the node, and no operator recorded as saving one would be)
        state.storages = [t.untyped_storage() for t in saved]
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        return (None, None, *ctx.state.backward(grads))


def role(owner: Any, done: Any, mod: Any) -> str:
    """What a call equal to ``done``'s does in a training step: "last" (the last module of its group
    foreseen to make an equal call: traced in full, its backward recorded), "replay", or "full".
    Only siblings of the recorded module (children of one container, as a model's layers are)
    replay it: a block elsewhere may sit in another context (its input also read by a residual
    add around it, or not), and the engine's summing of an input's gradients falls inside a
    block's backward."""
    if done.matching is None:
        paths = owner.stack.paths
        parent = paths.get(id(done.module), "?").rpartition(".")[0]
        done.matching = []
        for g in owner.group_of.get(id(mod), []):
            s = owner._structure(g) if paths.get(id(g), "?").rpartition(".")[0] == parent else None
            if s is not None and s[0] == done.skey and equal_reads(done, s[1], owner._known):
                done.matching.append(id(g))
    if id(mod) not in done.matching:
        return "full"
    return "last" if done.matching[-1] == id(mod) else "replay"


def last_call(owner: Any, done: Any, subs: list[Any], original: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
              leaves: list[Any]) -> Any:
    """Trace the last call of a key in full, and record its backward for the replayed calls."""
    rec, stack = owner.rec, owner.stack
    ev0, fr0, uid0 = len(rec.events), len(rec.frees), rec._uid
    owner.busy = True
    try:
        out = original(*args, **kwargs)
    finally:
        owner.busy = False
    mine = [stack.paths.get(id(m), "?") for _, m in subs]
    now = [rec.param_index.get(p.untyped_storage()._cdata) for p in params_of(subs)]
    same = forward_equal(rec, done, mine, now, ev0, fr0, uid0)
    out_leaves, _ = tree_flatten(out)
    grads = [x for x in out_leaves if isinstance(x, torch.Tensor) and x.requires_grad]
    out_uids = {u - uid0: i for i, x in enumerate(out_leaves) if isinstance(x, torch.Tensor)
                for u in [rec.uid_of(x) or 0] if u > uid0}
    LastCall(owner, done, subs, leaves, uid0, grads, out_uids, same and bool(grads))
    return out


def node_outputs(state: Replayed, make: Any) -> list[Any]:
    """A replayed call's outputs in a training step: the new ones made by one autograd node
    (:class:`BlockFunction`) whose backward replays the recorded one, the others (inputs
    returned as they are, plain values) as the forward's replay makes them."""
    outs = state.done.outs

    def made_in_node() -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        new = [t for t in make(("new",)) if t is not None]
        kinds = [o for o in outs if o.kind == "new"]
        return (new, [t for t, o in zip(new, kinds) if not o.key[6]],
                [t for t, o in zip(new, kinds) if o.uid in state.done.saved_outs])

    new = iter(BlockFunction.apply(state, made_in_node, *state.grad_in))
    state.grad_in = []  # the node holds only the inputs its recorded graph saved
    state.out_keys = {u: t.untyped_storage()._cdata for u, t in state.made.items()}
    state.made = {}
    return [next(new) if o.kind == "new" else x for o, x in zip(outs, make(("same", "value", "view")))]
