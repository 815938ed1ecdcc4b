"""Megatron-core's selective recompute (``--recompute-granularity selective --recompute-modules``):
parts of each transformer block recomputed in the backward rather than kept.

Megatron-core recomputes its modules two ways (megatron/core/transformer/transformer_config.py,
``recompute_modules``; transformer_layer.py; moe/experts.py):

* **Output-discarding** (``CheckpointWithoutOutput``, megatron/core/tensor_parallel/random.py):
  ``layernorm`` (a block's input and pre-MLP norms) and ``moe_act`` (the experts' activation
  between their two matmuls). The part runs as usual; once the matmul that reads its output has
  run, the output's storage is freed, and the backward recomputes it from the input the part
  keeps anyway (a norm's input, the first expert matmul's output) before that matmul's backward
  needs it. Traced here with saved-tensor hooks: a tensor such a part returned is saved as a
  recipe (the part and its inputs), so nothing holds it once the forward moves on, and unpacking
  the recipe in the backward runs the part again, once for all who saved it.
* **Whole-module checkpointing** (``tensor_parallel.checkpoint``): ``mlp`` (a dense MLP: Megatron
  applies it to the blocks whose MLP is not a mixture of experts), ``moe`` (the mixture-of-experts
  layer) and ``shared_experts``: the module keeps its input and output, its insides are recomputed
  (torch.utils.checkpoint, non-reentrant).

* **Core attention** (``core_attn``, Megatron-core's default when the granularity is selective:
  ``checkpoint_core_attention``, transformer/attention.py): the attention between the projections,
  checkpointed whole. It keeps the query, key and value it was called with (and a mask); the
  scores, the softmax and, under a fused kernel, its output and log-sum-exp are not kept, and
  the backward runs the attention's forward again. Traced at the call a Hugging Face attention
  module makes to its attention function (transformers' ``AttentionInterface``, whichever is
  set: eager, SDPA, the fused path), for every attention module inside the repeated blocks.

* **Multi-latent attention's up-projections** (``mla_up_proj``, multi_latent_attention.py:
  ``qkv_up_checkpoint``, a ``CheckpointWithoutOutput``): the query, key and value that the
  up-projections and the rotary embedding make from the compressed latents are dropped once the
  core attention has read them, and remade before its backward. Traced as the output-discarding
  parts are, at the call the attention module (one with a ``kv_b_proj``: DeepSeek-V2 and V3,
  Kimi, LongCat) makes to its attention function: the three tensors it passes are saved as a
  recipe, which runs the module's forward again up to that call. That remakes the
  down-projections too, which Megatron keeps: about a fifth more than its recompute's FLOPs on
  DeepSeek-V3 (2 x 7,168 x 2,112 a token, against 2 x (1,536 x 24,576 + 512 x 32,768))."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..errors import FootprintError
from ..settings.training import DISCARDING
from .setups import Patches, longest_run, own_forward

MLP_NAMES = ("mlp", "feed_forward", "block_sparse_moe", "ffn")  # a block's MLP child as Hugging Face names it
SHARED_NAMES = ("shared_experts", "shared_expert")


class _Recipe:
    """How to remake a discarded output: the part, its inputs, and the output once remade."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args, self.value = fn, args, None

    def remake(self) -> Any:
        if self.value is None:
            with torch.no_grad():
                self.value = self.fn(*self.args)
        return self.value


class _Pick:
    """The ``index``-th output of a recipe that remakes several (its storage's base, for ``base``)."""

    def __init__(self, recipe: _Recipe, index: int, base: bool) -> None:
        self.recipe, self.index, self.base = recipe, index, base

    def remake(self) -> Any:
        out = self.recipe.remake()[self.index]
        return out._base if self.base and out._base is not None else out


class _Captured(Exception):  # noqa: N818 (not an error: how a replayed forward hands back what it reached)
    """Raised at the attention call of a forward replayed to remake its query, key and value."""

    def __init__(self, qkv: tuple[Any, ...]) -> None:
        super().__init__()
        self.qkv = qkv


