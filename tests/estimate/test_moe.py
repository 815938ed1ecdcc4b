"""Mixture-of-experts layers: transformers sends experts through torch._grouped_mm, whose meta
kernel refuses float32 although the CPU kernel runs it. The trace must count fp32 and bf16
alike, top-k experts per token, equal to the closed form worked by hand."""

from __future__ import annotations

import pytest
import torch

import torch_footprint as tfp

transformers = pytest.importorskip("transformers")

B, T = 2, 16  # batch and tokens
H, HEADS, KV_HEADS, HEAD_DIM = 64, 4, 2, 16  # hidden size, attention heads, key/value heads
WIDTH, E, K, VOCAB, LAYERS = 96, 4, 2, 128, 2  # expert width, experts, experts per token, vocabulary, layers


def closed_form_macs() -> int:
    tokens = B * T
    projections = tokens * H * (HEADS * HEAD_DIM + 2 * KV_HEADS * HEAD_DIM + HEADS * HEAD_DIM)  # q, k, v, o
    pairs = B * HEADS * T * (T + 1) // 2  # causal: query i sees keys 0..i
    attention = pairs * (HEAD_DIM + HEAD_DIM)  # scores and weighted sum
    router = tokens * H * E
    experts = tokens * K * 3 * H * WIDTH  # each token through K experts of gate, up and down projections
    head = tokens * H * VOCAB
    return LAYERS * (projections + attention + router + experts) + head


def _mixtral() -> torch.nn.Module:
    cfg = transformers.MixtralConfig(vocab_size=VOCAB, hidden_size=H, intermediate_size=WIDTH,
                                     num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                     num_key_value_heads=KV_HEADS, num_local_experts=E, num_experts_per_tok=K,
                                     max_position_embeddings=64)
    with torch.device("meta"):
        return transformers.MixtralForCausalLM(cfg)


@pytest.mark.parametrize("dtype", [None, "bf16"])
def test_mixtral_experts_trace_on_meta_in_fp32_and_bf16(dtype: str | None) -> None:
    p = tfp.profile(_mixtral(), {"input_ids": f"{B},{T}:int64"}, precision=dtype)
    assert p.trace.settings["tensors"] == "meta"
    assert any(e.op == "aten._grouped_mm.default" for e in p.trace.events)
    assert p.unknown_ops == {}
    assert p.macs == closed_form_macs()


def test_mixtral_backward_is_twice_the_forward() -> None:
    p = tfp.profile(_mixtral(), {"input_ids": f"{B},{T}:int64"}, train=True)
    # every matmul has an input gradient and a weight gradient; attention's backward is 2x its forward
    assert p.backward.macs == 2 * closed_form_macs()
