"""Make traced runs pick the kernels the target device would pick, and count causal attention as causal.

On the meta device ``F.scaled_dot_product_attention`` always falls back to its math
decomposition (two matmuls and a softmax, with a causal mask applied to a full score
matrix). A CPU runs the fused flash-attention kernel instead, and the cost of a causal
call is about half. This function mode sends eligible calls to the kernel the target
device would use, so the trace (FLOPs, bytes and allocations) follows that device.

Where the CPU itself runs causal attention through the math path (with dropout while
training), the kernels are left as they are (bytes and allocations stay true) and the
score and weighted-sum matmuls of that call, forward and backward, are counted over the
visible pairs only: causal attention is counted as causal whichever kernel runs it.
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


# (visible pairs, all pairs) of the causal attention call whose matmuls are running
_CAUSAL: list[tuple[int, int]] = []


def causal_fraction() -> tuple[int, int] | None:
    """Inside a causal attention call on the math path: (visible pairs, all pairs)."""
    return _CAUSAL[-1] if _CAUSAL else None


def _count_math_causal(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any], q: torch.Tensor,
                       k: torch.Tensor, v: torch.Tensor) -> Any:
    from .formulas import causal_pairs

    lq, lk = q.shape[-2], k.shape[-2]
    scope = (causal_pairs(lq, lk), lq * lk)
    _CAUSAL.append(scope)
    try:
        out = original(*args, **kwargs)
    finally:
        _CAUSAL.pop()
    if torch.is_grad_enabled() and isinstance(out, torch.Tensor) and out.requires_grad:
        ins = [t for t in (q, k, v) if isinstance(t, torch.Tensor) and t.requires_grad]
        if ins:  # the same scope while autograd runs this call's backward
            torch.autograd.graph.register_multi_grad_hook([out], lambda _g: _CAUSAL.append(scope))
            torch.autograd.graph.register_multi_grad_hook(ins, lambda _g: _CAUSAL.pop() if _CAUSAL else None)
    return out


class CpuKernels:
    """Route meta-tensor attention to the CPU's flash-attention kernel where the CPU would.

    A context manager that swaps ``torch.nn.functional.scaled_dot_product_attention`` for
    the span of a trace (nn.MultiheadAttention, transformers and timm all call it through
    that name), and puts the original back on exit.
    """

    def __init__(self, reroute: bool = True) -> None:
        self._saved: Any = None
        self.reroute = reroute  # send meta-tensor calls to the CPU's fused kernel

    def __enter__(self) -> CpuKernels:
        self._saved = F.scaled_dot_product_attention
        original = self._saved

        def sdpa(*args: Any, **kwargs: Any) -> Any:
            a = _sdpa_args(args, kwargs)
            q, k, v = a["query"], a["key"], a["value"]
            if not isinstance(q, torch.Tensor):
                return original(*args, **kwargs)
            eligible = cpu_flash_eligible(q, k, v, a)
            if self.reroute and q.device.type == "meta" and eligible:
                if q.shape[1] != k.shape[1]:  # grouped-query attention: heads repeated for the kernel
                    rep = q.shape[1] // k.shape[1]
                    k = k.repeat_interleave(rep, dim=1)
                    v = v.repeat_interleave(rep, dim=1)
                out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    q, k, v, float(a.get("dropout_p", 0.0) or 0.0), bool(a.get("is_causal", False)),
                    attn_mask=a.get("attn_mask"), scale=a.get("scale"),
                )
                return out
            if a.get("is_causal") and a.get("attn_mask") is None and not eligible:
                return _count_math_causal(original, args, kwargs, q, k, v)
            return original(*args, **kwargs)

        F.scaled_dot_product_attention = sdpa
        return self

    def __exit__(self, *exc: Any) -> None:
        F.scaled_dot_product_attention = self._saved
