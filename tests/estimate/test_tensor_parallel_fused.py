"""Tensor parallelism on the architectures that fuse their projections or name them otherwise
than Llama: GPT-NeoX (one ``query_key_value``, an attention output called ``dense``), Phi-3
(``qkv_proj`` sliced by the config's head counts, ``gate_up_proj``), Falcon's new decoder
(``FalconLinear``), StarCoder2 (an MLP of ``c_fc`` and ``c_proj``), BERT (``intermediate.dense``
and two ``output.dense``), Bloom (ALiBi biases built by the model's head count) and OLMo-2
(``q_norm`` and ``k_norm`` over the whole projection, not a head).

Megatron-LM splits a fused projection by output columns (``linear_qkv``, ``linear_fc1``): each rank
holds its heads' queries, keys and values. So one rank of two holds half of every block's linear
weights (the row-parallel ones' biases whole) and does exactly half of each block's matrix work:
every product in a block is split by heads or by the MLP's width (a closed form)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torch_footprint.cli import main
from torch_footprint.estimate.layouts.tensor_parallel import plan_of
from torch_footprint.estimate.workload import trace_step
from torch_footprint.settings import Parallel, Training, Workload

BASE = {"vocab_size": 128, "max_position_embeddings": 64, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
CONFIGS = {
    "gpt_neox": {"architectures": ["GPTNeoXForCausalLM"], "intermediate_size": 128, "rotary_pct": 0.25},
    "phi3": {"architectures": ["Phi3ForCausalLM"], "intermediate_size": 128, "num_key_value_heads": 2},
    "falcon": {"architectures": ["FalconForCausalLM"], "new_decoder_architecture": True, "num_kv_heads": 2,
               "alibi": False, "parallel_attn": True},
    "starcoder2": {"architectures": ["Starcoder2ForCausalLM"], "intermediate_size": 128, "num_key_value_heads": 2},
    "bert": {"architectures": ["BertForMaskedLM"], "intermediate_size": 128},
    "bloom": {"architectures": ["BloomForCausalLM"], "n_embed": 64, "n_layer": 2, "n_head": 4},
    "olmo2": {"architectures": ["Olmo2ForCausalLM"], "intermediate_size": 128, "num_key_value_heads": 2},
}
BLOCKS = (".layers.", ".layer.", ".h.")


def _folder(tmp_path: Path, kind: str, **extra: object) -> str:
    (tmp_path / kind).mkdir()
    (tmp_path / kind / "config.json").write_text(json.dumps({"model_type": kind, **BASE, **CONFIGS[kind], **extra}))
    return str(tmp_path / kind)


def _rank(folder: str, tp: int) -> tuple[int, dict[str, list[int]], list[list[int]]]:
    """(forward MACs inside the blocks, the first block's parameter shapes, the attention's score shapes)."""
    w = Workload(folder, inputs={"input_ids": "2,16:int64"})
    trace, _ = trace_step(w, Training(train=True, optimizer="adamw"), Parallel(gpus=2, tp=tp if tp > 1 else None))
    fwd = [e for e in trace.events if e.phase == "forward" and any(b in e.module for b in BLOCKS)]
    first = {q.name.split(".0.", 1)[1]: q.shape for q in trace.params if any(b + "0." in q.name for b in BLOCKS)}
    scores = [e.out_shapes[0] for e in fwd if any(k in e.op for k in ("scaled_dot_product", "bmm"))
              and e.out_shapes[0][-1] == 16]
    return sum(e.macs for e in fwd), first, scores


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_one_rank_of_two_does_half_of_every_blocks_matrix_work(tmp_path: Path, kind: str) -> None:
    folder = _folder(tmp_path, kind)
    whole, _, scores1 = _rank(folder, 1)
    half, _, scores2 = _rank(folder, 2)
    assert whole > 0 and 2 * half == whole
    # the attention itself on 2 of the 4 heads: [batch, heads, 16, 16] or [batch x heads, 16, 16]
    assert scores1 and scores2 and {tuple(s[:-2]) for s in scores1} in ({(2, 4)}, {(8,)})
    assert {tuple(s[:-2]) for s in scores2} == ({(2, 2)} if len(scores1[0]) == 4 else {(4,)})


def test_the_fused_projections_hold_their_share_by_hand(tmp_path: Path) -> None:
    # GPT-NeoX, hidden 64, 4 heads, MLP 128: query_key_value 64 -> 3 x 64 (one rank: 96 outputs and
    # their biases), dense 64 -> 64 (32 inputs, its bias whole), dense_h_to_4h 64 -> 128 (64 outputs),
    # dense_4h_to_h 128 -> 64 (64 inputs, bias whole)
    _, neox, _ = _rank(_folder(tmp_path, "gpt_neox"), 2)
    assert neox["attention.query_key_value.weight"] == [96, 64] and neox["attention.query_key_value.bias"] == [96]
    assert neox["attention.dense.weight"] == [64, 32] and neox["attention.dense.bias"] == [64]
    assert neox["mlp.dense_h_to_4h.weight"] == [64, 64] and neox["mlp.dense_4h_to_h.weight"] == [64, 64]
    assert neox["mlp.dense_4h_to_h.bias"] == [64]
    # Phi-3, 4 heads of 16 and 2 key/value heads: qkv_proj 64 -> 64 + 2 x 32 = 128 (one rank 64: its 2
    # query heads and 1 key/value head), o_proj 64 -> 64 (32 inputs), gate_up_proj 64 -> 2 x 128 (128)
    _, phi3, _ = _rank(_folder(tmp_path, "phi3"), 2)
    assert phi3["self_attn.qkv_proj.weight"] == [64, 64] and phi3["self_attn.o_proj.weight"] == [64, 32]
    assert phi3["mlp.gate_up_proj.weight"] == [128, 64] and phi3["mlp.down_proj.weight"] == [64, 64]
    # StarCoder2's MLP (c_fc 64 -> 128, c_proj 128 -> 64): split as Llama's is
    _, sc2, _ = _rank(_folder(tmp_path, "starcoder2"), 2)
    assert sc2["mlp.c_fc.weight"] == [64, 64] and sc2["mlp.c_proj.weight"] == [64, 64]
    # OLMo-2's norms over the whole query (4 x 16) and key (2 x 16) projections: a rank's share of each
    _, olmo2, _ = _rank(_folder(tmp_path, "olmo2"), 2)
    assert olmo2["self_attn.q_norm.weight"] == [32] and olmo2["self_attn.k_norm.weight"] == [16]


def test_output_projections_named_for_nothing_split_only_beside_a_split_one() -> None:
    mods = [("m.h", "ModuleList"), ("m.h.0.attention.query_key_value", "Linear"),
            ("m.h.0.attention.dense", "Linear"), ("m.h.0.mlp.dense_h_to_4h", "FalconLinear"),
            ("m.h.0.mlp.dense_4h_to_h", "FalconLinear"),
            ("m.h.0.mha.out_proj", "NonDynamicallyQuantizableLinear"),  # nn.MultiheadAttention's, alone
            ("m.h.0.pool.dense", "Linear"),  # a dense beside nothing split
            ("m.layer", "ModuleList"), ("m.layer.0.attention.self.query", "Linear"),
            ("m.layer.0.attention.output.dense", "Linear"), ("m.layer.0.intermediate.dense", "Linear"),
            ("m.layer.0.output.dense", "Linear")]
    assert plan_of(mods) == {
        "m.h.0.attention.query_key_value": "colwise", "m.h.0.attention.dense": "rowwise",
        "m.h.0.mlp.dense_h_to_4h": "colwise", "m.h.0.mlp.dense_4h_to_h": "rowwise",
        "m.layer.0.attention.self.query": "colwise", "m.layer.0.attention.output.dense": "rowwise",
        "m.layer.0.intermediate.dense": "colwise", "m.layer.0.output.dense": "rowwise"}


def test_one_key_value_head_for_every_query_head_is_not_split(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # Falcon-7B's multi-query attention: one key/value head, which two ranks cannot share out
    folder = _folder(tmp_path, "falcon", new_decoder_architecture=False, multi_query=True)
    assert main(["fit", folder, "--input-ids", "2,16", "--train", "--gpus", "2", "--tp", "2", "--gpu", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert err == "footprint: error: --tp 2 does not divide the model's 1 key/value heads\n"
