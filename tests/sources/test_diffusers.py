"""diffusers transformers that keep text tokens by a boolean mask (Lumina2, Mochi): footprint
counts the work of the caller's mask, equal to the MAC to FlopCounterMode on the same inputs
(attention through the math path, which FlopCounterMode sees as matmuls), and leaves the
model as a never-profiled copy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

diffusers = pytest.importorskip("diffusers")

from model_state import never_profiled, outputs_differ, state_differences  # noqa: E402

import torch_footprint as tfp  # noqa: E402

MASK = torch.tensor([[True] * 5 + [False] * 3])  # five text tokens of eight kept


def lumina2() -> tuple[Callable[[], torch.nn.Module], dict[str, Any]]:
    g = torch.Generator().manual_seed(0)

    def build() -> torch.nn.Module:
        return diffusers.Lumina2Transformer2DModel(
            sample_size=16, patch_size=2, in_channels=4, hidden_size=64, num_layers=2, num_refiner_layers=1,
            num_attention_heads=4, num_kv_heads=2, multiple_of=16, axes_dim_rope=(8, 4, 4), axes_lens=(64, 64, 64),
            cap_feat_dim=32)

    return build, {"hidden_states": torch.randn(1, 4, 16, 16, generator=g), "timestep": torch.tensor([0.5]),
                   "encoder_hidden_states": torch.randn(1, 8, 32, generator=g), "encoder_attention_mask": MASK}


def mochi() -> tuple[Callable[[], torch.nn.Module], dict[str, Any]]:
    g = torch.Generator().manual_seed(0)

    def build() -> torch.nn.Module:
        return diffusers.MochiTransformer3DModel(
            patch_size=2, num_attention_heads=2, attention_head_dim=16, num_layers=2, pooled_projection_dim=16,
            in_channels=4, text_embed_dim=32, time_embed_dim=32, max_sequence_length=8)

    return build, {"hidden_states": torch.randn(1, 4, 2, 8, 8, generator=g),
                   "encoder_hidden_states": torch.randn(1, 8, 32, generator=g), "timestep": torch.tensor([500]),
                   "encoder_attention_mask": MASK}


def flop_counter_macs(model: torch.nn.Module, inputs: dict[str, Any]) -> int:
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        model(**inputs)
    return fc.get_total_flops() // 2


@pytest.mark.parametrize("case", [lumina2, mochi])
def test_the_callers_mask_is_counted_to_the_mac(case: Callable[[], Any]) -> None:
    build, inputs = case()
    torch.manual_seed(0)
    real = build().eval()
    expected = flop_counter_macs(real, inputs)
    with torch.device("meta"):
        meta = build().eval()
    assert tfp.profile(meta, inputs).macs == expected  # built on meta: random weights, the caller's inputs
    p = tfp.profile(real, inputs)
    assert p.macs == expected
    assert any("the caller's values for" in n and "encoder_attention_mask" in n for n in p.notes)
    # the mask matters: every token kept is more work (what a made mask keeps)
    full = dict(inputs, encoder_attention_mask=torch.ones_like(MASK))
    made = dict(inputs, encoder_attention_mask="1,8:bool")
    assert tfp.profile(real, made).macs == flop_counter_macs(real, full) > expected


@pytest.mark.parametrize("case", [lumina2, mochi])
def test_the_model_runs_as_a_never_profiled_copy_after_every_verb(case: Callable[[], Any]) -> None:
    build, inputs = case()
    torch.manual_seed(0)
    model = build().eval()
    ref = never_profiled(model)
    tfp.profile(model, inputs)
    tfp.memory(model, inputs)
    tfp.predict(model, "h100-sxm", inputs)
    assert state_differences(model, ref) == []
    assert outputs_differ(model, ref, lambda m: m(**inputs)) is None
