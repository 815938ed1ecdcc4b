"""The attention kernel a Hugging Face model runs (``--attention``) and the fused kernels of a
training stack (``--fused-kernels``), on tiny configs: gpt-oss (whose code only has eager
attention, for its sinks) and Qwen3-MoE (transformers' grouped experts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torch_footprint.analysis.memory import replay
from torch_footprint.errors import FootprintError
from torch_footprint.estimate.workload import trace_step
from torch_footprint.settings import Parallel, Training, Workload

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
GPT_OSS = str(CONFIGS / "gpt-oss-tiny")
QWEN3_MOE = str(CONFIGS / "qwen3-moe-tiny")
STEP = Training(train=True, optimizer="adamw")


def _saved(model: str, seq: int, attention: str | None = None, step: Training = STEP) -> tuple[dict[str, int], list]:
    w = Workload(model, {"input_ids": f"2,{seq}:int64"}, precision="bf16-mixed", attention=attention)
    trace, notes = trace_step(w, step, Parallel())
    return replay(trace).activations_by_module, notes


def test_fused_attention_keeps_what_grows_with_the_sequence_not_its_square():
    # layer 1 is gpt-oss's full-attention layer (no window mask). Its eager code writes out the
    # [batch, heads, seq, seq + 1] probabilities (the sinks' column) and keeps them for the backward,
    # so doubling the sequence more than triples what the layer keeps; one fused kernel keeps its
    # inputs, output and per-row log-sum-exp, all linear in the sequence: exactly twice
    full = "model.layers.1.self_attn"
    eager = [_saved(GPT_OSS, s)[0][full] for s in (64, 128)]
    fused = [_saved(GPT_OSS, s, "fused")[0][full] for s in (64, 128)]
    assert fused[1] == 2 * fused[0]
    assert eager[1] > 3 * eager[0]
    # the probabilities alone: 2 x 4 heads x 128 x 129 values in bf16
    assert eager[1] - fused[1] >= 2 * 4 * 128 * 129 * 2


def test_the_model_runs_its_own_attention_again_afterwards():
    from torch_footprint.sources import prepare

    built = prepare(GPT_OSS, {"input_ids": "1,32:int64"}).built
    w = Workload(built.model, {"input_ids": "1,32:int64"}, attention="flex")
    _, notes = trace_step(w, STEP, Parallel())
    assert built.model.config._attn_implementation == "eager"
    assert any("one fused kernel" in n for n in notes)


def test_an_attention_the_model_does_not_support_is_one_clear_error():
    with pytest.raises(FootprintError, match="--attention sdpa"):
        _saved(GPT_OSS, 32, "sdpa")
    with pytest.raises(FootprintError, match="not one"):
        trace_step(Workload("resnet18", None, attention="fused"), Training(), Parallel())


def test_fused_experts_gate_keeps_its_input_not_the_activation():
    # Qwen3-MoE's experts: 128 tokens x top-2 = 256 routed rows; the grouped projection's output
    # [256, 2 x 32] is kept either way (the gate's input). The unfused gate, act_fn(gate) * up,
    # also keeps SiLU's output [256, 32] for the product's backward: 4 bytes a value (the
    # experts' fp32 weights under CPU autocast), 32,768 B a layer; and transformers weighs the
    # down projection's output [256, 64] by the router, keeping it (65,536 B) for the weights'
    # gradient, where the fused gate weighs its own output and keeps the 256 bf16 weights (512 B)
    plain, _ = _saved(QWEN3_MOE, 64)
    fused, notes = _saved(QWEN3_MOE, 64, step=Training(train=True, optimizer="adamw", fused_kernels=True))
    experts = [sum(v for k, v in saved.items() if ".mlp.experts" in k) for saved in (plain, fused)]
    assert experts[0] - experts[1] == 2 * (256 * 32 * 4 + 256 * 64 * 4 - 256 * 2)
    assert any("2 experts' gates" in n for n in notes)


def test_fused_kernels_need_a_training_step():
    with pytest.raises(FootprintError, match="add --train"):
        Training(fused_kernels=True)


@pytest.mark.parametrize(("args", "says"), [
    (["memory", GPT_OSS, "--input-ids", "1,32", "--attention", "sdpa"], "--attention sdpa"),
    (["memory", GPT_OSS, "--input-ids", "1,32", "--attention", "paged"], "unknown attention kernel 'paged'"),
    (["memory", "resnet18", "--attention", "fused"], "not one"),
    (["memory", QWEN3_MOE, "--input-ids", "1,32", "--fused-kernels"], "add --train"),
])
def test_bad_attention_input_is_one_line_and_exit_2(args: list[str], says: str):
    run = subprocess.run([sys.executable, "-m", "torch_footprint", *args], capture_output=True, text=True)
    assert run.returncode == 2
    assert says in run.stderr and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_a_named_kernel_is_priced_where_the_gpu_can_run_it():
    from torch_footprint.estimate.kernels.sdpa import sdpa_kernel
    from torch_footprint.hardware import get

    h100, a100 = get("h100-sxm"), get("a100-sxm-80gb")
    assert sdpa_kernel(h100, "bf16", 128, 128) == "cudnn"  # PyTorch 2.9 and later prefer cuDNN on Hopper
    assert sdpa_kernel(h100, "bf16", 128, 128, "flash2") == "flash2"  # an older PyTorch's flash back end
    assert sdpa_kernel(h100, "bf16", 128, 128, "flash3") == "flash3"
    assert sdpa_kernel(a100, "bf16", 128, 128, "flash3") == "flash2"  # no warpgroup instructions on Ampere
    assert sdpa_kernel(a100, "bf16", 128, 128, "cudnn") == "flash2"


def test_latent_attention_fused_with_its_own_value_head_size():
    """DeepSeek-V3's multi-head latent attention: query and key heads of 192 (here 16 + 8), value heads
    of 128 (here 16). Fused, the layer keeps what grows with the sequence (doubling it doubles the
    layer), and the kernel's output has the value's head size; its FLOPs count the visible pairs
    of a causal call: 2 x 4 heads x (64 x 65 / 2 pairs) x (24 + 16) MACs, forward. (The kernel also
    keeps its random-number seed and offset, two int64 scalars, whatever the length.)"""
    transformers = pytest.importorskip("transformers")
    import torch

    cfg = transformers.DeepseekV3Config(vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                        num_hidden_layers=1, first_k_dense_replace=1, num_attention_heads=4,
                                        num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=16,
                                        qk_rope_head_dim=8, v_head_dim=16, max_position_embeddings=256)
    with torch.device("meta"):
        model = transformers.DeepseekV3ForCausalLM(cfg)
    kept, traces = [], []
    for seq in (64, 128):
        trace, _ = trace_step(Workload(model, {"input_ids": f"2,{seq}:int64"}, attention="fused"), STEP, Parallel())
        kept.append(replay(trace).activations_by_module["model.layers.0.self_attn"])
        traces.append(trace)
    assert kept[1] == 2 * (kept[0] - 16) + 16
    [fwd] = [e for e in traces[0].events if "efficient_attention" in e.op and e.phase == "forward"]
    assert list(fwd.out_shapes[0]) == [2, 4, 64, 16]
    assert fwd.macs == 2 * 4 * (64 * 65 // 2) * (24 + 16)
    assert not any("softmax" in e.op for e in traces[0].events if e.module.endswith("self_attn"))
