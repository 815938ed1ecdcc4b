"""One small real architecture per cause the model-zoo sweep found (benchmarks/model_zoo_sweep.py),
built from the sweep's shrunk config, shipped in tests/configs/: each profiles, with no unknown
operator and the built model's exact parameter count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import torch_footprint as tfp

transformers = pytest.importorskip("transformers")
CONFIGS = Path(__file__).parents[1] / "configs"

CAUSES = {
    "encodec": "conv stride and kernel kept as int64 buffers the forward reads",
    "qwen3_asr_encoder": "an integer feature mask whose values set the lengths",
    "switch_transformers": "a router that casts itself inside its forward (fake tensors refuse it)",
    "qwen3_moe": "experts through torch._grouped_mm in float32",
}


def _build(model_type: str) -> tuple[torch.nn.Module, dict[str, str]]:
    data = json.loads((CONFIGS / f"{model_type}.json").read_text())
    config = transformers.CONFIG_MAPPING[model_type].from_dict(data["config"])
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config).eval()
    inputs = {k: ",".join(map(str, shape)) + ":" + dtype for k, (shape, dtype) in data["inputs"].items()}
    return model, inputs


@pytest.mark.parametrize("model_type", sorted(CAUSES))
def test_each_cause_profiles_with_exact_parameters(model_type: str) -> None:
    model, inputs = _build(model_type)
    p = tfp.profile(model, inputs)
    assert p.unknown_ops == {}
    assert p.params == sum(q.numel() for q in model.parameters())
    assert p.macs > 0


def test_switch_transformers_agrees_with_flop_counter_mode() -> None:
    # every matrix op of this model is one FlopCounterMode prices (mm, bmm, the math attention)
    from torch.utils.flop_counter import FlopCounterMode

    model, inputs = _build("switch_transformers")
    p = tfp.profile(model, inputs)
    data = json.loads((CONFIGS / "switch_transformers.json").read_text())["inputs"]
    real = {k: torch.randint(0, 100, shape) for k, (shape, _) in data.items()}
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**real)
    assert p.matrix_flops == counter.get_total_flops()
