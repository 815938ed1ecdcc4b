"""`footprint llm`'s cache against the cache a real run keeps: small models of each cache kind
(full attention, a sliding window shorter than the prompt, linear-attention and state-space
layers beside attention, a layer combining both), run on the CPU with random weights as
generate() runs them (no cache given to the prefill; the one the model returns fed back).
The expected bytes are the real cache's storages after each step, not a formula."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from torch_footprint.estimate.llm.trace import trace_serving  # noqa: E402

SMALL = {"vocab_size": 512, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 128}
MODELS = {
    "gpt2": {"n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 512},
    # one windowed layer (8 tokens, shorter than every prompt below) and one full
    "gemma2": {**SMALL, "num_hidden_layers": 2, "head_dim": 16, "sliding_window": 8,
               "layer_types": ["sliding_attention", "full_attention"]},
    "mamba": {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 512, "state_size": 8},
    # a gated-delta-net layer (a fixed state) beside full attention
    "qwen3_next": {**SMALL, "num_hidden_layers": 2, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128,
                   "layer_types": ["linear_attention", "full_attention"]},
    # every layer both: a Mamba-2 state and an attention cache in one cache layer
    "falcon_h1": {**SMALL, "num_hidden_layers": 2},
    # Mamba layers with one attention layer at index 4 of 8
    "jamba": {**SMALL, "num_hidden_layers": 8, "num_experts": 4},
}


def _real_bytes(cache: Any) -> int:
    """Bytes of every storage the cache object reaches (each once, whole)."""
    seen: set[int] = set()
    total = 0
    stack = [cache]
    visited: set[int] = set()
    while stack:
        o = stack.pop()
        if id(o) in visited:
            continue
        visited.add(id(o))
        if isinstance(o, torch.Tensor):
            st = o.untyped_storage()
            if o.dim() and st.data_ptr() not in seen:
                seen.add(st.data_ptr())
                total += st.nbytes()
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif type(o).__module__.startswith("transformers.") and hasattr(o, "__dict__"):
            stack.extend(vars(o).values())
    return total


def _real_run(model: Any, prompt: int, steps: int) -> list[int]:
    """Cache bytes after each of ``steps`` decode steps following a prefill of ``prompt`` tokens."""
    gen = torch.Generator().manual_seed(0)
    params = inspect.signature(model.forward).parameters
    kw = next(k for k in ("cache", "past_key_values", "cache_params") if k in params)  # transformers 5.x: cache
    out: list[int] = []
    with torch.no_grad():
        o = model(input_ids=torch.randint(0, 512, (1, prompt), generator=gen), use_cache=True)
        cache = getattr(o, kw)
        for _ in range(steps):
            o = model(input_ids=o.logits[:, -1:].argmax(-1), use_cache=True, **{kw: cache})
            out.append(_real_bytes(cache))
    return out


@pytest.mark.parametrize("model_type", list(MODELS))
def test_cache_bytes_equal_a_real_runs(model_type: str) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **MODELS[model_type])).eval()
    # traced at a 4-token prompt, inside the window of 8; compared after decode steps that follow
    # a 16-token prompt and a 40-token one, past the window: the trace's line and cap must hold there
    st = trace_serving(model, batch=1, prompt=4)
    assert [st.kv_bytes(17), st.kv_bytes(18)] == _real_run(model, 16, 2)
    assert st.kv_bytes(41) == _real_run(model, 40, 1)[0]
