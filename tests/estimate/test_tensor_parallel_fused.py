"""Tensor parallelism on the architectures that fuse their projections or name them otherwise
than Llama: GPT-NeoX (one ``query_key_value``, an attention output called ``dense``), Phi-3
(``qkv_proj`` sliced by the config's head counts, ``gate_up_proj``), Falcon's new decoder
(``FalconLinear``), StarCoder2 (an MLP of ``c_fc`` and ``c_proj``), ModernBERT (``Wi``, ``Wo``),
BERT (``intermediate.dense`` and two ``output.dense``), GPT-2 (``Conv1D``, its weight stored
transposed), Bloom (ALiBi biases built by the model's head count), OLMo-2 (``q_norm`` and
``k_norm`` over the whole projection, not a head), Qwen3.5's gated delta net (split by its key
and value heads, its convolution by channels, as Megatron-core and vLLM split it), DeepSeek's
multi-head latent attention (its up projections split, its down projections duplicated),
gpt-oss's per-head sinks and Nemotron-H's Mamba-2 mixer (by heads and groups).

Megatron-LM splits a fused projection by output columns (``linear_qkv``, ``linear_fc1``): each rank
holds its heads' queries, keys and values. So one rank of two holds half of every block's linear
weights (the row-parallel ones' biases whole) and does exactly half of each block's matrix work:
every product in a block is split by heads or by the MLP's width (a closed form)."""

from __future__ import annotations

import json
import math
import re
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
    "modernbert-decoder": {"architectures": ["ModernBertDecoderForCausalLM"], "intermediate_size": 128},
    "gpt2": {"architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64,
             "n_inner": 128},
    "qwen3_5_text": {"architectures": ["Qwen3_5ForCausalLM"], "intermediate_size": 128, "num_key_value_heads": 2,
                     "head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                     "linear_key_head_dim": 16, "linear_value_head_dim": 16,
                     "layer_types": ["linear_attention", "full_attention"]},
}
BLOCKS = (".layers.", ".layer.", ".h.")


def _folder(tmp_path: Path, kind: str, **extra: object) -> str:
    (tmp_path / kind).mkdir()
    config = {"model_type": kind, **BASE, **CONFIGS.get(kind, {}), **extra}
    (tmp_path / kind / "config.json").write_text(json.dumps(config))
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
    assert scores1 and {math.prod(s[:-2]) for s in scores1} == {8}
    assert [s[-2:] for s in scores2] == [s[-2:] for s in scores1] and {math.prod(s[:-2]) for s in scores2} == {4}


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
    # GPT-2's Conv1D, its weight stored [inputs, outputs]: c_attn 64 -> 3 x 64 (one rank 96 and their biases),
    # c_proj 64 -> 64 (32 inputs, its bias whole), the MLP's c_fc 64 -> 128 (64) and c_proj 128 -> 64 (64 inputs)
    _, gpt2, _ = _rank(_folder(tmp_path, "gpt2"), 2)
    assert gpt2["attn.c_attn.weight"] == [64, 96] and gpt2["attn.c_attn.bias"] == [96]
    assert gpt2["attn.c_proj.weight"] == [32, 64] and gpt2["attn.c_proj.bias"] == [64]
    assert gpt2["mlp.c_fc.weight"] == [64, 64] and gpt2["mlp.c_proj.weight"] == [64, 64]
    # Qwen3.5's gated delta net, 2 key heads and 4 value heads of 16: in_proj_qkv 64 -> 2 x 32 + 64 = 128
    # (one rank 64), in_proj_z 64 -> 64 (32), in_proj_a and _b 64 -> 4 (2), its depthwise convolution
    # over the 128 channels (64), its per-value-head decay A_log and step bias dt_bias (2), out_proj 64 -> 64
    # (32 inputs)
    _, delta, _ = _rank(_folder(tmp_path, "qwen3_5_text"), 2)
    assert delta["linear_attn.in_proj_qkv.weight"] == [64, 64] and delta["linear_attn.in_proj_z.weight"] == [32, 64]
    assert delta["linear_attn.in_proj_a.weight"] == [2, 64] and delta["linear_attn.in_proj_b.weight"] == [2, 64]
    assert delta["linear_attn.conv1d.weight"] == [64, 1, 4] and delta["linear_attn.out_proj.weight"] == [64, 32]
    assert delta["linear_attn.A_log"] == [2] and delta["linear_attn.dt_bias"] == [2]


