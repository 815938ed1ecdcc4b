"""Selective activation checkpointing as torchtitan's per-operator policy runs it: each block keeps
its attention's output and its odd-numbered matmuls' (q, v and gate in a Llama block; the down
projection's output leaves the block and is never recomputed), and recomputes the rest in the
backward. Worked by hand on the tiny Llama config (hidden 128, 4 heads of 32, 2 key/value heads,
MLP 344, 2 layers) at 2 x 128 tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_footprint as tfp
from torch_footprint.cli import main

TINY = str(Path(__file__).parents[1] / "configs" / "llama-tiny")
TOKENS = 2 * 128
LAYERS = 2


def _backward_flops(ac: str) -> int:
    p = tfp.predict(TINY, "h100-sxm", "2,128:int64", train=True, optimizer="adamw", ac=ac)
    return sum(o.flops for o in p.ops if o.phase == "backward")


def test_selective_keeps_attention_and_every_other_matmul() -> None:
    # kept per block, so not recomputed: q (2 x 256 tokens x 128 x 128), v (2 x 256 x 128 x 64: two
    # key/value heads of 32), gate (2 x 256 x 128 x 344), and the causal attention: 128 x 129 / 2 =
    # 8,256 query-key pairs x 2 sequences x 4 heads x (4 x 32 FLOPs for QK^T and PV + 5 for the softmax)
    q = 2 * TOKENS * 128 * 128
    v = 2 * TOKENS * 128 * 64
    gate = 2 * TOKENS * 128 * 344
    attention = 128 * 129 // 2 * 2 * 4 * (4 * 32 + 5)
    assert (q, v, gate, attention) == (8_388_608, 4_194_304, 22_544_384, 8_784_384)
    full, selective, none = _backward_flops("full"), _backward_flops("selective"), _backward_flops("none")
    assert full - selective == LAYERS * (q + v + gate + attention)
    assert none < selective < full


def test_selective_memory_lies_between_none_and_full() -> None:
    totals = {ac: tfp.memory(TINY, "2,128:int64", train=True, optimizer="adamw", ac=ac).total
              for ac in ("none", "selective", "full")}
    assert totals["none"] > totals["selective"] > totals["full"]
    note = tfp.memory(TINY, "2,128:int64", train=True, optimizer="adamw", ac="selective").notes
    assert any("selective, per operator" in n for n in note)


@pytest.mark.parametrize("spelling", ["selective", "op"])
def test_the_command_line_takes_torchtitans_names(spelling: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", TINY, "--input-ids", "2,128", "--train", "--ac", spelling]) == 0
    assert "selective, per operator" in capsys.readouterr().out
    assert main(["memory", TINY, "--input-ids", "2,128", "--ac", spelling]) == 2
    assert "--ac selective only changes training memory: add --train" in capsys.readouterr().err
