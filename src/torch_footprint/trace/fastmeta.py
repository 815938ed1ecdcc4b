"""Output tensors for hot ops whose meta kernels are slow Python decompositions.

On the meta device, batch norm, layer norm, addmm and the pointwise ops run torch's
Python reference implementations just to produce empty outputs (about 2.5 ms per batch
norm call, half of the time spent tracing a CNN zoo). These functions build the same
empty outputs directly: same shapes, strides and dtypes as torch's own meta kernels,
which a test checks case by case. They are used only when every tensor argument is a
plain meta tensor, and for pointwise ops only in the simple case (one shape, dtype and
layout; no broadcasting or type promotion), where the result is known without checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten


def _stat_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _batch_norm(x: torch.Tensor, *rest: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    c = x.shape[1] if x.dim() > 1 else 0
    dt = _stat_dtype(x.dtype)
    return (torch.empty_like(x), torch.empty((c,), dtype=dt, device=x.device),
            torch.empty((c,), dtype=dt, device=x.device))


def _layer_norm(x: torch.Tensor, normalized_shape: list[int], *rest: Any,
                **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    axis = x.dim() - len(normalized_shape)
    stat_shape = tuple(x.shape[:axis]) + (1,) * len(normalized_shape)
    dt = _stat_dtype(x.dtype)
    return (torch.empty(x.shape, dtype=x.dtype, device=x.device),
            torch.empty(stat_shape, dtype=dt, device=x.device), torch.empty(stat_shape, dtype=dt, device=x.device))


def _addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)


def _gelu(x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return torch.empty_like(x)


def _grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, bias: Any = None,
                out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The CPU kernel's output of a grouped matmul (mixture-of-experts layers): torch's meta
    kernel follows the CUDA rule and refuses float32, which the CPU kernel runs. Shapes:
    (T, K) x (G, K, N) -> (T, N); (M, K) x (K, N) grouped over K -> (G, M, N);
    (G, M, K) x (N, K)-shaped groups -> (M, N); (G, M, K) x (G, K, N) -> (G, M, N)."""
    groups = offs.shape[0] if offs is not None else None
    if a.dim() == 2 and b.dim() == 2:
        shape = (groups or 1, a.shape[0], b.shape[1])
    elif a.dim() == 2:
        torch._check(groups is None or groups == b.shape[0], lambda: "matrix batch sizes have to match")
        shape = (a.shape[0], b.shape[-1])
    elif b.dim() == 2:
        torch._check(groups is None or groups == a.shape[0], lambda: "matrix batch sizes have to match")
        shape = (a.shape[1], b.shape[1])
    else:
        torch._check(a.shape[0] == b.shape[0], lambda: "batched dimension has to match")
        shape = (a.shape[0], a.shape[1], b.shape[-1])
    torch._check(a.shape[-1] == b.shape[-2] if b.dim() == 3 or a.dim() == 3 else True,
                 lambda: "contraction dimension of mat_a and mat_b must match")
    return torch.empty(shape, dtype=out_dtype or a.dtype, device=a.device)


FAST_META: dict[Any, Callable[..., Any]] = {
    aten.native_batch_norm.default: _batch_norm,
    aten._native_batch_norm_legit_no_training.default: _batch_norm,
    aten._native_batch_norm_legit.default: _batch_norm,
    aten.native_layer_norm.default: _layer_norm,
    aten.addmm.default: _addmm,
    aten.gelu.default: _gelu,
}


# pointwise ops whose result is not of their inputs' dtype
_NOT_SAME_DTYPE = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not",
                   "isnan", "isinf", "isfinite", "isposinf", "isneginf", "signbit", "bitwise_not", "angle",
                   "real", "imag", "frexp", "copysign", "polar", "complex", "view_as_real", "_to_copy",
                   "where", "masked_fill", "clone", "copy", "copy_", "bucketize", "_conj"}


