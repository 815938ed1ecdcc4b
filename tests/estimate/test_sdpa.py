"""The attention kernel CUDA picks, rule by rule as pytorch/pytorch's
aten/src/ATen/native/transformers/cuda/sdp_utils.cpp checks them (flash, then memory-efficient,
then math), and fit naming it where it differs from the path the trace took on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from torch_footprint import api
from torch_footprint.estimate.kernels.sdpa import cuda_backend, sm_of
from torch_footprint.hardware import get

H100, A100, RTX3090, T4 = (9, 0), (8, 0), (8, 6), (7, 5)
# a Llama-style causal self-attention call in bf16: 32 query heads, 8 key/value heads, head size 128
CALL = {"dtype": "bfloat16", "head_dim": 128, "head_dim_k": 128, "head_dim_v": 128, "q_heads": 32, "kv_heads": 8,
        "seq_q": 2048, "seq_k": 2048, "mask": False, "causal": True, "dropout": 0.0, "grad": True,
        "enable_gqa": True}


def pick(sm: tuple[int, int], **change: object) -> str:
    return cuda_backend({**CALL, **change}, sm)[0]


def test_flash_when_every_check_passes():
    assert pick(H100) == pick(A100) == "flash"
    assert pick(H100, dropout=0.1) == "flash"  # flash has dropout (the CPU's flash kernel does not train with it)


@pytest.mark.parametrize(("change", "sm", "kernel", "why"), [
    ({"mask": True}, H100, "mem-efficient", "an explicit attn_mask"),  # check_for_attn_mask
    ({"head_dim": 512, "head_dim_k": 512, "head_dim_v": 512}, H100, "mem-efficient", "head size 512"),  # <= 256
    ({"dtype": "float32"}, A100, "mem-efficient", "float32 (flash: float16, bfloat16)"),  # flash dtypes
    ({"causal": True, "seq_q": 1, "seq_k": 2048}, H100, "mem-efficient", "is_causal with fewer queries"),
    ({"enable_gqa": False}, H100, "math", "grouped key/value heads without enable_gqa"),
    # sm86-sm89 in training: head size in (192, 224], or (224, 256] with dropout, fails flash's backward
    ({"head_dim": 200, "head_dim_k": 200, "head_dim_v": 200}, RTX3090, "mem-efficient", "training with head size"),
    ({"head_dim": 256, "head_dim_k": 256, "head_dim_v": 256, "dropout": 0.1}, RTX3090, "mem-efficient",
     "training with head size 256"),
    # a T4 (sm75): no flash before sm80, no bf16 memory-efficient kernel before sm80
    ({}, T4, "math", "sm75 (flash: sm80 to sm121)"),
    # memory-efficient's GEMM alignment: 8 for half precision on sm80 and later
    ({"mask": True, "dtype": "float16", "head_dim": 60, "head_dim_k": 60, "head_dim_v": 60}, A100, "math",
     "a multiple of 8"),
])
def test_each_rule_of_sdp_utils(change: dict, sm: tuple[int, int], kernel: str, why: str):
    got, reason = cuda_backend({**CALL, **change}, sm)
    assert got == kernel and why in reason, reason


def test_the_exceptions_of_those_rules():
    # the sm86 head-size limit is a training one; over 224 without dropout it trains
    assert pick(RTX3090, head_dim=200, head_dim_k=200, head_dim_v=200, grad=False) == "flash"
    assert pick(RTX3090, head_dim=256, head_dim_k=256, head_dim_v=256) == "flash"
    assert pick(T4, dtype="float16") == "mem-efficient"  # fp16 has a memory-efficient kernel on sm75
    assert pick(A100, dtype="float32", head_dim=62, head_dim_k=62, head_dim_v=62) == "math"  # fp32: multiples of 4


def test_compute_capability_of_the_rows():
    # NVIDIA's CUDA GPUs page: A100 8.0, RTX 3090 8.6, RTX 4090 8.9, H100 9.0, B200 10.0, RTX 5090 12.0
    assert [sm_of(get(i)) for i in ("a100-sxm-80gb", "rtx-3090", "rtx-4090", "h100-sxm", "b200", "rtx-5090")] == \
        [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]
    assert sm_of(get("mi300x")) is None


def test_fit_names_cudas_kernel_where_the_cpu_path_differs():
    # GPT-2 with attention dropout 0.1, trained under bf16 autocast: the CPU runs the math path (its flash
    # kernel does not train with dropout), CUDA's sdp_utils picks flash on an H100, math on a T4 (sm75, bf16)
    dropout = str(Path(__file__).resolve().parents[1] / "configs" / "gpt2-tiny-dropout")
    res = api.fit(dropout, {"input_ids": "2,64:int64"}, train=True, precision="bf16-mixed", gpu=["h100-sxm", "t4"])
    rows = {r.accelerator.id: r for r in res.rows}
    h100, t4 = rows["h100-sxm"].attention, rows["t4"].attention
    assert h100 is not None and t4 is not None
    assert (h100[0]["kernel"], h100[0]["traced"], h100[0]["dropout"]) == ("flash", "math", 0.1)
    assert t4[0]["kernel"] == "math"
    assert any(n.startswith("attention on h100-sxm: CUDA's kernel choice (sdp_utils) is flash where the trace ran "
                            "the CPU's math path (dropout 0.1 in training)") for n in res.notes)
    assert not any("t4" in n for n in res.notes if n.startswith("attention"))
    assert rows["h100-sxm"].to_dict()["attention"][0]["kernel"] == "flash"


def test_fit_names_rocms_kernel_on_an_amd_gpu():
    # PyTorch's SDPA on ROCm runs AOTriton's kernels: a fused call is named (and priced) so on an MI300X;
    # GPT-2 with attention dropout trains through the CPU's math path, priced as traced
    llama = str(Path(__file__).resolve().parents[1] / "configs" / "llama-tiny")
    res = api.fit(llama, {"input_ids": "2,64:int64"}, train=True, precision="bf16-mixed", gpu=["mi300x"])
    [row] = res.rows
    assert row.attention is not None and {c["kernel"] for c in row.attention} == {"aotriton"}
    assert row.to_dict()["attention"][0]["why"] == "PyTorch's SDPA on ROCm"
    dropout = str(Path(__file__).resolve().parents[1] / "configs" / "gpt2-tiny-dropout")
    res = api.fit(dropout, {"input_ids": "2,64:int64"}, train=True, precision="bf16-mixed", gpu=["mi300x"])
    assert res.rows[0].attention is not None and res.rows[0].attention[0]["kernel"] == "math"
