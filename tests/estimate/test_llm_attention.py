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


GPT_OSS = str(Path(__file__).parents[1] / "configs" / "gpt-oss-tiny")


def _attention_keys(trace) -> list[tuple[int, int]]:
    """(queries, keys) of each attention call the trace ran (one per layer here)."""
    return sorted((c["seq_q"], c["seq_k"]) for c in trace.settings["attention"] for _ in range(c["calls"]))


def test_a_sliding_window_layer_runs_the_blocks_its_window_reaches() -> None:
    # gpt-oss-tiny: a sliding layer (window 16) then a full one. A 512-token prompt under a fused kernel:
    # each block of 128 queries reaches back 15 keys, into the previous block of 128 keys: 2 blocks, so
    # every query against 256 keys (a block-sparse kernel's work), where the masked call ran all 512;
    # the full layer keeps its 512 keys
    fused = trace_serving(GPT_OSS, batch=1, prompt=512, attention="flash2")
    assert _attention_keys(fused.prefill) == [(512, 256), (512, 512)]
    # a prompt no longer than the band (256 keys) runs whole, as does the model's own code
    assert _attention_keys(trace_serving(GPT_OSS, batch=1, prompt=144, attention="flash2").prefill) == [(144, 144)] * 2
