"""Kernels a CUDA device runs where a CPU or meta trace decomposes: operators of this tool's own
(namespace ``footprint``) that stand for one ATen kernel each, so a trace made for a CUDA target
records that kernel (its allocations, what it saves for the backward, one event) rather than the
composite the trace's own device runs. The recorder names their events as the ATen kernels
(``aten._fused_rms_norm.default``), and their values are the composite's, so a real run traced
through them computes what it would.

* ``F.rms_norm``: ATen's ``rms_norm`` sends a CUDA input whose weight has its dtype (or no weight)
  to ``_fused_rms_norm`` ("Mismatch dtype between input and weight ... Cannot dispatch to fused
  implementation" otherwise, layer_norm.cpp); a CPU or meta input takes the composite (a cast to
  fp32, pow, mean, add, rsqrt, two multiplies, a cast back). Seen on CUDA fake tensors with torch
  2.14, and timed on an H100 and an H200 (``benchmarks/gpu_measure.py``'s memory section: one pass
  over the rows, as a layer norm). Its derivative is ``_fused_rms_norm_backward`` (it keeps the
  input, the weight and the reciprocal root mean square, one fp32 figure per row for 16-bit
  inputs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

NAMESPACE = "footprint"


@torch.library.custom_op(f"{NAMESPACE}::_fused_rms_norm", mutates_args=())
def fused_rms_norm(input: Tensor, normalized_shape: list[int], weight: Tensor | None,
                   eps: float | None) -> tuple[Tensor, Tensor]:
    y, rstd = torch.ops.aten._fused_rms_norm(input, normalized_shape, weight, eps)
    return y, rstd


@fused_rms_norm.register_fake
def _fused_rms_norm_fake(input: Tensor, normalized_shape: list[int], weight: Tensor | None,
                         eps: float | None) -> tuple[Tensor, Tensor]:
    n = len(normalized_shape)
    acc = torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
    return torch.empty_like(input), input.new_empty((*input.shape[:-n], *(1,) * n), dtype=acc)


@torch.library.custom_op(f"{NAMESPACE}::_fused_rms_norm_backward", mutates_args=())
def fused_rms_norm_backward(grad: Tensor, input: Tensor, normalized_shape: list[int], rstd: Tensor,
                            weight: Tensor | None) -> tuple[Tensor, Tensor]:
    op: Any = torch.ops.aten._fused_rms_norm_backward.default
    if input.device.type not in ("meta", "cuda"):  # ATen has no CPU kernel: its decomposition
        from torch._decomp import decomposition_table

        op = decomposition_table[op]
    gi, gw = op(grad, input, normalized_shape, rstd, weight, [True, weight is not None])
    return gi, gw if gw is not None else input.new_empty(0)


@fused_rms_norm_backward.register_fake
def _fused_rms_norm_backward_fake(grad: Tensor, input: Tensor, normalized_shape: list[int], rstd: Tensor,
                                  weight: Tensor | None) -> tuple[Tensor, Tensor]:
    return torch.empty_like(input), torch.empty_like(weight) if weight is not None else input.new_empty(0)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    input, shape, weight, _ = inputs
    ctx.shape, ctx.has_weight = shape, weight is not None
    ctx.set_materialize_grads(False)  # the rstd output has no gradient: none is made for it
    ctx.save_for_backward(input, weight, output[1])


def _backward(ctx: Any, grad: Tensor | None, _grad_rstd: Tensor | None) -> tuple[Any, ...]:
    input, weight, rstd = ctx.saved_tensors
    if grad is None:
        return None, None, None, None
    gi, gw = torch.ops.footprint._fused_rms_norm_backward(grad, input, ctx.shape, rstd, weight)
    return gi, None, gw if ctx.has_weight else None, None


fused_rms_norm.register_autograd(_backward, setup_context=_setup)


def cuda_rms_norm(original: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``F.rms_norm`` as a CUDA device runs it (see the module's docstring); ``original`` where the
    dtypes send CUDA to the composite too."""

    def rms_norm(input: Tensor, normalized_shape: Any, weight: Tensor | None = None,
                 eps: float | None = None) -> Tensor:
        if input.is_floating_point() and (weight is None or weight.dtype == input.dtype):
            shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
            return torch.ops.footprint._fused_rms_norm(input, shape, weight, eps)[0]
        return original(input, normalized_shape, weight, eps)

    return rms_norm