def _pointwise_same(func: Any, args: tuple[Any, ...]) -> Callable[..., Any] | None:
    """Pointwise ops on floating meta tensors of one shape, dtype and layout, with Python
    numbers beside them: the result is an empty tensor like the first (or the first itself,
    in place). Anything else (broadcasting, promotion, mixed layouts) goes to torch."""
    if torch.Tag.pointwise not in func.tags or func._overloadname == "out":
        return None
    name = func._overloadpacket.__name__
    if name.rstrip("_") in _NOT_SAME_DTYPE or name in _NOT_SAME_DTYPE:
        return None
    first: torch.Tensor | None = None
    for a in args:
        if isinstance(a, torch.Tensor):
            if type(a) not in (torch.Tensor, torch.nn.Parameter) or a.device.type != "meta":
                return None
            if first is None:
                if not a.is_floating_point():
                    return None
                first = a
            elif a.shape != first.shape or a.dtype != first.dtype or a.stride() != first.stride():
                return None
        elif not (a is None or isinstance(a, (bool, int, float, str))):
            return None
    if first is None:
        return None
    if name.endswith("_"):
        return _in_place
    return _like_first


def _in_place(*args: Any, **kwargs: Any) -> torch.Tensor:
    return args[0]


def _like_first(*args: Any, **kwargs: Any) -> torch.Tensor:
    first = next(a for a in args if isinstance(a, torch.Tensor))
    return torch.empty_like(first)


# ops whose meta kernel follows another device's rule than the CPU's: the CPU's output for
# meta and fake tensors alike (real tensors run the real kernel)
CPU_RULE: dict[Any, Callable[..., Any]] = {}
if hasattr(aten, "_grouped_mm"):
    CPU_RULE[aten._grouped_mm.default] = _grouped_mm


def _mkldnn_rnn_layer(*args: Any, **kwargs: Any) -> Any:
    """oneDNN's LSTM layer with its training workspace at the size the CPU kernel allocates."""
    from .onednn_rnn import with_workspace

    return with_workspace(aten.mkldnn_rnn_layer.default, args, kwargs)


def _mkldnn_rnn_layer_backward(*args: Any, **kwargs: Any) -> Any:
    """Its backward, with the second bias gradient a storage of its own as on the CPU."""
    from .onednn_rnn import with_own_bias_grad

    return with_own_bias_grad(aten.mkldnn_rnn_layer_backward.default, args, kwargs)


CPU_RULE[aten.mkldnn_rnn_layer.default] = _mkldnn_rnn_layer
CPU_RULE[aten.mkldnn_rnn_layer_backward.default] = _mkldnn_rnn_layer_backward


def _cpu_rule(func: Any, args: tuple[Any, ...]) -> Callable[..., Any] | None:
    """``CPU_RULE[func]`` when every tensor argument is a meta or a fake CPU tensor."""
    from torch._subclasses.fake_tensor import FakeTensor

    for a in args:
        if isinstance(a, torch.Tensor) and not (
                a.device.type == "meta" or (a.device.type == "cpu" and isinstance(a, FakeTensor))):
            return None
    return CPU_RULE[func]


def fast_meta(func: Any, args: tuple[Any, ...]) -> Callable[..., Any] | None:
    """The fast kernel for ``func`` when its tensors are plain meta tensors, else None; the
    CPU's output rule (:data:`CPU_RULE`) for meta and fake CPU tensors."""
    if func in CPU_RULE:
        return _cpu_rule(func, args)
    fn = FAST_META.get(func)
    if fn is None:
        return _pointwise_same(func, args)
    for a in args:
        if isinstance(a, torch.Tensor) and (a.device.type != "meta" or type(a) not in (torch.Tensor,
                                                                                     torch.nn.Parameter)):
            return None
    # addmm with a bias that does not broadcast, or a scalar: let torch check and raise
    if func is aten.addmm.default and not (args[1].dim() == 2 and args[2].dim() == 2
                                           and args[1].shape[1] == args[2].shape[0]):
        return None
    return fn
