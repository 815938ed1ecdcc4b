"""The peak against the batch size: one line per range of batches, exact where the traces line up."""

from __future__ import annotations

from torch import nn

import torch_footprint as tfp
from torch_footprint.estimate.batch import Piece, envelope
from torch_footprint.report.terminal import render_memory


def test_envelope_worked_by_hand() -> None:
    # operator 1 holds 100 bytes at any batch; operator 2 holds 10 + 5 x batch: they cross at batch 18
    # (100 = 10 + 5 x 18), so operator 2's line is the peak from batch 19 on
    pieces = envelope(1, 2, [100, 15], [100, 20], ["optimizer", "backward"])
    assert pieces == [Piece(1, 100, 0, "optimizer"), Piece(19, 10, 5, "backward")]
    # a line that is never the largest does not appear; one line is one piece
    assert envelope(1, 2, [100, 50], [200, 60], ["forward", "forward"]) == [Piece(1, 0, 100, "forward")]


def test_training_peak_moves_from_the_optimizer_to_the_backward() -> None:
    # AdamW on an MLP: at small batches the optimizer step (two state tensors per parameter) holds the
    # peak, at large batches the activations of the backward do; each piece is checked against a trace
    def model() -> nn.Module:
        return nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512))

    est = tfp.memory(model(), "1,512", train=True, optimizer="adamw", scaling=True)
    pieces = est.scaling.pieces
    assert len(pieces) >= 2 and pieces[0].phase == "optimizer" and pieces[-1].phase == "backward"
    for b in (pieces[1].start - 1, pieces[1].start, 5 * pieces[-1].start):
        piece = [p for p in pieces if p.start <= b][-1]
        traced = tfp.memory(model(), f"{b},512", train=True, optimizer="adamw").peak.peak_bytes
        assert round(piece.fixed + piece.per_sample * b) == traced, b
    text = render_memory(est, width=100)
    assert "NOT affine" not in text and f"batches {pieces[-1].start} and up" in text and "(in the optimizer)" in text


def test_steady_state_step_holds_the_optimizer_state_from_the_start() -> None:
    # AdamW keeps two fp32 tensors per parameter and a 4-byte step counter per parameter tensor;
    # a later step finds them allocated before its forward, the first step allocates them in its step
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
    params, tensors = 256 * 512 + 512 + 512 * 10 + 10, 4
    state = 2 * 4 * params + 4 * tensors
    # at batch 4096 the activations (16 MiB) outweigh the state (1 MiB): the first step's peak is in its backward
    est = tfp.memory(model, "4096,256", train=True, optimizer="adamw")
    first, steady = est.peak, est.steady
    assert first.persistent["optimizer state"] == steady.persistent["optimizer state"] == state
    assert steady.baseline_bytes - first.baseline_bytes == state
    assert steady.breakdown["optimizer state"] == state
    text = render_memory(est, width=100)
    assert first.phase == "backward" and first.breakdown["optimizer state"] == 0
    assert "this is the first training step" in text and "peak, later steps" in text
