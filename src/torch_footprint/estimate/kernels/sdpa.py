"""Which kernel ``F.scaled_dot_product_attention`` runs on a CUDA GPU, as PyTorch picks it
(aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, ``select_sdp_backend``): the first of
flash attention, memory-efficient attention and the math fallback whose checks pass.

    flash          no attn_mask; q, k and v of one head size, at most 256; fp16 or bf16 on sm80
                   and later (sm80 to sm121); is_causal only with as many queries as keys; in
                   training on sm86-sm89 and sm120-sm121, no head size in (192, 224], nor in
                   (224, 256] with dropout; grouped-query heads with enable_gqa
    mem-efficient  sm50 to sm121; q and k of one head size; q's and v's head sizes multiples of
                   the GEMM alignment (8 for fp16 and bf16 and 4 for fp32 on sm80 and later);
                   fp16, fp32 (and bf16 from sm80); a mask and dropout allowed
    math           the rest: the scores materialised, softmax, dropout, a second matmul

Recent releases try cuDNN's attention first on sm90 and sm100 with cuDNN 9.15 or newer; the
order above is the default of the releases before. Which fused kernel a call runs decides its
price (:func:`sdpa_kernel`), not what the trace records. The trace follows the CPU's kernels
(:mod:`torch_footprint.trace.kernels`), which run dropout in training and a mask together with
is_causal through the math path; for NVIDIA GPUs alone ``fit`` traces a call the CPU runs unfused
for its dropout through the fused kernel where the choice here is fused, and says where the two
still differ.
"""

from __future__ import annotations

from typing import Any

from ...hardware.db import Accelerator

# compute capability by architecture (NVIDIA's CUDA GPUs page, developer.nvidia.com/cuda-gpus);
# ids whose part differs from the rest of its architecture first
SM_BY_ID = {"a100-pcie-40gb": (8, 0), "a100-sxm-40gb": (8, 0), "a100-pcie-80gb": (8, 0), "a100-sxm-80gb": (8, 0),
            "jetson-agx-orin-64gb": (8, 7), "b200": (10, 0), "gtx-1080-ti": (6, 1)}
SM_BY_ARCH = {"pascal": (6, 0), "volta": (7, 0), "turing": (7, 5), "ampere": (8, 6), "ada": (8, 9),
              "hopper": (9, 0), "blackwell": (12, 0)}


def sm_of(acc: Accelerator) -> tuple[int, int] | None:
    """The compute capability of an NVIDIA GPU row; None for other accelerators."""
    if acc.vendor != "nvidia" or acc.kind != "gpu":
        return None
    return SM_BY_ID.get(acc.id) or SM_BY_ARCH.get(acc.architecture)


def _between(sm: tuple[int, int], lo: tuple[int, int], hi: tuple[int, int]) -> bool:
    return lo <= sm <= hi


def flash_refusal(c: dict[str, Any], sm: tuple[int, int]) -> str:
    """Why flash attention cannot run call ``c`` on ``sm`` ("" when it can)."""
    d, dv = c["head_dim"], c.get("head_dim_v", c["head_dim"])
    if c.get("mask"):
        return "an explicit attn_mask"
    if not (d == c.get("head_dim_k", d) == dv and d <= 256):
        return f"head size {d} (flash: one size for q, k, v, at most 256)"
    if not _between(sm, (8, 0), (12, 1)):
        return f"sm{sm[0]}{sm[1]} (flash: sm80 to sm121)"
    training = c.get("grad", False)
    if training and (_between(sm, (8, 6), (8, 9)) or _between(sm, (12, 0), (12, 1))) and not (
            d <= 192 or (c.get("dropout", 0.0) == 0.0 and d > 224)):
        return f"training with head size {d} on sm{sm[0]}{sm[1]}"
    if c.get("causal") and c.get("seq_q") != c.get("seq_k"):
        return "is_causal with fewer queries than keys"
    if c["dtype"] not in ("float16", "bfloat16"):
        return f"{c['dtype']} (flash: float16, bfloat16)"
    if c.get("q_heads") != c.get("kv_heads") and not c.get("enable_gqa") and c.get("kv_heads") != 1:
        return "grouped key/value heads without enable_gqa"
    return ""


