"""A packed attention step, priced from the operators it runs.

transformers' continuous batching with sdpa (or eager) attention runs a step as one sequence
of every scheduled token: in each layer the keys and values the step reads are gathered from
the paged cache, repeated to every query head (``repeat_kv``: an ``expand`` and a ``reshape``
that copies them, a view where there is one key-value head), and one
``scaled_dot_product_attention`` runs every query against every key under a block-diagonal
additive mask (``generation/continuous_batching/input_outputs.py``,
``integrations/sdpa_attention.py``, release 5.24.0). The traced decode step prices each
request's queries against its own keys, the keys its cache appends copied once; the gather
copies the same bytes. Beyond it the packed step pays the repeat of every key read and the
attention's query-key pairs beyond each request's own.

Both are priced by the tool's own pricer on the accelerator at hand: a layer's repeat and
masked attention are traced at three sizes (``QUERIES`` queries over ``KEYS`` and ``2 x KEYS``
keys, twice the queries over ``2 x KEYS``), and the differences give the seconds per key read
and per query-key pair; from the first, what the traced step already pays per key (each
request's attention over its own keys, the key-value heads shared as ``enable_gqa`` shares
them) is taken off. Nothing here is fitted to continuous-batching runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from ...dtypes import parse_dtype
from ...hardware.db import Accelerator
from ...trace.records import Trace

KEYS, QUERIES = 512, 16  # the traced sizes (keys, queries) the per-key and per-pair prices come from


@dataclass(frozen=True)
class AttentionShape:
    """A model's attention as the packed step runs it: query heads, key-value heads, head size,
    attention layers and the activations' dtype name."""

    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    dtype: str = "fp32"


class _PackedLayer(nn.Module):
    """One layer's packed attention: keys and values repeated to the query heads, one masked sdpa."""

    def __init__(self, s: AttentionShape) -> None:
        super().__init__()
        self.s = s

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        s = self.s
        rep = s.heads // s.kv_heads
        if rep > 1:  # transformers' repeat_kv
            n = k.shape[2]
            k = k[:, :, None].expand(1, s.kv_heads, rep, n, s.head_dim).reshape(1, s.heads, n, s.head_dim)
            v = v[:, :, None].expand(1, s.kv_heads, rep, n, s.head_dim).reshape(1, s.heads, n, s.head_dim)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class _OwnLayer(nn.Module):
    """One layer of the traced step's attention: each request's query over its own keys."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)


@functools.lru_cache(maxsize=64)
def _layer_trace(s: AttentionShape, queries: int, keys: int, packed: bool, device: str) -> Trace:
    """One layer's attention as traced for ``device``: packed, ``queries`` queries over ``keys``
    keys; or (``packed`` False) ``queries`` requests of one query, each over ``keys`` keys of its
    own. Traced once per shape, priced on every accelerator asked."""
    from ...trace.tracer import trace_model

    dt = parse_dtype(s.dtype)
    batch, q_len = (1, queries) if packed else (queries, 1)

    def inputs(device: str) -> tuple[tuple[torch.Tensor, ...], dict[str, object]]:
        kv = [torch.empty(batch, s.kv_heads, keys, s.head_dim, dtype=dt, device=device) for _ in range(2)]
        q = torch.empty(batch, s.heads, q_len, s.head_dim, dtype=dt, device=device)
        mask = [torch.empty(1, 1, queries, keys, dtype=dt, device=device)] if packed else []
        return (q, *kv, *mask), {}

    module = _PackedLayer(s) if packed else _OwnLayer()
    return trace_model(module, inputs, name="attention", device=device, tensors="meta")


def _layer_s(s: AttentionShape, acc: Accelerator, queries: int, keys: int, packed: bool = True) -> float:
    """Seconds of one layer's attention (:func:`_layer_trace`) priced on ``acc``."""
    from ..kernels.roofline import estimate_latency

    device = "cpu" if acc.kind == "cpu" else "cuda"
    return estimate_latency(_layer_trace(s, queries, keys, packed, device), acc).time_s


def packed_prices(s: AttentionShape, acc: Accelerator) -> tuple[float, float]:
    """Seconds per key read and per query-key pair beyond each request's own that a packed step
    adds on ``acc`` to the traced step, every layer."""
    short, long = _layer_s(s, acc, QUERIES, KEYS), _layer_s(s, acc, QUERIES, 2 * KEYS)
    more = _layer_s(s, acc, 2 * QUERIES, 2 * KEYS)
    pair = max(more - long, 0.0) / (QUERIES * 2 * KEYS)
    key = max((long - short) / KEYS - QUERIES * pair, 0.0)
    # the traced step's own attention per key (QUERIES requests, each over its own keys)
    own = max(_layer_s(s, acc, QUERIES, 2 * KEYS // QUERIES, packed=False)
              - _layer_s(s, acc, QUERIES, KEYS // QUERIES, packed=False), 0.0) / KEYS
    return max(key - own, 0.0) * s.layers, pair * s.layers
