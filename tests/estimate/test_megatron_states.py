"""Megatron-core's model states by hand on a tiny Llama (tests/configs/llama-tiny: 619,136
parameters): the model in bf16, fp32 gradients in its gradient buffer, an fp32 master copy and
Adam's fp32 moments, which the distributed optimizer shards over the data-parallel ranks.
Megatron-core's distributed optimizer documentation: 18 bytes a parameter without it, 6 + 12/DP
with it (bf16 parameters, fp32 gradients)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torch_footprint.analysis.memory import replay
from torch_footprint.estimate.layouts.sharding import megatron_scales, step_peak
from torch_footprint.estimate.price import rank_states
from torch_footprint.estimate.workload import trace_step
from torch_footprint.settings import Parallel, Training, Workload

LLAMA = Path(__file__).resolve().parents[1] / "configs" / "llama-tiny"
IDS = {"input_ids": "2,64:int64"}
PARAMS = 619_136
ADAMW = Training(train=True, optimizer="adamw")


def _states(p: Parallel):
    trace, notes = trace_step(Workload(str(LLAMA), IDS, precision="bf16-mixed"), ADAMW, p)
    peak = step_peak(trace, p.sharding, p.state_shards, p.bucket_view)
    whole, _ = rank_states(trace, peak, p, lambda: replay(trace).persistent)
    return trace, whole, notes


@pytest.mark.parametrize(("strategy", "per_param"), [("ddp", 18), ("zero1", 6 + 12 / 2)])
def test_megatron_holds_18_bytes_a_parameter_or_6_plus_12_over_dp(strategy: str, per_param: float):
    trace, whole, notes = _states(Parallel(gpus=2, strategy=strategy, framework="megatron"))
    # bf16 weights 2 B; fp32 main gradients 4 B, reduced in place (no bucket copy); master + moments 12 B
    assert whole.weights == 2 * PARAMS and whole.gradients == 4 * PARAMS and whole.extra == 0
    # (and AdamW's step counters: one fp32 scalar for each of the 21 parameter tensors, 84 B, scaled alike)
    assert whole.optimizer == pytest.approx(12 * PARAMS / (2 if strategy == "zero1" else 1), abs=3 * 84)
    assert whole.total - whole.buffers == pytest.approx(per_param * PARAMS, abs=3 * 84)
    # the forward and backward run in bf16: every parameter the trace holds is bf16
    assert {q.dtype for q in trace.params} == {"bfloat16"}
    assert any("Megatron-core's mixed precision" in n for n in notes)


def test_a_bf16_gradient_buffer_holds_2_bytes_a_parameter():
    # grad_reduce_in_fp32 off (Megatron-Bridge's performance recipes): 2 + 2 + 12/DP bytes a parameter
    _, whole, notes = _states(Parallel(gpus=2, strategy="zero1", framework="megatron", grad_reduce_dtype="bf16"))
    assert whole.gradients == 2 * PARAMS
    assert whole.total - whole.buffers == pytest.approx((4 + 12 / 2) * PARAMS, abs=3 * 84)
    assert any("gradients accumulated in bf16" in n for n in notes)


def test_torch_autocast_keeps_fp32_parameters_and_ddp_buckets():
    # the same layout under torch (autocast over fp32 parameters): 4 + 4 + 8 B and DDP's bucket copy, 4 B
    _, whole, _ = _states(Parallel(gpus=2, strategy="ddp"))
    assert whole.total - whole.buffers == 20 * PARAMS + 84  # and AdamW's 21 fp32 step counters


def test_the_scales_follow_the_optimizer():
    # against a bf16 trace: Adam's two bf16 moments (4 B) become 12 B; momentum's one (2 B) 8 B; plain SGD's
    # master copy goes with the weights (2 + 4 B)
    assert megatron_scales(torch.bfloat16.itemsize, 2) == {"weights": 1.0, "gradients": 2.0, "optimizer state": 3.0}
    assert megatron_scales(2, 1)["optimizer state"] == 4.0
    assert megatron_scales(2, 0)["weights"] == 3.0


def test_megatrons_fused_norm_and_swiglu_keep_less_for_the_backward(monkeypatch: pytest.MonkeyPatch):
    import torch_footprint.estimate.workload as workload

    w = Workload(str(LLAMA), IDS, precision="bf16-mixed")
    p = Parallel(gpus=1, framework="megatron")
    fused, notes = trace_step(w, ADAMW, p)
    monkeypatch.setattr(workload, "fuse_like_megatron", lambda m: ([], lambda: None))
    plain, _ = trace_step(w, ADAMW, p)
    saved = {k: sum(replay(t).activations_by_module.values()) for k, t in (("fused", fused), ("plain", plain))}
    # 128 tokens x hidden 128 in bf16. Hugging Face's RMSNorm keeps an fp32 copy of its input (65,536 B) and the
    # normalised tensor cast back (32,768 B); the fused one its bf16 input (32,768 B, which the other frees),
    # both the reciprocal RMS: 65,536 B less for each of the 5 norms. SiLU's output [128, 344] bf16 (88,064 B)
    # is recomputed in the fused SwiGLU's backward: 2 layers
    assert saved["plain"] - saved["fused"] == 5 * 65_536 + 2 * 88_064
    assert any("5 RMSNorms, 2 SwiGLU MLPs" in n for n in notes)


def test_megatron_fsdp_shards_the_bf16_model_and_its_fp32_states():
    # Megatron-FSDP shards the Float16Module's bf16 parameters, the bf16 gradient buffer and the fp32 master
    # copy and moments over the ranks: (2 + 2 + 12) / 2 = 8 B a parameter, beside the gathered units
    trace, whole, notes = _states(Parallel(gpus=2, strategy="fsdp", framework="megatron", grad_reduce_dtype="bf16"))
    assert whole.weights == PARAMS and whole.gradients == PARAMS
    assert whole.optimizer == pytest.approx(6 * PARAMS, abs=3 * 84)
    assert {q.dtype for q in trace.params} == {"bfloat16"}  # no autocast: no per-step casts of the weights
    assert any("Megatron-core's mixed precision" in n for n in notes)
    # its guide requires --no-gradient-accumulation-fusion: the weight gradients are added, not fused
    assert trace.settings["wgrad_accumulation_fused"] is False


def test_an_fsdp2_policy_under_megatron_stays_pytorchs_fsdp():
    # --fsdp-param-dtype names PyTorch's FSDP2 MixedPrecisionPolicy: fp32 shards (4 / 2 B), computed in bf16
    _, whole, notes = _states(Parallel(gpus=2, strategy="fsdp", framework="megatron", fsdp_param_dtype="bf16"))
    assert whole.weights == 2 * PARAMS
    assert not any("Megatron-core's mixed precision" in n for n in notes)


def test_megatron_fsdp_and_zero1_are_traced_apart_and_pytorchs_are_not():
    # one trace serves the layouts whose keys are equal: Megatron-FSDP's differs from the distributed
    # optimizer's (no gradient accumulation fusion); under PyTorch, FSDP without a policy and ZeRO-1 trace alike
    from torch_footprint.estimate.workload import trace_key

    w = Workload(str(LLAMA), IDS, precision="bf16-mixed")
    key = {(framework, strategy): trace_key(w, ADAMW, Parallel(gpus=2, strategy=strategy, framework=framework))
           for framework in ("megatron", "torch") for strategy in ("fsdp", "zero1")}
    assert key["megatron", "fsdp"] != key["megatron", "zero1"]
    assert key["torch", "fsdp"] == key["torch", "zero1"]
