"""Make meta-device runs pick the kernels the target device would pick.

On the meta device ``F.scaled_dot_product_attention`` always falls back to its math
decomposition (two matmuls and a softmax, with a causal mask applied to a full score
matrix). A CPU runs the fused flash-attention kernel instead, and the cost of a causal
call is about half. This function mode sends eligible calls to the kernel the target
device would use, so the trace (FLOPs, bytes and allocations) follows that device.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

_FLASH_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _sdpa_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    out = dict(zip(names, args))
    out.update(kwargs)
    return out


def cpu_flash_eligible(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: dict[str, Any]) -> bool:
    """A close reading of ATen's ``use_flash_attention_cpp`` checks (dense 4-D inputs, equal
    head sizes, a supported dtype, a mask that broadcasts, no dropout while training)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return False
    if q.dtype not in _FLASH_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return False
    if not (q.shape[-1] == k.shape[-1] == v.shape[-1]):
        return False
    if q.shape[0] != k.shape[0] or k.shape[1] != v.shape[1]:
        return False
    if q.shape[1] != k.shape[1] and not (a.get("enable_gqa") and q.shape[1] % k.shape[1] == 0):
        return False
    if min(q.shape[-2], k.shape[-2]) == 0:
        return False
    if float(a.get("dropout_p", 0.0) or 0.0) > 0.0 and torch.is_grad_enabled():
        return False
    mask = a.get("attn_mask")
    return not (mask is not None and a.get("is_causal"))


class CpuKernels:
    """Route meta-tensor attention to the CPU's flash-attention kernel where the CPU would.

    A context manager that swaps ``torch.nn.functional.scaled_dot_product_attention`` for
    the span of a trace (nn.MultiheadAttention, transformers and timm all call it through
    that name), and puts the original back on exit.
    """

    def __init__(self) -> None:
        self._saved: Any = None

    def __enter__(self) -> CpuKernels:
        self._saved = F.scaled_dot_product_attention
        original = self._saved

        def sdpa(*args: Any, **kwargs: Any) -> Any:
            a = _sdpa_args(args, kwargs)
            q, k, v = a["query"], a["key"], a["value"]
            if isinstance(q, torch.Tensor) and q.device.type == "meta" and cpu_flash_eligible(q, k, v, a):
                if q.shape[1] != k.shape[1]:  # grouped-query attention: heads repeated for the kernel
                    rep = q.shape[1] // k.shape[1]
                    k = k.repeat_interleave(rep, dim=1)
                    v = v.repeat_interleave(rep, dim=1)
                out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    q, k, v, float(a.get("dropout_p", 0.0) or 0.0), bool(a.get("is_causal", False)),
                    attn_mask=a.get("attn_mask"), scale=a.get("scale"),
                )
                return out
            return original(*args, **kwargs)

        F.scaled_dot_product_attention = sdpa
        return self

    def __exit__(self, *exc: Any) -> None:
        F.scaled_dot_product_attention = self._saved
