"""One step of a model: an inference, or a training step (forward, loss, backward,
optimizer). The trace records it, ``bench`` times it and the measured-memory benchmark
runs it under the allocator's profiler: the same function, so what is predicted and what
is measured are the same step."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from ..errors import FootprintError

OptimizerFactory = Callable[[list[nn.Parameter]], torch.optim.Optimizer]


def tensors_in(obj: Any) -> list[torch.Tensor]:
    """The tensors in nested tuples, lists and dicts (a fast path for op arguments), or in
    any pytree such as a Hugging Face ModelOutput."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        out: list[torch.Tensor] = []
        for x in obj:
            if isinstance(x, torch.Tensor):
                out.append(x)
            elif isinstance(x, (tuple, list, dict)):
                out.extend(tensors_in(x))
        return out
    if isinstance(obj, dict):
        return tensors_in(list(obj.values()))
    leaves, _ = tree_flatten(obj)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def recomputing() -> bool:
    """Whether a backward is running now: forward code that runs then is a checkpoint's
    recomputation, whose graph autograd never runs backward. Grad hooks must not be hung on
    it: a hook's closure holding the nodes it hangs on (``register_multi_grad_hook`` keeps
    their ``grad_fn``) makes a reference cycle through autograd's C++ nodes that Python's
    collector cannot break, and every tensor those nodes save (the recomputed activations,
    autocast's casts, the checkpointed blocks' inputs) stays alive into the optimizer step."""
    return torch._C._current_graph_task_id() != -1


LOSSES = ("fp32", "logits", "fused", "megatron")


class _FusedCrossEntropy(torch.autograd.Function):
    """A fused cross-entropy kernel's memory and traffic (flash-attn's ``CrossEntropyLoss``): the
    forward reads the logits once and keeps them and a log-sum-exp per row; the backward writes the
    logits' gradient (softmax minus the one-hot target) in one pass into a new tensor of their dtype.
    Traced as a max over each row and a softmax: the same bytes read, written and kept."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(logits)
        return logits.amax(-1).float().sum()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (logits,) = ctx.saved_tensors
        return torch.softmax(logits, -1)


class _MegatronCrossEntropy(torch.autograd.Function):
    """Megatron-core's vocabulary-parallel cross entropy (megatron/core/tensor_parallel/cross_entropy.py,
    ``_VocabParallelCrossEntropy``): the forward casts the logits to fp32 and turns that one copy, in
    place, into the softmax (max subtracted, ``torch.exp(..., out=)``, ``div_`` by the sum), which it
    keeps; the backward subtracts the one-hot target and scales by the incoming gradient in that
    buffer, in place, and autograd casts it to the logits' dtype. No log-softmax and no second fp32
    gradient, as torch's ``cross_entropy`` on fp32 logits makes."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        soft = logits.float()
        peak = soft.amax(-1, keepdim=True)
        soft.sub_(peak)
        torch.exp(soft, out=soft)
        total = soft.sum(-1, keepdim=True)
        soft.div_(total)
        ctx.save_for_backward(soft)
        ctx.low = logits.dtype
        return (total.log() + peak).sum()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (soft,) = ctx.saved_tensors
        soft.mul_(grad)
        return soft.to(ctx.low)


def cross_entropy_of(logits: torch.Tensor, loss: str = "fp32") -> torch.Tensor:
    """A language model's loss as its training loops take it: cross entropy over the last
    dimension at every position. ``fp32``: on the logits cast to fp32 first (transformers'
    ``ForCausalLMLoss``, torchtitan's ``cross_entropy_loss``: ``logits.float()``; a no-op on fp32
    logits); the fp32 copy, the log-softmax it saves and the gradients of both are the step's
    largest tensors at a large vocabulary. ``logits``: the same in the logits' own dtype.
    ``fused``: one kernel (:class:`_FusedCrossEntropy`). ``megatron``: Megatron-core's, the fp32 copy
    made the softmax and then the gradient in place (:class:`_MegatronCrossEntropy`). The targets are
    zeros: which class does not matter."""
    if loss == "fused":
        return _FusedCrossEntropy.apply(logits.flatten(0, -2))
    if loss == "megatron":
        return _MegatronCrossEntropy.apply(logits.flatten(0, -2))
    flat = (logits.float() if loss == "fp32" else logits).flatten(0, -2)
    target = torch.zeros(flat.shape[0], dtype=torch.long, device=flat.device)
    return torch.nn.functional.cross_entropy(flat, target)


