"""Output tensors for hot ops, made without torch's slow paths.

On the meta device, batch norm, layer norm, addmm and the pointwise ops run torch's
Python reference implementations just to produce empty outputs (about 2.5 ms per batch
norm call, half of the time spent tracing a CNN zoo). These functions build the same
empty outputs directly: same shapes, strides and dtypes as torch's own meta kernels,
which a test checks case by case. They are used only when every tensor argument is a
plain meta tensor, and for pointwise ops only in the simple case (one shape, dtype and
layout; no broadcasting or type promotion), where the result is known without checks.

Fake tensors (a trace under autocast, or of a model with recurrent layers) pay instead for
FakeTensorMode's dispatch: about 150 us per operator on this machine, most of it hashing
the arguments for its cache, where the output itself takes 20 us to make. For the same
simple cases, and for the plain views and matrix products that make up most of a
transformer's step, the fake output is made here directly: the same function run on the
fake tensors' meta storage (``in_kernel_invocation_manager``, as FakeTensorMode runs a
meta kernel), wrapped as a fake tensor on the inputs' device (as FakeTensorMode wraps
a fresh meta output). A test checks shapes, strides, storage sharing and devices
against FakeTensorMode's own outputs, and a whole trace against one without this path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import onednn_rnn

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


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)


def _like(x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """``zeros_like`` (and the like) with no other argument than a memory format kept as it is."""
    return _empty_as(x)


def _to_copy(x: torch.Tensor, *, dtype: torch.dtype | None = None, **_: Any) -> torch.Tensor:
    """A cast (autocast's, mostly) on one device: an empty tensor like the input, in the new dtype."""
    return _empty_as(x, dtype)


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
    aten.mm.default: _mm,
    aten.gelu.default: _gelu,
    aten.zeros_like.default: _like,
    aten._to_copy.default: _to_copy,
}

# views the fake path makes itself (on meta tensors torch's own view kernels are fast)
FAKE_VIEWS = frozenset({aten.t.default, aten.view.default, aten._unsafe_view.default, aten.transpose.int,
                        aten.slice.Tensor, aten.expand.default, aten.unsqueeze.default, aten.permute.default,
                        aten.select.int, aten.squeeze.dim})


# pointwise ops whose result is not of their inputs' dtype
_NOT_SAME_DTYPE = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not",
                   "isnan", "isinf", "isfinite", "isposinf", "isneginf", "signbit", "bitwise_not", "angle",
                   "real", "imag", "frexp", "copysign", "polar", "complex", "view_as_real", "_to_copy",
                   "where", "masked_fill", "clone", "copy", "copy_", "bucketize", "_conj"}


def _pointwise_same(func: Any, args: tuple[Any, ...]) -> Callable[..., Any] | None:
    """Pointwise ops on floating tensors of one dtype (all meta or all fake: :func:`fast_meta`
    checks), with Python numbers beside them: of one shape and layout, the result is an empty
    tensor like the first (or the first itself, in place); contiguous ones of shapes that
    broadcast, a contiguous result of the broadcast shape. Anything else (type promotion,
    mixed layouts under broadcasting) goes to torch."""
    if torch.Tag.pointwise not in func.tags or func._overloadname == "out":
        return None
    name = func._overloadpacket.__name__
    if name.rstrip("_") in _NOT_SAME_DTYPE or name in _NOT_SAME_DTYPE:
        return None
    first: torch.Tensor | None = None
    shapes: list[torch.Size] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if first is None:
                if not a.is_floating_point():
                    return None
                first = a
            elif a.dtype != first.dtype or (a.shape != first.shape or a.stride() != first.stride()) and not (
                    a.is_contiguous() and first.is_contiguous()):
                return None
            shapes.append(a.shape)
        elif not (a is None or isinstance(a, (bool, int, float, str))):
            return None
    if first is None:
        return None
    if any(s != first.shape for s in shapes):
        # broadcasting contiguous operands: a contiguous result of the broadcast shape
        try:
            shape = torch.broadcast_shapes(*shapes)
        except RuntimeError:
            return None
        if name.endswith("_"):
            return _in_place if shape == first.shape else None
        return lambda *args, **kwargs: torch.empty(shape, dtype=first.dtype, device=first.device)
    if name.endswith("_"):
        return _in_place
    return _like_first


def _in_place(*args: Any, **kwargs: Any) -> torch.Tensor:
    return args[0]


