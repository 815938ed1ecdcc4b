"""Experts that loop over the routed experts (``nonzero``: a shape fake tensors cannot know) are
traced as grouped matrix products: DBRX's experts give the same output as their own loop on real
tensors, and DBRX's config traces on meta with its experts found in the sub-config."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch_footprint.estimate.llm.experts import group_experts  # noqa: E402
from torch_footprint.estimate.llm.pricing import active_params  # noqa: E402
from torch_footprint.estimate.llm.trace import trace_serving  # noqa: E402

ROOT = Path(__file__).parents[2]


def _tiny_dbrx() -> object:
    from transformers import DbrxConfig, DbrxForCausalLM

    config = DbrxConfig(d_model=32, n_heads=4, n_layers=2, max_seq_len=64, vocab_size=100,
                        attn_config={"kv_n_heads": 2, "clip_qkv": 8, "rope_theta": 10000},
                        ffn_config={"ffn_hidden_size": 48, "moe_num_experts": 4, "moe_top_k": 2})
    torch.manual_seed(0)
    return DbrxForCausalLM(config).eval()


def test_grouped_dbrx_experts_match_their_loop() -> None:
    model = _tiny_dbrx()
    ids = torch.randint(0, 100, (2, 7))
    with torch.no_grad():
        looped = model(ids).logits
        changed = group_experts(model)
        grouped = model(ids).logits
    assert len(changed) == 2  # one experts module a layer
    assert torch.allclose(looped, grouped, atol=1e-5, rtol=1e-4)
    for module in changed:
        del module.forward
    assert "forward" not in vars(changed[0])


def test_dbrx_traces_on_meta_as_a_mixture_of_experts() -> None:
    st = trace_serving(str(ROOT / "benchmarks" / "configs" / "databricks--dbrx-instruct"), batch=1, prompt=8)
    # DBRX: 16 experts, 4 a token (ffn_config), 132B parameters (databricks/dbrx-instruct's model card:
    # "132B total parameters of which 36B parameters are active on any input")
    assert st.experts is not None and (st.experts.count, st.experts.top_k) == (16, 4)
    assert st.params == pytest.approx(132e9, rel=0.01)
    assert active_params(st)[0] == pytest.approx(36e9, rel=0.02)
    # the cache: 40 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes
    assert st.kv_bytes_per_token == 40 * 8 * 128 * 2 * 2
