"""``footprint llm --attention``: the model's attention run as the engine runs it. Expected
shapes and sizes worked by hand from the tiny Llama config (4 heads, 2 layers, fp32 weights)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torch_footprint.cli import main
from torch_footprint.estimate.llm.trace import trace_serving

pytest.importorskip("transformers")

TINY = str(Path(__file__).parents[1] / "configs" / "llama-tiny")


def _softmaxes(trace) -> list[list[int]]:
    return [e.out_shapes[0] for e in trace.events if "softmax" in e.op]


def test_eager_writes_the_scores_and_a_named_kernel_fuses_them() -> None:
    # eager: each layer's softmax over 1 x 4 heads x 64 x 64 scores; flash2: no softmax written out,
    # one fused attention per layer, priced as FlashAttention-2 (the trace says which)
    eager = trace_serving(TINY, batch=1, prompt=64, attention="eager")
    assert _softmaxes(eager.prefill) == [[1, 4, 64, 64]] * 2
    assert eager.prefill.settings.get("attention_kernel") is None
    flash = trace_serving(TINY, batch=1, prompt=64, attention="flash2")
    assert _softmaxes(flash.prefill) == []
    assert sum("attention" in e.op for e in flash.prefill.events) == 2
    assert flash.prefill.settings["attention_kernel"] == "flash2"
    assert flash.decode[0].settings["attention_kernel"] == "flash2"
    assert any("fused" in n or "attention" in n for n in flash.notes)
    # the cache is the model's whatever runs the attention: 2 layers x (k, v) x 2 kv heads x 32 x 4 bytes
    assert flash.kv_bytes_per_token == eager.kv_bytes_per_token == 2 * 2 * 2 * 32 * 4


def test_the_command_takes_the_kernel_and_refuses_an_unknown_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["llm", TINY, "--gpu", "h100-sxm", "--prompt", "64", "--output", "8", "--attention", "fa3"]) == 0
    assert main(["llm", TINY, "--gpu", "h100-sxm", "--attention", "nonsense"]) == 2
    err = capsys.readouterr().err
    assert "nonsense" in err and "Traceback" not in err
