"""Tensor parallelism on a decoder whose attention names its output ``out_proj`` and reads its
head count from itself (OPT's): one rank holds half of every block's linears and heads, so it
does exactly half of each block's matrix work (a closed form: every product in a block is split
by heads or by the MLP's width)."""

from __future__ import annotations

import json
from pathlib import Path

from torch_footprint.estimate.layouts.tensor_parallel import plan_of
from torch_footprint.estimate.workload import trace_step
from torch_footprint.settings import Parallel, Training, Workload

OPT = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 64, "ffn_dim": 256,
       "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128, "max_position_embeddings": 64,
       "word_embed_proj_dim": 64, "do_layer_norm_before": True, "activation_function": "gelu", "dropout": 0.0,
       "attention_dropout": 0.0, "enable_bias": True, "tie_word_embeddings": True}


def _block_macs(folder: str, tp: int) -> tuple[int, dict[str, list[int]], list[list[int]]]:
    w = Workload(folder, inputs={"input_ids": "2,16:int64"})
    trace, _ = trace_step(w, Training(train=True, optimizer="adamw"), Parallel(gpus=2, tp=tp if tp > 1 else None))
    fwd = [e for e in trace.events if e.phase == "forward" and e.module.startswith("model.decoder.layers.")]
    shapes = {q.name: q.shape for q in trace.params if q.name.startswith("model.decoder.layers.0.")}
    attention = [e.out_shapes[0] for e in fwd if "scaled_dot_product" in e.op]
    return sum(e.macs for e in fwd), shapes, attention


def test_out_proj_beside_q_proj_is_row_parallel() -> None:
    mods = [("m.layers", "ModuleList"), ("m.layers.0.attn.q_proj", "Linear"), ("m.layers.0.attn.out_proj", "Linear"),
            ("m.layers.0.mha.out_proj", "Linear")]  # nn.MultiheadAttention's: no q_proj beside it, left whole
    assert plan_of(mods) == {"m.layers.0.attn.q_proj": "colwise", "m.layers.0.attn.out_proj": "rowwise"}


def test_one_rank_of_two_holds_half_the_heads_and_does_half_the_block_work(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(OPT))
    whole, full, heads1 = _block_macs(str(tmp_path), 1)
    half, shapes, heads2 = _block_macs(str(tmp_path), 2)
    assert 2 * half == whole
    pre = "model.decoder.layers.0."
    assert shapes[pre + "self_attn.q_proj.weight"] == [32, 64] and shapes[pre + "self_attn.out_proj.weight"] == [64, 32]
    assert shapes[pre + "fc1.weight"] == [128, 64] and shapes[pre + "fc2.weight"] == [64, 128]
    assert full[pre + "self_attn.q_proj.weight"] == [64, 64]
    # the attention itself on 2 of the 4 heads, over the whole sequence of 16
    assert heads1 and all(s == [2, 4, 16, 16] for s in heads1)
    assert heads2 and all(s == [2, 2, 16, 16] for s in heads2)
