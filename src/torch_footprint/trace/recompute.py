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

Not priced: ``core_attn`` (the attention between its projections, recomputed under a fused
kernel) and ``mla_up_proj`` (multi-latent attention's up-projections)."""

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


class _Discarded:
    """What a saved-tensor hook keeps in place of a discarded output (or a view of it)."""

    def __init__(self, recipe: _Recipe, t: torch.Tensor) -> None:
        self.recipe, self.size, self.stride, self.offset = recipe, t.size(), t.stride(), t.storage_offset()
        self.same = t._base is None

    def unpack(self) -> torch.Tensor:
        out = self.recipe.remake()
        return out if self.same else out.as_strided(self.size, self.stride, self.offset)


class _Registry:
    """The outputs of the output-discarding parts made in this forward, by id, each with its recipe."""

    def __init__(self) -> None:
        self.made: dict[int, tuple[weakref.ref[torch.Tensor], _Recipe]] = {}

    def note(self, out: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """Remember ``out`` as made by ``fn`` from ``args``, for as long as ``out`` lives (the
        registry must not keep the inputs alive: only the hooks' recipes in the graph do)."""
        if isinstance(out, torch.Tensor) and torch.is_grad_enabled():
            key = id(out)
            self.made[key] = (weakref.ref(out), _Recipe(fn, args))
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
    if any(counts.get(m) for m in DISCARDING):
        put(model, "forward", functools.partial(_hooked, registry, own_forward(model)))

    def undo() -> None:
        patches.undo()
        registry.made.clear()

    what = ", ".join(f"{name} ({n or 'none in this model'})" for name, n in counts.items())
    return f"Megatron-core's selective recompute of {what} of {len(blocks)} blocks", undo
