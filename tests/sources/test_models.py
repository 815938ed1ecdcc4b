"""Whole models: the 6N rule from the trace, Hugging Face configs, fallbacks, JSON round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import torch_footprint as tfp
from torch_footprint.analysis import Profile
from torch_footprint.files import read_json, write_json
from torch_footprint.trace.formulas import causal_pairs

CONFIGS = Path(__file__).parents[1] / "configs"


class EmbeddedBlock(nn.Module):
    """A transformer block behind an embedding, so that its input needs a gradient, as in a stack."""

    def __init__(self, d: int = 512, heads: int = 8, ff: int = 2048) -> None:
        super().__init__()
        self.embed = nn.Embedding(1000, d)
        self.block = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.block(self.embed(ids))


def test_backward_is_twice_forward_the_6n_rule() -> None:
    p = tfp.profile(EmbeddedBlock(), "4,256:int64", train=True)
    fwd_matrix = p.matrix_flops
    # every matmul needs both its input and weight gradients: exactly 2x the forward
    assert p.backward.matrix_flops == 2 * fwd_matrix
    total = p.flops + p.backward_flops
    assert total == pytest.approx(3 * fwd_matrix, rel=0.01)
    # backward work is attributed to the modules that own it
    fwd = {r.path: r for r in p.by_module(phases=("forward",))}
    bwd = {r.path: r for r in p.by_module(phases=("backward",))}
    assert bwd["block.linear1"].macs == 2 * fwd["block.linear1"].macs
    assert bwd["block.self_attn"].macs == 2 * fwd["block.self_attn"].macs


def test_hf_gpt2_from_a_local_config() -> None:
    pytest.importorskip("transformers")
    t, d, layers, heads, vocab, pos = 64, 128, 2, 4, 1000, 256
    p = tfp.profile(str(CONFIGS / "gpt2-tiny"), {"input_ids": f"1,{t}:int64"})
    per_layer_params = (2 * d) + (d * 3 * d + 3 * d) + (d * d + d) + (2 * d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    assert p.params == vocab * d + pos * d + layers * per_layer_params + 2 * d  # lm_head tied to wte
    linear = t * layers * d * (3 * d + d + 4 * d + 4 * d)
    attention = layers * heads * causal_pairs(t, t) * (d // heads) * 2  # causal: GPT-2 is a decoder
    lm_head = t * d * vocab
    assert p.macs == linear + attention + lm_head
    assert p.unknown_ops == {}


def test_llama_70b_shape_forward() -> None:
    pytest.importorskip("transformers")
    t = 128
    p = tfp.profile(str(CONFIGS / "llama3-70b"), {"input_ids": f"1,{t}:int64"})
    h, inter, layers, heads, kv, vocab, hd = 8192, 28672, 80, 64, 8, 128256, 128
    per_layer = 2 * h * h + 2 * h * kv * hd + 3 * h * inter + 2 * h
    assert p.params == 2 * vocab * h + layers * per_layer + h  # 70,553,706,496: Meta's "70B"
    assert p.params_by_dtype == {"bfloat16": p.params}
    matmul_params = layers * (2 * h * h + 2 * h * kv * hd + 3 * h * inter) + vocab * h
    attention = layers * heads * causal_pairs(t, t) * hd * 2
    assert p.macs == t * matmul_params + attention


class ValueDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        if bool(y.sum() > 1e9):  # reads a value: neither meta nor fake tensors can answer
            y = self.b(y)
        return y


def test_value_dependent_model_falls_back_to_real_tensors_and_says_so() -> None:
    p = tfp.profile(ValueDependent(), "2,8")
    assert p.trace.settings["tensors"] == "real"
    assert any("real" in n and "tensor values" in n for n in p.notes)
    assert p.macs == 2 * 8 * 8  # the branch is not taken on small random values


def test_user_model_weights_are_left_untouched() -> None:
    model = nn.Linear(4, 4)
    before = model.weight.detach().clone()
    tfp.profile(model, "2,4", train=True)
    assert model.weight.device.type == "cpu"
    assert torch.equal(model.weight, before) and model.weight.grad is None


def test_json_round_trip_rerenders_without_the_model(tmp_path: Path) -> None:
    p = tfp.profile("resnet18")
    path = tmp_path / "r18.json"
    write_json(path, p.to_dict(include_trace=True))
    again = Profile.from_dict(read_json(path))
    assert (again.params, again.macs, again.flops) == (p.params, p.macs, p.flops)
    assert [r.to_dict() for r in again.by_module(2)] == [r.to_dict() for r in p.by_module(2)]
    data = json.loads(path.read_text())
    assert data["params"] == 11689512  # torchvision's published num_params for resnet18
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind


def test_dtype_changes_bytes_not_flops() -> None:
    fp32 = tfp.profile("resnet18")
    bf16 = tfp.profile("resnet18", precision="bf16")
    assert bf16.macs == fp32.macs
    assert bf16.param_bytes * 2 == fp32.param_bytes


def test_vit_follows_the_input_size() -> None:
    p = tfp.profile("vit_b_16", "1,3,384,384")
    # torchvision publishes 55.484 GMACs for vit_b_16 at 384 (IMAGENET1K_SWAG_E2E_V1)
    assert round(p.macs / 1e9, 3) == 55.484


def test_causal_attention_on_the_math_path_is_still_counted_as_causal() -> None:
    # with attention dropout while training, the CPU runs attention through its math path
    # (full score matrix): the trace keeps those kernels but counts only the visible pairs
    pytest.importorskip("transformers")
    t, d, layers, heads, vocab = 64, 128, 2, 4, 1000
    p = tfp.profile(str(CONFIGS / "gpt2-tiny-dropout"), {"input_ids": f"1,{t}:int64"}, train=True)
    assert any(e.op == "aten._safe_softmax.default" for e in p.trace.events)  # the math path ran
    linear = t * layers * d * (3 * d + d + 4 * d + 4 * d)
    attention = layers * heads * causal_pairs(t, t) * (d // heads) * 2
    assert p.macs == linear + attention + t * d * vocab
    assert p.backward.macs == 2 * p.macs


def test_timm_model_matches_the_same_architecture_in_torchvision() -> None:
    pytest.importorskip("timm")
    p = tfp.profile("timm:resnet18")
    # timm's resnet18 is torchvision's architecture: torchvision publishes 11,689,512 params, 1.814 GMACs
    assert p.params == 11689512
    assert round(p.macs / 1e9, 3) == 1.814
    assert p.trace.inputs[0]["shape"] == [1, 3, 224, 224]


@pytest.mark.slow
def test_detection_model_runs_on_real_tensors_and_prices_nms() -> None:
    # NMS makes the forward depend on values: the trace falls back to real tensors and says so
    p = tfp.profile("ssdlite320_mobilenet_v3_large", "1,3,320,320")
    assert p.trace.settings["tensors"] == "real"
    assert p.unknown_ops == {}
    nms = [e for e in p.trace.events if e.op == "torchvision.nms.default"]
    assert nms and all(e.kind == "vector" for e in nms)
    # torchvision publishes 0.583 GMACs and 3,440,060 parameters for its COCO_V1 weights
    assert round(p.macs / 1e9, 3) == 0.583
    assert p.params == 3440060