class _Discarded:
    """What a saved-tensor hook keeps in place of a discarded output (or a view of it)."""

    def __init__(self, recipe: _Recipe | _Pick, t: torch.Tensor) -> None:
        self.recipe, self.size, self.stride, self.offset = recipe, t.size(), t.stride(), t.storage_offset()
        self.same = t._base is None

    def unpack(self) -> torch.Tensor:
        out = self.recipe.remake()
        return out if self.same else out.as_strided(self.size, self.stride, self.offset)


class _Registry:
    """The outputs of the output-discarding parts made in this forward, by id, each with its recipe."""

    def __init__(self) -> None:
        self.made: dict[int, tuple[weakref.ref[torch.Tensor], _Recipe | _Pick]] = {}
        self.stack: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []  # attention forwards
        self.replaying: set[int] = set()  # the attention modules whose forward runs again to remake its inputs

    def note(self, out: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """Remember ``out`` as made by ``fn`` from ``args``, for as long as ``out`` lives (the
        registry must not keep the inputs alive: only the hooks' recipes in the graph do)."""
        if isinstance(out, torch.Tensor) and torch.is_grad_enabled():
            self.remember(out, _Recipe(fn, args))

    def remember(self, out: torch.Tensor, recipe: _Recipe | _Pick) -> None:
        key = id(out)
        self.made[key] = (weakref.ref(out), recipe)
        weakref.finalize(out, self.made.pop, key, None)

    def pack(self, t: torch.Tensor) -> Any:
        base = t if t._base is None else t._base
        hit = self.made.get(id(base))
        if hit is not None and hit[0]() is base:
            return _Discarded(hit[1], t)
        return t

    @staticmethod
    def unpack(x: Any) -> torch.Tensor:
        return x.unpack() if isinstance(x, _Discarded) else x


def _discarding(registry: _Registry, fn: Callable[..., Any], *args: Any) -> Any:
    out = fn(*args)
    registry.note(out, fn, args)
    return out


def _whole(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn`` checkpointed; the random generators' states not stashed (a GPU run keeps them in host memory,
    not the device's, and the trace has no randomness to replay)."""
    from torch.utils.checkpoint import checkpoint

    if not torch.is_grad_enabled():
        return fn(*args, **kwargs)
    return checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=False, **kwargs)


def _stacked(registry: _Registry, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """An attention module's forward, its inputs on the registry's stack while it runs."""
    registry.stack.append((fn, args, kwargs))
    try:
        return fn(*args, **kwargs)
    finally:
        registry.stack.pop()


def _replayed(registry: _Registry, module: nn.Module, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run an attention module's forward again up to its attention call: the query, key and value."""
    registry.replaying.add(id(module))
    try:
        fn(*args, **kwargs)
    except _Captured as c:
        return c.qkv
    finally:
        registry.replaying.discard(id(module))
    raise FootprintError(f"--recompute-modules mla_up_proj: {type(module).__name__} made no attention call")


def _up_projected(registry: _Registry, module: nn.Module, qkv: tuple[Any, ...]) -> None:
    """Save the query, key and value of ``module``'s attention call (the value's storage: a view of
    the up-projection's output) as recipes that replay its forward."""
    if not torch.is_grad_enabled() or not registry.stack:
        return
    fn, args, kwargs = registry.stack[-1]
    recipe = _Recipe(functools.partial(_replayed, registry, module, fn, *args, **kwargs), ())
    for i, t in enumerate(qkv):
        if isinstance(t, torch.Tensor):
            registry.remember(t if t._base is None else t._base, _Pick(recipe, i, t._base is not None))


def _hooked(registry: _Registry, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    with torch.autograd.graph.saved_tensors_hooks(registry.pack, registry.unpack):
        return fn(*args, **kwargs)


def _mlp_of(block: nn.Module) -> nn.Module | None:
    for name in MLP_NAMES:
        mod = getattr(block, name, None)
        if isinstance(mod, nn.Module):
            return mod
    return None


def _is_moe(mod: nn.Module) -> bool:
    return any(name.split(".")[-1] == "experts" for name, _ in mod.named_modules())


def _attention_modules(block: nn.Module) -> list[nn.Module]:
    """A block's Hugging Face attention modules: those that call transformers' attention functions
    (they carry the model's config, whose ``_attn_implementation`` picks the function)."""
    return [m for m in block.modules() if "Attention" in type(m).__name__
            and hasattr(getattr(m, "config", None), "_attn_implementation")]


def _attention_calls(patches: Patches, registry: _Registry, whole: set[int], latent: set[int]) -> None:
    """At every call to transformers' attention functions: from a module in ``latent``, save its query,
    key and value as recipes (:func:`_up_projected`); from one in ``whole``, checkpoint the call."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    lookup = ALL_ATTENTION_FUNCTIONS.get_interface

    def call(fn: Callable[..., Any], module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        if id(module) in registry.replaying:
            raise _Captured(args[:3])
        if id(module) in latent:
            _up_projected(registry, module, args[:3])
        if id(module) in whole:
            return _whole(fn, module, *args, **kwargs)
        return fn(module, *args, **kwargs)

    def get_interface(name: str, default: Callable[..., Any]) -> Callable[..., Any]:
        return functools.partial(call, lookup(name, default))

    patches.put(ALL_ATTENTION_FUNCTIONS, "get_interface", get_interface)  # type: ignore[arg-type]


def enable_recompute(model: nn.Module, modules: tuple[str, ...]) -> tuple[str, Callable[[], None]]:
    """Recompute ``modules`` (Megatron's names, checked by the settings) of each repeated block of ``model``:
    what was set up, and a function that undoes it."""
    run = longest_run(model, (nn.ModuleList,))
    if run is None:
        raise FootprintError("--recompute-modules: found no run of repeated blocks in this model")
    blocks = run[1]
    registry = _Registry()
    patches = Patches()
    put = patches.put
    counts: dict[str, int] = dict.fromkeys(modules, 0)

    for block in blocks:
        mlp = _mlp_of(block)
        if "layernorm" in modules:
            for child in block.children():
                if "Norm" in type(child).__name__:
                    put(child, "forward", functools.partial(_discarding, registry, own_forward(child)))
                    counts["layernorm"] += 1
        if "moe_act" in modules and mlp is not None:
            for mod in mlp.modules():
                gate = getattr(type(mod), "_apply_gate", None)
                if callable(gate):  # transformers' experts (use_experts_implementation)
                    own = vars(mod).get("_apply_gate") or functools.partial(gate, mod)
                    put(mod, "_apply_gate", functools.partial(_discarding, registry, own))
                    counts["moe_act"] += 1
        if mlp is not None:
            moe = _is_moe(mlp)
            if ("mlp" in modules and not moe) or ("moe" in modules and moe):
                put(mlp, "forward", functools.partial(_whole, own_forward(mlp)))
                counts["moe" if moe else "mlp"] += 1
            elif "shared_experts" in modules and moe:
                for name in SHARED_NAMES:
                    shared = getattr(mlp, name, None)
                    if isinstance(shared, nn.Module):
                        put(shared, "forward", functools.partial(_whole, own_forward(shared)))
                        counts["shared_experts"] += 1
    attention = [m for block in blocks for m in _attention_modules(block)]
    whole = attention if "core_attn" in modules else []
    latent = [m for m in attention if isinstance(getattr(m, "kv_b_proj", None), nn.Module)] \
        if "mla_up_proj" in modules else []
    counts.update({name: len(mods) for name, mods in (("core_attn", whole), ("mla_up_proj", latent))
                   if name in modules})
    for m in latent:
        put(m, "forward", functools.partial(_stacked, registry, own_forward(m)))
    if whole or latent:
        _attention_calls(patches, registry, {id(m) for m in whole}, {id(m) for m in latent})
    if any(counts.get(m) for m in DISCARDING):
        put(model, "forward", functools.partial(_hooked, registry, own_forward(model)))

    def undo() -> None:
        patches.undo()
        registry.made.clear()
        registry.stack.clear()

    what = ", ".join(f"{name} ({n or 'none in this model'})" for name, n in counts.items())
    return f"Megatron-core's selective recompute of {what} of {len(blocks)} blocks", undo
