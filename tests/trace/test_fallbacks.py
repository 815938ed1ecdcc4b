"""Models that meta and fake tensors cannot run, seen in the model-zoo sweep: each small
case stands for a cause, with its MACs worked by hand."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_footprint as tfp


class StrideFromBuffer(nn.Module):
    """Like transformers' Mimi and Encodec convolutions: the stride kept as an int64 buffer
    and read as a value by the forward."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 7, bias=False)
        self.stride = nn.Buffer(torch.tensor(3), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.conv.weight, stride=int(self.stride))


def test_buffer_values_are_kept_for_the_real_run() -> None:
    p = tfp.profile(StrideFromBuffer(), "1,1,100")
    assert p.trace.settings["tensors"] == "real"
    out_len = (100 - 7) // 3 + 1  # 32 outputs at stride 3 (stride 0 would not run at all)
    assert p.macs == 4 * 7 * out_len


class PresentTokens(nn.Module):
    """Like an audio encoder that counts the frames its integer mask marks present."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 4, bias=False)

    def forward(self, x: torch.Tensor, frames_mask: torch.Tensor) -> torch.Tensor:
        present = int(frames_mask.sum())
        return self.proj(x[:, :present]) / present


def test_integer_masks_mark_every_position_present() -> None:
    p = tfp.profile(PresentTokens(), ["1,8,16", "frames_mask=1,8:int64"])
    assert p.macs == 8 * 16 * 4  # all 8 frames through the 16 -> 4 projection


class CastsItsRouter(nn.Module):
    """Like switch_transformers' router: casts a submodule inside its forward (fake tensors
    refuse to swap its parameters) and selects with nonzero (meta tensors cannot)."""

    def __init__(self) -> None:
        super().__init__()
        self.classifier = nn.Linear(16, 4, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.classifier = self.classifier.to(torch.float32)
        logits = self.classifier(x)
        return logits, torch.nonzero(logits.argmax(-1) >= 0)


def test_a_failure_of_fake_tensors_falls_back_to_real_ones() -> None:
    p = tfp.profile(CastsItsRouter(), "8,16")
    assert p.macs == 8 * 16 * 4
    assert any("real cpu tensors" in n and "fake tensors failed" in n for n in p.notes)


class TextClassifier(nn.Module):
    """The everyday pattern: nn.TransformerEncoder in eval mode with a key padding mask."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.enc(x, src_key_padding_mask=mask)


def test_transformer_encoder_with_a_padding_mask_counts_the_dense_bound() -> None:
    m = TextClassifier()
    p = tfp.profile(m, ["2,10,64", "mask=2,10:bool"])
    tokens, d, ff, heads = 2 * 10, 64, 128, 4
    per_layer = (tokens * 3 * d * d  # q, k, v projections
                 + tokens * d * d  # output projection
                 + 2 * heads * 10 * 10 * 2 * (d // heads)  # scores and weighted sum over all 10 x 10 pairs
                 + tokens * 2 * d * ff)  # feed-forward
    assert p.macs == 2 * per_layer
    assert any("dense bound" in n for n in p.notes)
    assert m.enc.use_nested_tensor  # the model is left as it was


class MetaRuleDiffers(nn.Module):
    """A meta kernel that follows another device's rule, with a message that names neither
    meta nor a device (as torch._grouped_mm's did for float32)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "meta":
            raise RuntimeError("Expected mat_a to be BFloat16 or supported Float16 matrix")
        return self.proj(x)


class RaisesEverywhere(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("the model's own complaint")


def test_an_error_only_meta_tensors_raise_falls_back_and_the_models_own_error_stands() -> None:
    p = tfp.profile(MetaRuleDiffers(), "8,16")
    assert p.macs == 8 * 16 * 4 and p.trace.settings["tensors"] == "fake"
    with pytest.raises(tfp.FootprintError, match="ValueError during the forward pass.*the model's own complaint"):
        tfp.profile(RaisesEverywhere(), "8,16")