def test_multi_head_latent_attention_splits_its_up_projections_by_head_by_hand(tmp_path: Path) -> None:
    # DeepSeek-V3's attention (Megatron-core's MLA): the up projections q_b_proj and kv_b_proj split by
    # heads, o_proj by rows; the down projections q_a_proj (64 -> 32) and kv_a_proj_with_mqa (64 -> 32 +
    # 8 rotary) duplicated on every rank. Dense MLPs only (first_k_dense_replace covers both layers).
    folder = _folder(tmp_path, "deepseek_v3", architectures=["DeepseekV3ForCausalLM"], intermediate_size=128,
                     num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=8,
                     qk_nope_head_dim=16, v_head_dim=16, first_k_dense_replace=2, n_routed_experts=4,
                     num_experts_per_tok=2, moe_intermediate_size=32, n_group=1, topk_group=1)
    whole, _, _ = _rank(folder, 1)
    half, shapes, scores = _rank(folder, 2)
    duplicated = 2 * 16 * (64 * 32 + 64 * 40) * 2  # tokens x (q_a + kv_a) MACs x layers
    assert 2 * half == whole + duplicated
    # q_b_proj 32 -> 4 heads x (16 + 8), kv_b_proj 32 -> 4 heads x (16 + 16): a rank's 2 heads of each
    assert shapes["self_attn.q_b_proj.weight"] == [48, 32] and shapes["self_attn.kv_b_proj.weight"] == [64, 32]
    assert shapes["self_attn.q_a_proj.weight"] == [32, 64] and shapes["self_attn.o_proj.weight"] == [64, 32]
    assert scores and {tuple(s) for s in scores} == {(4, 16, 16)}  # batch 2 x 2 heads


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


