"""Blocks equal but for a submodule that passes its input through (a drop path's rate growing
with depth): replayed, and the trace stays the trace of every call. Blocks that only look so
(the parent reads the rate, or the submodule stops passing its input through) run in full.

Each case traces the model twice, every call in full and replaying, and compares every record
and every figure derived from them (tests/fixtures/reuse_check.py); the counts of calls recorded
and replayed are worked out from each model's structure below.
"""

from __future__ import annotations

import torch
from reuse_check import assert_same, traced_both
from torch import nn
from torchvision.ops import StochasticDepth

from torch_footprint.sources import prepare


class Residual(nn.Module):
    """x + drop(fc(norm(x))); with ``peek`` the block itself reads its drop path's rate."""

    def __init__(self, drop: nn.Module, peek: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)
        self.drop = drop
        self.peek = peek

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.drop(self.fc(self.norm(x)))
        if self.peek and self.drop.p > 0.25:  # an extra operator where the rate is high
            y = y * 2
        return x + y


class Gate(nn.Module):
    """Passes its input through when ``k`` is 0, scales it otherwise."""

    def __init__(self, k: float) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.k == 0 else x * self.k


class Stack(nn.Module):
    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _inputs(device: str):
    return (torch.empty(4, 8, device=device),), {}


def _both(model: nn.Module, train: bool = False, **kw):
    model = model.to("meta").train(train)
    fast, full, stats = traced_both(model, _inputs, **kw)
    assert_same(fast, full)
    return fast, stats


def _rates(n: int = 6) -> list[float]:
    return [i / 10 for i in range(n)]  # 0.0, 0.1, ..., 0.5: every block's rate its own


def test_drop_path_rate_growing_with_depth_replays() -> None:
    _, stats = _both(Stack([Residual(StochasticDepth(p, "row")) for p in _rates()]))
    assert (stats.recorded, stats.replayed) == (1, 5)


def test_block_reading_its_drop_paths_rate_runs_in_full() -> None:
    trace, stats = _both(Stack([Residual(StochasticDepth(p, "row"), peek=True) for p in _rates()]))
    # the rate differs in every block and the block reads it itself: nothing is replayed
    assert stats.replayed == 0
    extra = [e.module for e in trace.events if e.op == "aten.mul.Tensor" and e.module.count(".") == 1]
    assert extra == ["layers.3", "layers.4", "layers.5"]


def test_submodule_that_stops_passing_its_input_through_is_told_apart() -> None:
    ks = [0, 0, 2, 2, 0]
    trace, stats = _both(Stack([Residual(Gate(k)) for k in ks]))
    # layers 0 (k 0, a pass-through) and 2 (k 2, a multiply) recorded; 1 and 4 replay 0, 3 replays 2
    assert (stats.recorded, stats.replayed) == (2, 3)
    scaled = [e.module for e in trace.events if e.op == "aten.mul.Tensor"]
    assert scaled == ["layers.2.drop", "layers.3.drop"]


def test_drop_path_in_training_runs_its_operators() -> None:
    # in training a drop path with a rate draws its mask: no pass-through, each block its own
    trace, _ = _both(Stack([Residual(StochasticDepth(p, "row")) for p in _rates()]), train=True, backward=True)
    assert {e.module for e in trace.events if e.op.startswith("aten.bernoulli")} == {
        f"layers.{i}.drop" for i in range(1, 6)}


def test_torchvision_drop_path_blocks_replay() -> None:
    # ConvNeXt-T: stages of 3, 3, 9 and 3 equal blocks but for their drop-path rate. The first block
    # of stages 2 to 4 gets a downsampling convolution's contiguous output, the blocks after it a
    # block's channels-last one (its permutes): those stages record two calls; stage 1 gets the
    # stem's channels-last output and records one
    work = prepare("convnext_tiny")
    work.model.eval()
    fast, full, stats = traced_both(work.model, work.make_inputs())
    assert_same(fast, full)
    assert (stats.recorded, stats.replayed) == (1 + 2 * 3, (3 - 1) + (3 - 2) + (9 - 2) + (3 - 2))