def mem_efficient_refusal(c: dict[str, Any], sm: tuple[int, int]) -> str:
    """Why memory-efficient attention cannot run call ``c`` on ``sm`` ("" when it can)."""
    d, dv = c["head_dim"], c.get("head_dim_v", c["head_dim"])
    if not _between(sm, (5, 0), (12, 1)):
        return f"sm{sm[0]}{sm[1]} (mem-efficient: sm50 to sm121)"
    half = c["dtype"] in ("float16", "bfloat16")
    align = 8 if half and sm >= (7, 0) else 4 if sm >= (8, 0) else 1
    if d != c.get("head_dim_k", d) or d % align or dv % align:
        return f"head size {d} (mem-efficient: a multiple of {align})"
    dtypes = ("float16", "float32", "bfloat16") if sm >= (8, 0) else ("float16", "float32")
    if c["dtype"] not in dtypes:
        return f"{c['dtype']} on sm{sm[0]}{sm[1]}"
    if c.get("q_heads") != c.get("kv_heads") and not c.get("enable_gqa") and c.get("kv_heads") != 1:
        return "grouped key/value heads without enable_gqa"
    return ""


def cuda_backend(c: dict[str, Any], sm: tuple[int, int]) -> tuple[str, str]:
    """The kernel CUDA runs attention call ``c`` with (a record of
    :class:`~torch_footprint.trace.kernels.CpuKernels`), and why not the ones before it."""
    no_flash = flash_refusal(c, sm)
    if not no_flash:
        return "flash", ""
    no_eff = mem_efficient_refusal(c, sm)
    if not no_eff:
        return "mem-efficient", f"not flash: {no_flash}"
    return "math", f"not flash: {no_flash}; not mem-efficient: {no_eff}"


def rocm_backend(c: dict[str, Any]) -> tuple[str, str]:
    """The kernel PyTorch's SDPA runs attention call ``c`` with on an AMD GPU, and why: AOTriton's for a
    fused call (ROCm's flash and memory-efficient back ends both run them), the math path as traced."""
    return ("math", "as traced") if c["cpu_path"] == "math" else ("aotriton", "PyTorch's SDPA on ROCm")


def is_rocm(acc: Accelerator) -> bool:
    """Whether ``acc`` is an AMD GPU, where PyTorch runs on ROCm."""
    return acc.vendor == "amd" and acc.kind == "gpu"


ATTENTION_KERNELS = ("flash1", "flash2", "flash3", "cudnn")  # the fused kernels a user can name (--attention)
WGMMA_SMS = ((9, 0), (10, 0))  # warpgroup (wgmma) tensor-core instructions: Hopper and Blackwell data-centre parts


def sdpa_kernel(acc: Accelerator, key: str, head: int, head_v: int, asked: str | None = None) -> str:
    """The kernel ``F.scaled_dot_product_attention`` runs for a fused call on ``acc``: cuDNN's
    attention where PyTorch prefers it (sdp_utils.cpp, check_prefer_cudnn_attention: compute
    capability 9.0 or 10.0 with cuDNN 9.15 or newer, the releases since 2.9; fp16 or bf16, one
    head size, a multiple of 8 up to 256), else FlashAttention-2 (the flash back end). ``asked``:
    the kernel the user names (``--attention flash1|flash2|flash3|cudnn``: an older PyTorch,
    FlashAttention or Transformer Engine), where the GPU can run it (FlashAttention-2's class
    elsewhere). On an AMD GPU PyTorch's flash and memory-efficient back ends both run AOTriton's
    kernels (aten/src/ATen/native/transformers/hip/flash_attn/aot, the default unless
    TORCH_ROCM_FA_PREFER_CK=1 selects Composable Kernel's): ``aotriton``."""
    sm = sm_of(acc)
    if asked in ATTENTION_KERNELS:  # the kernel the user's stack runs; a warpgroup kernel only where wgmma is
        return asked if asked in ("flash1", "flash2") or sm in WGMMA_SMS else "flash2"
    if is_rocm(acc):
        return "aotriton"
    if sm in WGMMA_SMS and key in ("fp16", "bf16") and head == head_v and head <= 256 and head % 8 == 0:
        return "cudnn"
    return "flash2"
