"""Repeated blocks that write a key/value cache: the serving trace (a prefill and two decode steps
with the model's own cache) replays equal layers, and gives what tracing every layer gives.

Each case traces twice, every call in full (``reuse=False``) and replaying, and compares every
record and figure (tests/fixtures/reuse_check.py), and for ``footprint llm`` the whole answer.
The number of calls replayed is worked out from the config's layer counts, not read from the code
under test; the cases where layers look alike but are not must replay nothing they cannot prove.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from reuse_check import assert_same
from torch import nn
from transformers import DynamicCache

import torch_footprint as tfp
from torch_footprint.estimate.llm import serve_model
from torch_footprint.estimate.llm.trace import trace_serving
from torch_footprint.settings import Serving, Target, Workload
from torch_footprint.trace import reuse, trace_model

CONFIGS = Path(tfp.__file__).parent / "sources" / "configs"


def _both(name: str, prompt: int = 32) -> tuple[Any, Any, list[tuple[int, int]]]:
    """(replayed, full) serving traces, and (recorded, replayed) of each of the three reused traces."""
    counts: list[tuple[int, int]] = []
    original = reuse.BlockReuse.remove

    def remove(self: reuse.BlockReuse) -> None:  # the end of each traced run: its counts
        counts.append((reuse.LAST.recorded, reuse.LAST.replayed))
        original(self)

    full = trace_serving(name, batch=1, prompt=prompt, reuse=False)
    reuse.BlockReuse.remove = remove  # type: ignore[method-assign]
    try:
        fast = trace_serving(name, batch=1, prompt=prompt)
    finally:
        reuse.BlockReuse.remove = original  # type: ignore[method-assign]
    return fast, full, counts


def _same_serving(a: Any, b: Any) -> None:
    assert_same(a.prefill, b.prefill)
    assert_same(a.decode[0], b.decode[0])
    assert_same(a.decode[1], b.decode[1])
    assert a.layers == b.layers and a.op_layer == b.op_layer and a.notes == b.notes
    assert a.kv_bytes(1000) == b.kv_bytes(1000)


def test_deepseek_v3_llm_replays_its_layers_with_the_cache() -> None:
    # 3 dense layers, then 58 of experts (first_k_dense_replace 3, 61 layers): each kind's first
    # call recorded, the other 2 + 57 replayed, in the prefill and in each decode step
    c = json.loads((CONFIGS / "deepseek-ai--DeepSeek-V3.json").read_text())
    dense, n = c["first_k_dense_replace"], c["num_hidden_layers"]
    fast, full, counts = _both("hf:deepseek-ai/DeepSeek-V3")
    _same_serving(fast, full)
    assert counts[:3] == [(2, (dense - 1) + (n - dense - 1))] * 3


def test_llm_answer_is_the_same_with_and_without_reuse() -> None:
    # the whole `footprint llm` answer (memory, fits, TTFT, TPOT, tokens/s on two GPUs)
    def answer(flag: bool) -> dict[str, Any]:
        return serve_model(Workload(model="hf:meta-llama/Llama-3.1-8B", reuse=flag), Serving(prompt=256, output=64),
                           target=Target(gpu=["h100-sxm", "a100-sxm-80gb"])).to_dict()

    assert answer(True) == answer(False)


def test_sliding_and_global_layers_keyed_apart() -> None:
    # gemma-2 alternates sliding-window and global layers (their cache layers of two classes):
    # two kinds, each recorded once per trace
    c = json.loads((CONFIGS / "google--gemma-2-9b.json").read_text())
    fast, full, counts = _both("hf:google/gemma-2-9b")
    _same_serving(fast, full)
    assert counts[:3] == [(2, c["num_hidden_layers"] - 2)] * 3


# --------------------------------------------------------------------------- alike, but not provably equal

class Layer(nn.Module):
    def __init__(self, idx: int, how: str) -> None:
        super().__init__()
        self.layer_idx = idx
        self.how = how
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor, cache: Any = None) -> torch.Tensor:
        h = self.fc(self.norm(x))
        if self.how == "branch" and self.layer_idx % 2:  # the index read for more than the slot
            h = h @ self.fc.weight
        if self.how == "length":  # the cache read outside update (its first layer's length)
            h = h * float(cache.get_seq_length() + 1)
        k, v = cache.update(h, h, self.layer_idx)
        return x + (k.sum(-2, keepdim=True) + v.sum(-2, keepdim=True))


class Model(nn.Module):
    def __init__(self, how: str, n: int = 4, passes: int = 1, keep: list[Any] | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(i, how) for i in range(n))
        self.passes = passes
        self.keep = keep

    def forward(self, x: torch.Tensor, cache: Any) -> torch.Tensor:
        for _ in range(self.passes):  # a second pass over the same cache: the slots it wrote are replaced
            for layer in self.layers:
                x = layer(x, cache)
            if self.keep is not None:  # layer 2's keys held outside the cache
                self.keep.append(cache.layers[2].keys)
        return x


def _steps(model: nn.Module, reused: bool) -> tuple[list[Any], list[tuple[int, int]]]:
    """A prefill of 5 tokens and two decode steps on one cache (the layers' slots made up front)."""
    cache = DynamicCache()
    cache.layers = [cache.layer_class_to_replicate() for _ in model.layers]
    traces, counts = [], []
    for tokens in (5, 1, 1):
        traces.append(trace_model(model, lambda d, t=tokens: ((torch.empty(1, 1, t, 8, device=d), cache), {}),
                                  reuse=reused))
        counts.append((reuse.LAST.recorded, reuse.LAST.replayed))
    return traces, counts


def _check(model: nn.Module) -> list[tuple[int, int]]:
    model = model.to("meta").eval()
    full, _ = _steps(model, False)
    fast, counts = _steps(model, True)
    for a, b in zip(fast, full):
        assert_same(a, b)
    return counts


def test_equal_layers_replay_with_the_cache() -> None:
    # 4 equal layers: the first recorded, 3 replayed, in each step
    assert _check(Model("plain")) == [(1, 3)] * 3


def test_index_read_for_more_than_the_slot_is_not_replayed() -> None:
    # odd layers add a matmul: the recorded call read layer_idx outside the update call, so its
    # index is compared like any attribute, and every layer's differs: nothing replayed
    assert all(replayed == 0 for _, replayed in _check(Model("branch")))


def test_cache_read_outside_update_is_not_replayed() -> None:
    assert all(replayed == 0 for _, replayed in _check(Model("length")))


def test_slot_replaced_within_a_trace_and_held_elsewhere() -> None:
    # two passes over one cache in each trace: the second pass replaces the slots the first wrote
    # (freed inside each layer's call, at the place the recorded one's was). Each pass's first
    # layer is recorded (its slot empty, then filled), the other 3 replayed
    model = Model("plain", passes=2)
    assert _check(model) == [(2, 6)] * 3
    # layer 2's keys held outside the cache after the first pass: its second call would not free
    # them where the recorded call freed its own, so it runs in full
    keep: list[Any] = []
    assert _check(Model("plain", passes=2, keep=keep)) == [(2, 5)] * 3
