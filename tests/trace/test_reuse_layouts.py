"""Training steps under the layouts that change a model's modules (Megatron-core's fused kernels,
sequence parallelism): their repeated blocks replayed, and the trace the same as one that traces
every call (tests/fixtures/reuse_check.py). Six layers of the tiny Llama and Qwen3-MoE configs:
in training the last block of a kind is traced in full, the first recorded; under sequence
parallelism the first block also scatters the sequence (a hook of its own), so one more is
recorded."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from reuse_check import assert_same

from torch_footprint.estimate.workload import trace_step
from torch_footprint.settings import Parallel, Training, Workload
from torch_footprint.trace import reuse

CONFIGS = Path(__file__).parents[1] / "configs"
LAYERS = 6


def _six_layers(tmp_path: Path, name: str) -> str:
    config = json.loads((CONFIGS / name / "config.json").read_text())
    config["num_hidden_layers"] = LAYERS
    (tmp_path / name).mkdir()
    (tmp_path / name / "config.json").write_text(json.dumps(config))
    return str(tmp_path / name)


def _both(model: str, t: Training, p: Parallel) -> tuple[object, object, reuse.Stats]:
    w = Workload(model, inputs={"input_ids": "2,16:int64"}, precision="bf16-mixed")
    full, _ = trace_step(dataclasses.replace(w, reuse=False), t, p, cuda_sm=(9, 0))
    fast, _ = trace_step(w, t, p, cuda_sm=(9, 0))
    return fast, full, reuse.Stats(reuse.LAST.recorded, reuse.LAST.replayed, reuse.LAST.retraced)


@pytest.mark.parametrize(("name", "ac"), [("llama-gqa-tiny", None), ("qwen3-moe-tiny", "full")])
def test_fused_kernels_replay_and_match(tmp_path: Path, name: str, ac: str | None) -> None:
    fast, full, stats = _both(_six_layers(tmp_path, name), Training(train=True, optimizer="adamw", ac=ac),
                              Parallel(gpus=8, framework="megatron"))
    assert_same(fast, full)
    assert (stats.recorded, stats.replayed, stats.retraced) == (1, LAYERS - 2, False)


@pytest.mark.parametrize(("name", "vocab"), [("llama-gqa-tiny", False), ("qwen3-moe-tiny", True)])
def test_sequence_parallel_replays_and_matches(tmp_path: Path, name: str, vocab: bool) -> None:
    fast, full, stats = _both(_six_layers(tmp_path, name), Training(train=True, optimizer="adamw"),
                              Parallel(gpus=8, tp=2, sequence_parallel=True, vocab_parallel=vocab))
    assert_same(fast, full)
    assert (stats.recorded, stats.replayed, stats.retraced) == (2, LAYERS - 3, False)


def test_hooks_of_a_user_keep_blocks_traced_in_full(tmp_path: Path) -> None:
    """The same hook on every block, but not one this tool put there: no block replayed."""
    from torch_footprint.sources.prepare import prepare
    from torch_footprint.trace import trace_model

    work = prepare(_six_layers(tmp_path, "llama-gqa-tiny"), "1,16:int64")
    model = work.model
    for layer in model.model.layers:
        layer.mlp.register_forward_hook(lambda m, args, out: out)
    with work.built.trace_context():
        trace_model(model, work.make_inputs())
    assert reuse.LAST.replayed == 0