SHARED_EXPERTS = {  # a mixture of experts beside shared experts, which see the MoE block's tokens flattened
    "qwen2_moe": {"architectures": ["Qwen2MoeForCausalLM"], "intermediate_size": 128, "num_key_value_heads": 2,
                  "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "shared_expert_intermediate_size": 64},
    "deepseek_v3": {"architectures": ["DeepseekV3ForCausalLM"], "intermediate_size": 128, "num_key_value_heads": 4,
                    "q_lora_rank": 32, "kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16,
                    "v_head_dim": 16, "first_k_dense_replace": 1, "n_routed_experts": 4, "num_experts_per_tok": 2,
                    "moe_intermediate_size": 32, "n_shared_experts": 1, "n_group": 1, "topk_group": 1},
}


SEQUENCE_PARALLEL = {**SHARED_EXPERTS,  # and Gemma-4's per-layer inputs, [batch, sequence, width] beside each block's
                     "gemma4_text": {"architectures": ["Gemma4ForCausalLM"], "intermediate_size": 128,
                                     "num_key_value_heads": 2, "head_dim": 16, "hidden_size_per_layer_input": 16},
                     # and OPT's MLP, which takes the block's tokens flattened to [tokens, width]
                     "opt": {"architectures": ["OPTForCausalLM"], "ffn_dim": 128, "word_embed_proj_dim": 64,
                             "do_layer_norm_before": True, "enable_bias": True}}


@pytest.mark.parametrize("kind", list(SEQUENCE_PARALLEL))
def test_sequence_parallelism_moves_no_matrix_work(tmp_path: Path, kind: str) -> None:
    # Korthikanti et al. 2022, 4.2.2: sequence parallelism splits only what lies between the split
    # linears (norms, residuals), so a rank multiplies what it does without it; between the blocks
    # it holds 16 / 2 = 8 of the 16 tokens.
    folder = _folder(tmp_path, kind, **SEQUENCE_PARALLEL[kind])
    w = Workload(folder, inputs={"input_ids": "2,16:int64"})
    train = Training(train=True, optimizer="adamw")
    plain, _ = trace_step(w, train, Parallel(gpus=2, tp=2))
    sp, _ = trace_step(w, train, Parallel(gpus=2, tp=2, sequence_parallel=True))

    def macs(trace: object) -> int:
        return sum(e.macs for e in trace.events if e.phase == "forward" and ".layers." in e.module)  # type: ignore[attr-defined]

    # Gemma-4's per-layer-input gate (64 -> 16) and projection (16 -> 64) are replicated linears between the
    # split ones: under sequence parallelism they run on the rank's 2 x 8 tokens, not all 2 x 16, in 2 layers
    between = {"gemma4_text": 2 * 2 * (2 * 8) * 64 * 16}.get(kind, 0)
    assert macs(plain) > 0 and macs(sp) == macs(plain) - between
    blocks = [m.out_shapes[0] for m in sp.modules if re.fullmatch(r".*\.layers\.\d+", m.path)]
    assert len(blocks) == 2 and all(s == [2, 8, 64] for s in blocks)


ATTENTION_OF_ITS_OWN = '''
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(64, 64) for _ in range(4))
        self.shape = (4, 16)  # its heads by a name tensor parallelism cannot know

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, *self.shape).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        return self.o_proj(nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, -1))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Attention() for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return x


def build():
    return Model()
'''


def test_an_attention_that_one_ranks_share_breaks_is_one_line_naming_the_split(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "own.py").write_text(ATTENTION_OF_ITS_OWN)
    model = f"{tmp_path / 'own.py'}:build"
    assert main(["fit", model, "--input", "2,16,64", "--train", "--gpu", "h100-sxm"]) == 0  # whole, it runs
    capsys.readouterr()
    assert main(["fit", model, "--input", "2,16,64", "--train", "--gpus", "2", "--tp", "2", "--gpu", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("footprint: error: --tp 2: one rank's share of Model does not run, so its attention or MLP "
                          "is not one this tool knows how to split (the model raised RuntimeError")
    assert err.count("\n") == 1 and "layers.0" in err


def test_gpt_oss_attention_sinks_are_per_head_and_split_with_the_heads() -> None:
    # gpt-oss's attention keeps one learned sink logit per head (a 1-D parameter of the attention
    # itself): one rank of two holds its 2 heads' sinks and does half of the attention's work
    folder = str(Path(__file__).parents[1] / "configs" / "gpt-oss-tiny")
    w = Workload(folder, inputs={"input_ids": "2,16:int64"})
    train = Training(train=True, optimizer="adamw")
    whole, _ = trace_step(w, train)
    half, _ = trace_step(w, train, Parallel(gpus=2, tp=2))

    def attention(trace: object) -> int:
        return sum(e.macs for e in trace.events if e.phase == "forward" and ".self_attn" in e.module)  # type: ignore[attr-defined]

    assert attention(whole) > 0 and 2 * attention(half) == attention(whole)
    sinks = {q.name: q.shape for q in half.params if q.name.endswith("sinks")}
    assert sinks and all(shape == [2] for shape in sinks.values())


def test_a_mixer_left_whole_on_every_rank_is_named(tmp_path: Path) -> None:
    # Jamba's Mamba mixers have no split here (Megatron-core splits them by heads): one rank holds them
    # whole, which the answer says, while its attention and MLP layers split. Four layers: attention
    # in layer 1 and 3 (attn_layer_period 2, offset 1), Mamba in 0 and 2; dense MLPs throughout.
    folder = _folder(tmp_path, "jamba", architectures=["JambaForCausalLM"], num_hidden_layers=4, intermediate_size=128,
                     num_key_value_heads=2, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=100,
                     num_experts=1, mamba_d_state=8, mamba_expand=2, mamba_dt_rank=8, use_mamba_kernels=False)
    w = Workload(folder, inputs={"input_ids": "2,16:int64"})
    whole, _ = trace_step(w, Training(train=True, optimizer="adamw"))
    half, notes = trace_step(w, Training(train=True, optimizer="adamw"), Parallel(gpus=2, tp=2))
    said = [n for n in notes if "left whole" in n]
    assert said == ["tensor parallel: left whole on every rank (no split known for them): "
                    "JambaMambaMixer (dt_proj, in_proj, out_proj, x_proj)"]
    mamba = {q.name: q.shape for q in half.params if ".mamba.in_proj" in q.name}
    assert mamba == {q.name: q.shape for q in whole.params if ".mamba.in_proj" in q.name}  # whole
    assert {q.shape[0] for q in half.params if q.name.endswith("self_attn.q_proj.weight")} == {32}  # split
    llama = _folder(tmp_path, "llama", architectures=["LlamaForCausalLM"], intermediate_size=128,
                    num_key_value_heads=2)
    _, notes = trace_step(Workload(llama, inputs={"input_ids": "2,16:int64"}), Training(train=True, optimizer="adamw"),
                          Parallel(gpus=2, tp=2))
    assert notes and not [n for n in notes if "left whole" in n]  # everything split: nothing said



NEMOTRON_H = {"architectures": ["NemotronHForCausalLM"], "intermediate_size": 128, "num_key_value_heads": 2,
              "head_dim": 16, "mamba_num_heads": 4, "mamba_head_dim": 16, "n_groups": 2, "ssm_state_size": 8,
              "hybrid_override_pattern": "M*"}


def test_a_mamba2_mixer_splits_by_heads_and_groups_by_hand(tmp_path: Path) -> None:
    # Megatron-core's MambaMixer under tensor parallelism (megatron/core/ssm/mamba_mixer.py: d_inner,
    # ngroups and nheads each divided by the TP size): Nemotron-H's mixer, 4 heads of 16 (inner width
    # 64), 2 groups of state 8. in_proj 64 -> z 64 + x 64 + B, C 2 x 2 x 8 + dt 4 = 164, one rank 82;
    # the depthwise convolution over x, B, C (96 channels, 48); the gated norm over 64 (32); A_log, D and
    # dt_bias a head each (2); out_proj 64 -> 64 (32 inputs). Its work on a rank: exactly half.
    folder = _folder(tmp_path, "nemotron_h", **NEMOTRON_H)
    w = Workload(folder, inputs={"input_ids": "2,16:int64"})
    whole, _ = trace_step(w, Training(train=True, optimizer="adamw"))
    half, notes = trace_step(w, Training(train=True, optimizer="adamw"), Parallel(gpus=2, tp=2))
    shapes = {q.name.split("layers.0.mixer.", 1)[1]: q.shape for q in half.params if "layers.0.mixer." in q.name}
    assert shapes["in_proj.weight"] == [82, 64] and shapes["conv1d.weight"] == [48, 1, 4]
    assert shapes["norm.weight"] == [32] and shapes["out_proj.weight"] == [64, 32]
    assert shapes["A_log"] == shapes["D"] == shapes["dt_bias"] == [2]

    def mixer(trace: object) -> int:
        return sum(e.macs for e in trace.events if e.phase == "forward" and ".layers.0.mixer" in e.module)  # type: ignore[attr-defined]

    assert mixer(whole) > 0 and 2 * mixer(half) == mixer(whole)
    assert not [n for n in notes if "left whole" in n]


def test_a_mamba2_mixer_whose_groups_tp_does_not_divide_is_refused(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # Megatron-core asserts ngroups % tensor_model_parallel_size == 0: one group cannot be split in two
    folder = _folder(tmp_path, "nemotron_h", **{**NEMOTRON_H, "n_groups": 1})
    assert main(["fit", folder, "--input-ids", "2,16", "--train", "--gpus", "2", "--tp", "2", "--gpu", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert err == ("footprint: error: --tp 2 does not divide the 1 groups of model.layers.0.mixer's state-space "
                   "mixer (Megatron-core splits its heads and groups together)\n")
