"""What a language model's cache holds: each layer's bytes per token and fixed state, read
from the cache object a real (or meta) run built, windows checked past their end, latent
caches of multi-head latent attention."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class CacheLayer:
    """One layer's cache, per sequence: ``fixed + per_token x min(tokens, cap)`` bytes."""

    index: int
    kind: str  # the cache layer's class, or "latent" for multi-head latent attention
    per_token: int
    fixed: int = 0
    cap: int | None = None  # tokens kept at most (a sliding window); None: every token

    def bytes_at(self, tokens: int) -> int:
        kept = tokens if self.cap is None else min(tokens, self.cap)
        return self.fixed + self.per_token * kept

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def storage_bytes(obj: Any) -> int:
    """Bytes of the storages a cache object holds: its tensors (attributes, lists, tuples and
    dicts of them) and the cache objects it is made of (a layer combining a linear-attention
    state with a windowed cache keeps each in a layer object of its own), each storage once
    and whole. Whole: a windowed layer keeps its last tokens as a slice of the step's
    concatenation, and the slice keeps all of it alive."""
    seen: set[int] = set()
    storages: set[int] = set()

    def walk(o: Any, depth: int) -> int:
        if id(o) in seen or depth > 6:
            return 0
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            if o.dim() == 0:
                return 0
            st = o.untyped_storage()
            if st._cdata in storages:
                return 0
            storages.add(st._cdata)
            return st.nbytes()
        if isinstance(o, (list, tuple)):
            return sum(walk(v, depth + 1) for v in o)
        if isinstance(o, dict):
            return sum(walk(v, depth + 1) for v in o.values())
        if depth == 0 or (hasattr(o, "__dict__") and not isinstance(o, (type, nn.Module))
                          and type(o).__module__.startswith("transformers.")):
            return sum(walk(v, depth + 1) for v in vars(o).values())
        return 0

    return walk(obj, 0)


@dataclass(frozen=True)
class Latent:
    """A multi-head latent attention layer: the latent's width (cached per token), the
    attention heads, and the rank the values are read at."""

    width: int
    heads: int
    rank: int

    @property
    def macs_per_token(self) -> int:
        """MACs one cached token costs one decode query with the projections absorbed:
        scores over the whole latent (rank + rope part), values over its rank, per head."""
        return self.heads * (self.width + self.rank)


def latents(model: nn.Module) -> dict[int, Latent]:
    """Multi-head latent attention layers (those with a ``kv_a_proj_with_mqa``), by layer."""
    out: dict[int, Latent] = {}
    for m in model.modules():
        proj = getattr(m, "kv_a_proj_with_mqa", None)
        if isinstance(getattr(m, "layer_idx", None), int) and isinstance(proj, nn.Linear):
            heads = int(getattr(m, "num_heads", 0) or getattr(getattr(m, "config", None), "num_attention_heads", 0))
            rank = int(getattr(m, "kv_lora_rank", 0) or getattr(getattr(m, "config", None), "kv_lora_rank", 0))
            out[m.layer_idx] = Latent(proj.out_features, heads, rank)
    return out


def window(layer: Any) -> int | None:
    """The most tokens a cache layer says it keeps: its ``get_max_cache_shape()``, or the
    ``slidingwindow`` of a layer that combines a window with another state (whose maximum
    answers for the other state)."""
    cap_fn = getattr(layer, "get_max_length", None) or getattr(layer, "get_max_cache_shape", None)
    cap = cap_fn() if callable(cap_fn) else -1
    if not (isinstance(cap, int) and cap > 0):
        cap = getattr(layer, "slidingwindow", None)
    return int(cap) if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None


def token_bytes(layer: Any) -> int | None:
    """Bytes one token takes in a windowed layer's keys and values (from their shapes)."""
    keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
    if not (isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor) and keys.dim() >= 2
            and keys.shape[-2] > 0):
        return None
    return (keys.numel() * keys.element_size() + values.numel() * values.element_size()) // int(keys.shape[-2])


def cache_layers(cache: Any, after: tuple[list[int], list[int]], batch: int, prompt: int,
                  latent: dict[int, Latent], elem: int) -> list[CacheLayer]:
    """One :class:`CacheLayer` per layer of the cache, from its bytes after each of the two
    decode steps (``after``), plus one for what the cache object keeps outside its layers (a
    model's own cache class may hold linear-attention states there), if anything."""
    layers = []
    for i, layer in enumerate(cache.layers):
        b1, b2 = after[0][i], after[1][i]
        cap = window(layer)
        slope = (b2 - b1) // batch
        kind = type(layer).__name__
        if i in latent:
            layers.append(CacheLayer(i, "latent", latent[i].width * elem, 0, cap))
        elif slope > 0:
            layers.append(CacheLayer(i, kind, slope, max(b1 // batch - (prompt + 1) * slope, 0), cap))
        elif cap is not None and (per := token_bytes(layer)):  # a full window
            layers.append(CacheLayer(i, kind, per // batch, max(b1 // batch - cap * per // batch, 0), cap))
        else:  # a state of fixed size (a state-space layer), or an empty layer
            layers.append(CacheLayer(i, kind, 0, b1 // batch, None))
    b1, b2 = after[0][-1], after[1][-1]
    if b1 or b2:
        slope = (b2 - b1) // batch
        layers.append(CacheLayer(len(layers), f"{type(cache).__name__} (outside its layers)", max(slope, 0),
                                 max(b1 // batch - (prompt + 1) * max(slope, 0), 0), None))
    return layers
