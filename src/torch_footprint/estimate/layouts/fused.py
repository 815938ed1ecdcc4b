"""The fused kernels Megatron-core runs in a transformer layer (and Transformer Engine, Liger or
torch.compile give other stacks) where a Hugging Face decoder runs several operators, so that a
traced step keeps for the backward what those kernels keep.

* RMSNorm: Transformer Engine's (``te.pytorch.RMSNorm``; Apex's ``FusedRMSNorm`` alike) saves
  its input and the per-token reciprocal of the root mean square, and recomputes the normalised
  tensor in the backward. Hugging Face's ``LlamaRMSNorm`` saves an fp32 copy of the input (for
  the square and the product) and the normalised tensor cast back (for the product with the
  weight): 4 + 2 bytes a value in a bf16 model instead of 2.
* SwiGLU: Megatron-core's ``bias_swiglu`` fusion saves the first linear's output (the gate and
  up halves) and recomputes SiLU in the backward; the unfused ``act_fn(gate) * up`` also saves
  SiLU's output, one more tensor of the MLP's width.
* The experts' gate of a mixture of experts (transformers' ``_apply_gate``: SwiGLU, gpt-oss's
  clamped sigmoid gate): one kernel over the grouped projection's output that keeps that input
  and recomputes the rest in the backward, as Megatron-core's fused activations and NeMo
  AutoModel's compiled ``quick_geglu`` do; the unfused code keeps each clamp, product and sigmoid,
  several tensors of the experts' width per routed token. The router's weight of each routed
  token is applied in that kernel too (Megatron-core's ``activation_func_with_probs`` and
  ``weighted_bias_swiglu`` in moe/experts.py, NeMo AutoModel's ``WeightedSwiGLUFunction``), so the
  experts' outputs are summed back unweighted: transformers multiplies them by the weights after
  the down projection, which keeps that projection's output, the model's width per routed token,
  for the weights' gradient.

What these replace are the modules' forwards, on the traced copy of the model; the operators'
arithmetic (FLOPs, bytes moved) is the same but for the recomputation in the backward.

Under FP8 (``--fp8``), Transformer Engine's linears and grouped linears keep the fp8 copy of
their input the forward's GEMM read, its column-wise (transposed) data only, for the weight
gradient's GEMM (transformer_engine/pytorch/module/linear.py and grouped_linear.py: "Discard
row-wise data since it is not needed in backward pass", ``update_usage(rowwise_usage=False,
columnwise_usage=True)``): one byte a value where the bf16 input was two (:func:`te_fp8_inputs`).

Three more of Megatron-core's fusions change only the time, not what is kept (read by
``kernels.roofline``: :func:`rope_modules`, :func:`merged_linears`, ``kernels.fusion``):

* RoPE (``apply_rope_fusion``): Transformer Engine's fused rotary kernel, one pass over the
  query and one over the key each way, where the Hugging Face code runs a product, a rotation
  (slices, a negation, a concatenation), a second product and a sum, each a kernel. NeMo's Llama
  configs set it, Megatron-Bridge's Llama bridge and its performance recipes (every model) too.
* Gradient accumulation (``gradient_accumulation_fusion``): the weight-gradient GEMM adds into
  the fp32 ``main_grad`` buffer itself (its epilogue), where autograd accumulates a separate
  gradient into ``.grad`` with an add of its own. Megatron-LM's default, and Bridge's and NeMo's
  wherever the fused kernel is installed (NVIDIA's containers).
* Merged linears: the query, key and value projections are one linear (``linear_qkv``), the
  gate and up projections another (``linear_fc1``), as Megatron-Bridge maps a Hugging Face
  checkpoint onto Megatron-core (its ``QKVMapping`` and ``GatedMLPMapping``): their shared input's
  gradient comes out of one GEMM, where autograd sums the separate linears' gradients with an add."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...trace.setups import Patches, own_forward


class _RMSNorm(torch.autograd.Function):
    """RMSNorm that keeps its input and the reciprocal root mean square for the backward."""

    footprint_saves_only_for_backward = True  # a replayed block may stand for it (trace.blockkeys.SAVES_ONLY)

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x32 = x.float()
        rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return weight * (x32 * rstd).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight, rstd = ctx.saved_tensors
        normed = x.float() * rstd
        gw = grad.float() * weight.float()
        grad_x = rstd * (gw - normed * (gw * normed).mean(-1, keepdim=True))
        grad_w = (grad.float() * normed).flatten(0, -2).sum(0)
        return grad_x.to(x.dtype), grad_w.to(weight.dtype), None


class _SwiGLU(torch.autograd.Function):
    """SiLU(gate) x up that keeps gate and up, and recomputes SiLU in the backward."""

    footprint_saves_only_for_backward = True

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        gate, up = ctx.saved_tensors
        sig = torch.sigmoid(gate)
        silu = gate * sig
        return grad * up * sig * (1 + gate * (1 - sig)), grad * silu


class _Recomputed(torch.autograd.Function):
    """``fn(x)`` for an elementwise ``fn`` that keeps only ``x`` and recomputes the rest backward."""

    footprint_saves_only_for_backward = True  # (``ctx.fn`` holds the function, no tensor)

    @staticmethod
    def forward(ctx: Any, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        ctx.fn = fn
        ctx.save_for_backward(x)
        return fn(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            again = x.detach().requires_grad_()
            (grad_x,) = torch.autograd.grad(ctx.fn(again), again, grad)
        return None, grad_x


class _WeightedGate(torch.autograd.Function):
    """``fn(x) * probs`` (each routed token's router weight) keeping ``x`` and ``probs``, the rest
    recomputed in the backward."""

    footprint_saves_only_for_backward = True

    @staticmethod
    def forward(ctx: Any, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                probs: torch.Tensor) -> torch.Tensor:
        ctx.fn = fn
        ctx.save_for_backward(x, probs)
        return (fn(x) * probs).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, probs = ctx.saved_tensors
        with torch.enable_grad():
            again = x.detach().requires_grad_()
            y = ctx.fn(again)
            (grad_x,) = torch.autograd.grad(y, again, grad * probs)
        return None, grad_x, (grad * y.detach()).sum(-1, keepdim=True).to(probs.dtype)


# the router weights of the experts' call running now, in the order its gate sees the routed tokens
_ROUTED: list[torch.Tensor] = []
# transformers' experts implementations whose gate sees every routed token at once: in expert order
# (grouped_mm sorts them), or as routed (batched_mm)
SORTED, AS_ROUTED = "grouped_mm", "batched_mm"


# each module's new forward: one function, given its module (``partial``, so that the replay of
# a repeated block finds the same forward in each: trace.blockkeys.same_value)
def _norm_forward(mod: nn.Module, eps: float, x: torch.Tensor) -> torch.Tensor:
    return _RMSNorm.apply(x, mod.weight, eps)


def _gate_forward(mod: nn.Module, gate: Callable[..., torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    if _ROUTED and _ROUTED[-1].shape[0] == x.shape[0]:
        return _WeightedGate.apply(functools.partial(gate, mod), x, _ROUTED[-1])
    return _Recomputed.apply(functools.partial(gate, mod), x)


def _experts_forward(mod: nn.Module, forward: Callable[..., torch.Tensor], hidden: torch.Tensor,
                     index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """transformers' experts with each routed token's weight applied in the gate (:class:`_WeightedGate`):
    the weights after the down projection are ones that need no gradient, so nothing is kept for them."""
    how = getattr(getattr(mod, "config", None), "_experts_implementation", None)
    if how not in (SORTED, AS_ROUTED) or not weights.requires_grad:
        return forward(hidden, index, weights)
    flat = weights.reshape(-1)
    routed = flat[torch.sort(index.reshape(-1))[1]] if how == SORTED else flat
    _ROUTED.append(routed.unsqueeze(-1))
    try:
        return forward(hidden, index, torch.ones_like(weights))
    finally:
        _ROUTED.pop()


def _mlp_forward(mod: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return mod.down_proj(_SwiGLU.apply(mod.gate_proj(x), mod.up_proj(x)))


def fuse_like_megatron(model: nn.Module) -> tuple[list[str], Callable[[], None]]:
    """Give ``model``'s RMSNorms, SwiGLU MLPs and experts' gates the fused kernels of Megatron-core
    (module docstring): what was fused, and a function that puts the modules' own forwards back."""
    changed: list[nn.Module] = []
    norms = mlps = gates = 0
    for mod in model.modules():
        gate = getattr(type(mod), "_apply_gate", None)
        if callable(gate) and "_apply_gate" not in vars(mod):  # transformers' experts (use_experts_implementation)
            mod._apply_gate = functools.partial(_gate_forward, mod, gate)
            mod.forward = functools.partial(_experts_forward, mod, functools.partial(type(mod).forward, mod))
            changed.append(mod)
            gates += 1
            continue
        eps = getattr(mod, "variance_epsilon", getattr(mod, "eps", None))
        weight = getattr(mod, "weight", None)
        if type(mod).__name__.endswith("RMSNorm") and isinstance(weight, nn.Parameter) and isinstance(eps, float):
            mod.forward = functools.partial(_norm_forward, mod, eps)  # type: ignore[method-assign]
            changed.append(mod)
            norms += 1
        elif (all(isinstance(getattr(mod, k, None), nn.Linear) for k in ("gate_proj", "up_proj", "down_proj"))
              and type(getattr(mod, "act_fn", None)).__name__ in ("SiLU", "SiLUActivation")):
            mod.forward = functools.partial(_mlp_forward, mod)  # type: ignore[method-assign]
            changed.append(mod)
            mlps += 1

    def undo() -> None:
        for m in changed:
            vars(m).pop("forward", None)
            vars(m).pop("_apply_gate", None)

    what = [f"{n} {kind}" for n, kind in ((norms, "RMSNorms"), (mlps, "SwiGLU MLPs"), (gates, "experts' gates")) if n]
    return what, undo


def rope_modules(model: nn.Module) -> list[str]:
    """The attention modules of a rotary model (one with a rotary-embedding module), whose
    elementwise work Megatron-core runs as its fused RoPE kernels (module docstring)."""
    if not any("Rotary" in type(mod).__name__ for mod in model.modules()):
        return []
    return [name for name, mod in model.named_modules()
            if name and type(mod).__name__.endswith("Attention") and not any(
                type(c).__name__.endswith("Attention") for c in mod.children())]


MERGED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # linear_qkv, linear_fc1


def merged_linears(model: nn.Module) -> list[str]:
    """The linears Megatron-core runs merged (module docstring): each member of a complete group
    of :data:`MERGED` under one parent module."""
    out = []
    for name, mod in model.named_modules():
        for group in MERGED:
            if all(isinstance(getattr(mod, k, None), nn.Linear) for k in group):
                out += [f"{name}.{k}" if name else k for k in group]
    return sorted(out)


class _Fp8Saved:
    """The saved-tensor hooks of a Transformer Engine FP8 module: a floating activation it keeps for
    the backward is kept as one fp8 tensor of its shape (one per input, however many linears save it),
    and read back in the backward as a transient of the original dtype, as the GEMM reads fp8."""

    def __init__(self) -> None:
        self.made: dict[tuple[int, tuple[int, ...]], tuple[Any, torch.Tensor]] = {}

    def pack(self, t: torch.Tensor) -> Any:
        base = t if t._base is None else t._base  # (a linear keeps a 2-D view of a 3-D input, its weight's transpose)
        if isinstance(base, nn.Parameter) or not t.is_floating_point() or t.element_size() < 2 or t.dim() < 2:
            return t
        key = (id(base), tuple(t.shape))
        hit = self.made.get(key)
        if hit is None or hit[0]() is not base:
            hit = (weakref.ref(base), torch.empty(t.shape, dtype=torch.float8_e4m3fn, device=t.device))
            self.made[key] = hit
            weakref.finalize(base, self.made.pop, key, None)
        return (hit[1], t.dtype)

    @staticmethod
    def unpack(x: Any) -> torch.Tensor:
        if isinstance(x, tuple):
            fp8, dtype = x
            return torch.empty(fp8.shape, dtype=dtype, device=fp8.device)
        return x


def _fp8_forward(hooks: _Fp8Saved, forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    with torch.autograd.graph.saved_tensors_hooks(hooks.pack, hooks.unpack):
        return forward(*args, **kwargs)


def _as_kept(forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``forward`` keeping what it saves as it is (the experts' gate, inside an FP8 grouped module)."""
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        return forward(*args, **kwargs)


def te_fp8_inputs(model: nn.Module, heads: tuple[str, ...]) -> tuple[int, Callable[[], None]]:
    """Make ``model``'s linears (but those named in ``heads``, left in high precision) and its experts
    keep their inputs in fp8, as Transformer Engine's FP8 modules do (module docstring): how many
    modules, and a function that puts their forwards back."""
    hooks = _Fp8Saved()
    patches = Patches()
    kept = 0
    for name, mod in model.named_modules():
        experts = callable(getattr(type(mod), "_apply_gate", None))
        if not (experts or (isinstance(mod, nn.Linear) and name.rsplit(".", 1)[-1] not in heads)):
            continue
        patches.put(mod, "forward", functools.partial(_fp8_forward, hooks, own_forward(mod)))
        kept += 1
        if experts:
            gate = vars(mod).get("_apply_gate") or functools.partial(type(mod)._apply_gate, mod)
            patches.put(mod, "_apply_gate", functools.partial(_as_kept, gate))

    def undo() -> None:
        patches.undo()
        hooks.made.clear()

    return kept, undo