def loss_of(output: Any, loss: str = "fp32") -> torch.Tensor:
    """The scalar a step calls backward on: a model output's ``logits`` (a Hugging Face output's)
    by :func:`cross_entropy_of` as ``loss`` says; otherwise the sum of the first floating output
    that needs a gradient."""
    logits = None if isinstance(output, torch.Tensor) else getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor) and logits.is_floating_point() and logits.requires_grad and logits.dim() >= 2:
        return cross_entropy_of(logits, loss)
    for t in tensors_in(output):
        if t.is_floating_point() and t.requires_grad:
            return t.sum()
    raise FootprintError(
        "backward was asked for, but the model returned no floating-point tensor that requires "
        "a gradient (are all parameters frozen?)"
    )


@dataclass
class StepOptions:
    """What a training step adds to a forward and backward."""

    optimizer: OptimizerFactory | None = None
    autocast: torch.dtype | None = None  # mixed precision: the forward under torch.autocast
    # gradients kept from the previous step (zero_grad(set_to_none=False)): they exist before
    # the forward and the backward accumulates into them
    grads_kept: bool = False
    # attention calls a CUDA target runs fused (flash or memory-efficient attention, as sdp_utils
    # picks) where the CPU runs the math path (dropout while training): given a call's record
    # (trace.kernels.CpuKernels), whether to trace it through the fused kernel; None: the CPU's choice
    fuse_attention: Callable[[dict[str, Any]], bool] | None = None
    # the step runs on a CUDA GPU: under autocast, a module that asks torch.is_autocast_enabled()
    # without a device (CUDA's state: nn.MultiheadAttention's and nn.TransformerEncoderLayer's
    # fast-path checks) hears what it would there and takes the path it takes there
    cuda: bool = False
    # a language model's cross entropy: "fp32", "logits" (their own dtype) or "fused" (cross_entropy_of)
    loss: str = "fp32"


class StepHooks:
    """What the caller of :func:`run_step` hears: the phase being entered, and the step's
    outputs, gradients and optimizer as they appear. The default hears nothing."""

    def phase(self, name: str) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def forward_done(self, output: Any) -> None:
        pass

    def backward_done(self) -> None:
        pass

    def optimizer_done(self, optimizer: torch.optim.Optimizer) -> None:
        pass


_SILENT = StepHooks()


@contextlib.contextmanager
def _with_cuda_state(amp: contextlib.AbstractContextManager[Any], dtype: torch.dtype) -> Iterator[None]:
    """``amp``, with CUDA's autocast flag and dtype set as a CUDA run's would be. The flag alone:
    tensors off CUDA never reach CUDA's autocast kernels, so only code that reads it changes
    (CUDA's own fp32 list, layer norm and softmax among it, is not followed: the trace's casts
    are CPU autocast's)."""
    was = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", dtype)
    try:
        with amp:
            yield
    finally:
        torch.set_autocast_enabled("cuda", was[0])
        torch.set_autocast_dtype("cuda", was[1])


def run_step(model: nn.Module | Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *, backward: bool,
             optimizer: torch.optim.Optimizer | None = None, autocast: torch.dtype | None = None,
             device_type: str = "cpu", grads_kept: bool = False, loss: str = "fp32",
             no_grad: Callable[[], contextlib.AbstractContextManager[Any]] = torch.no_grad,
             hooks: StepHooks = _SILENT, cuda_autocast: bool = False) -> Any:
    """One step; returns the output of an inference, None after a training step.

    Inference: the forward under ``no_grad()`` (``torch.no_grad``, or ``torch.inference_mode``
    for a timed run) and autocast. Training: the gradients of the previous step dropped
    (``zero_grad(set_to_none=True)``, unless ``grads_kept``), the forward under autocast,
    backward from :func:`loss_of` with the outputs released first, then ``optimizer.step()``.
    ``cuda_autocast``: CUDA's autocast state is set with ``device_type``'s (see StepOptions.cuda)."""
    amp: contextlib.AbstractContextManager[Any] = (
        torch.autocast(device_type=device_type, dtype=autocast) if autocast is not None else contextlib.nullcontext())
    if autocast is not None and cuda_autocast and device_type != "cuda":
        amp = _with_cuda_state(amp, autocast)
    if not backward:
        with no_grad(), hooks.phase("forward"), amp:
            out = model(*args, **kwargs)
        hooks.forward_done(out)
        return out
    if optimizer is not None and not grads_kept and any(
            p.grad is not None for g in optimizer.param_groups for p in g["params"]):
        optimizer.zero_grad(set_to_none=True)
    with hooks.phase("forward"), amp:
        out = model(*args, **kwargs)
    hooks.forward_done(out)
    with hooks.phase("loss"):
        scalar = loss_of(out, loss)
    # a training loop keeps the loss, not the outputs, into the backward (torchtitan deletes its
    # logits there; transformers' Trainer returns the loss alone): what the loss's backward
    # needs it has saved
    del out
    with hooks.phase("backward"):
        scalar.backward()
    del scalar
    hooks.backward_done()
    if optimizer is not None:
        with hooks.phase("optimizer"):
            optimizer.step()
        hooks.optimizer_done(optimizer)
    return None