def _empty_as(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``torch.empty_like(x, dtype=dtype)``; a contiguous ``x`` without empty_like's Python
    stride computation on meta tensors."""
    if x.is_contiguous():
        return torch.empty(x.shape, dtype=dtype or x.dtype, device=x.device)
    return torch.empty_like(x, dtype=dtype or x.dtype)


def _like_first(*args: Any, **kwargs: Any) -> torch.Tensor:
    return _empty_as(next(a for a in args if isinstance(a, torch.Tensor)))


# ops whose meta kernel follows another device's rule than the CPU's: the CPU's output for
# meta and fake tensors alike (real tensors run the real kernel)
CPU_RULE: dict[Any, Callable[..., Any]] = {}
if hasattr(aten, "_grouped_mm"):
    CPU_RULE[aten._grouped_mm.default] = _grouped_mm


# oneDNN's LSTM layer: the training workspace at the size the CPU kernel allocates, and the
# backward's second bias gradient a storage of its own (trace/onednn_rnn.py)
CPU_RULE[aten.mkldnn_rnn_layer.default] = onednn_rnn.layer_outputs
CPU_RULE[aten.mkldnn_rnn_layer_backward.default] = onednn_rnn.layer_backward_outputs


def _cpu_rule(func: Any, args: tuple[Any, ...]) -> Callable[..., Any] | None:
    """``CPU_RULE[func]`` when every tensor argument is a meta or a fake CPU tensor."""
    from torch._subclasses.fake_tensor import FakeTensor

    for a in args:
        if isinstance(a, torch.Tensor) and not (
                a.device.type == "meta" or (a.device.type == "cpu" and isinstance(a, FakeTensor))):
            return None
    return CPU_RULE[func]


def _kind(args: tuple[Any, ...]) -> Any:
    """"meta" when every tensor argument is a plain meta tensor; the fake mode when every one
    is a fake tensor of that mode on one device; else None."""
    from torch._subclasses.fake_tensor import FakeTensor

    kind: Any = None
    for a in args:
        if not isinstance(a, torch.Tensor):
            continue
        if isinstance(a, FakeTensor):
            if a.constant is not None:  # a value FakeTensorMode carries along (an optimizer's step count)
                return None
            this: Any = (a.fake_mode, a.fake_device)
        elif type(a) in (torch.Tensor, torch.nn.Parameter) and a.device.type == "meta":
            this = "meta"
        else:
            return None
        if kind is None:
            kind = this
        elif this != kind:
            return None
    return kind


def _on_fake(fn: Callable[..., Any], mode: Any, device: torch.device) -> Callable[..., Any]:
    """``fn`` run on fake tensors' meta storage, its new outputs wrapped as fake tensors on
    ``device`` (what FakeTensorMode does around a meta kernel, without its cache)."""
    from torch._subclasses.fake_tensor import FakeTensor

    def run(*args: Any, **kwargs: Any) -> Any:
        # fake_tensor.in_kernel_invocation_manager's guards, without its generator's cost: no
        # Python dispatch (modes or subclasses), Meta kernels, fake tensors reporting "meta"
        prev = mode.in_kernel_invocation
        with torch._C._DisableTorchDispatch(), torch._C._PreserveDispatchKeyGuard():
            torch._C._set_meta_in_tls_dispatch_include(True)
            mode.in_kernel_invocation = True
            try:
                out = fn(*args, **kwargs)
            finally:
                mode.in_kernel_invocation = prev

        def wrap(t: Any) -> Any:
            if not isinstance(t, torch.Tensor) or isinstance(t, FakeTensor):
                return t
            return FakeTensor(mode, t, device)  # a fresh meta tensor: nothing for the converter's memo

        return tuple(wrap(t) for t in out) if isinstance(out, tuple) else wrap(out)

    return run


def _keeps_format(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``zeros_like(x)`` with nothing but the memory format kept as it is (and no pinning)."""
    return (len(args) == 1 and set(kwargs) <= {"memory_format", "pin_memory"} and not kwargs.get("pin_memory")
            and kwargs.get("memory_format") in (None, torch.preserve_format))


def _a_cast(x: torch.Tensor, kwargs: dict[str, Any]) -> bool:
    """``_to_copy`` of a floating tensor that changes at most its dtype: strided, on its own
    device, memory format kept."""
    return (x.is_floating_point() and set(kwargs) <= {"dtype", "layout", "device", "non_blocking"}
            and kwargs.get("layout") in (None, torch.strided) and kwargs.get("device") in (None, x.device))


def _operands_fit(func: Any, args: tuple[Any, ...]) -> bool:
    """Whether addmm's or mm's matrices fit each other (else a bias that does not broadcast,
    a scalar, a dtype mismatch: torch's kernel says so)."""
    if func is aten.addmm.default:
        return args[1].dim() == 2 and args[2].dim() == 2 and args[1].shape[1] == args[2].shape[0]
    if func is aten.mm.default:
        a, b = args[0], args[1]
        return a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0] and a.dtype == b.dtype
    return True


def fast_meta(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> Callable[..., Any] | None:
    """The fast kernel for ``func`` when its tensors are plain meta tensors, or fake tensors
    of one mode and device (:func:`_on_fake`), else None; the CPU's output rule
    (:data:`CPU_RULE`) for meta and fake CPU tensors."""
    if func in CPU_RULE:
        return _cpu_rule(func, args)
    kind = _kind(args)
    if kind is None:
        return None
    fn = FAST_META.get(func)
    if fn is None:
        if kind != "meta" and func in FAKE_VIEWS:
            fn = func
        else:
            fn = _pointwise_same(func, args)
            if fn is None:
                return None
    elif not _operands_fit(func, args):  # let torch check and raise
        return None
    elif func is aten._to_copy.default and not _a_cast(args[0], kwargs or {}):
        return None  # a move to another device, a layout or memory format of its own: torch's
    elif func is aten.zeros_like.default and not _keeps_format(args, kwargs or {}):
        return None
    return fn if kind == "meta" else _on_fake(fn, *kind)
