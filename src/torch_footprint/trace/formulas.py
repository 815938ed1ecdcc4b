"""FLOP formulas: one registry keyed by aten operator, read like a table.

Each formula is a short pure function ``fn(func, args, kwargs, out) -> Cost``, registered
once against its aten op packets with :func:`register` (a second registration of the same
op is refused at import, as ``torch.utils.flop_counter`` refuses one). Parameterised
factories (``pointwise(k)``, ``reduction(k)``, ``interpolation(...)``) build the formulas of
a family instead of functions that branch on the op's name. The dispatch mode that records
the trace knows no operator: it asks :func:`formula_for`.

Lookup: an op's packet in the registry; else its family, from the op's own metadata (a view
or an op of an ignored namespace: no kernel; ``_foreach_X``: X's cost per element; tagged
pointwise: 1 FLOP per output element); else ``unknown`` (listed by name, never zero).

Conventions (see the README's "Conventions" section):

* 1 FLOP = one floating-point add or multiply; 1 MAC = one multiply-accumulate = 2 FLOPs.
* ``matrix`` ops (matmul, convolution, attention) report MACs and FLOPs = 2 x MACs.
  Matmul and convolution formulas are ``torch.utils.flop_counter``'s own; a bias added by
  ``addmm``/``convolution`` is counted as vector FLOPs (1 per output element).
* Attention counts only the (query, key) pairs that the mask lets through when it is
  causal: sum over queries of the keys visible to each (top-left aligned, as torch does).
* ``vector`` ops: pointwise ops cost 1 FLOP per output element unless listed in
  ``PER_ELEMENT`` (compound ops such as addcmul = 2). Reductions cost 1 FLOP per input
  element (var/std 3). Softmax 5 per element (max, subtract, exp, sum, divide), its
  backward 3. Norms: 4 per element to normalise and apply the affine transform (2 without
  weight and bias), plus 3 per element when the statistics are computed (mean 1, variance
  2); their backward is counted as twice the forward.
* ``data`` ops move bytes without arithmetic (copies, concatenation, gathers, creation).
* ``view`` ops change metadata only: no kernel, no bytes.
* Anything else is ``unknown``: FLOPs are not counted and the op is listed by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import flop_registry as _torch_flop_registry

aten = torch.ops.aten


class Cost(NamedTuple):
    flops: int
    macs: int
    kind: str
    # a matrix op's problem, for kernel-time models: ("gemm", batch, m, n, k),
    # ("conv", n, c_in, c_out, spatial_out, kernel, groups, pass, window, stride, dilation) (window:
    # the kernel's sizes, "3x3", prefixed "t" when transposed; stride and dilation: the largest) or
    # ("attn", batch_heads, l_q, l_k, e, e_v, causal, backward)
    problem: tuple[Any, ...] = ()


Formula = Callable[..., Cost]
_REGISTRY: dict[tuple[str, str], Formula] = {}

DATA = Cost(0, 0, "data")
VIEW = Cost(0, 0, "view")
UNKNOWN = Cost(0, 0, "unknown")


def _key(op: Any) -> tuple[str, str]:
    """An operator's key in the registry: (namespace, name), from a name (an aten op), a pair
    or an op packet."""
    if isinstance(op, str):
        return ("aten", op)
    if isinstance(op, tuple):
        return op
    qualified = getattr(op, "_qualified_op_name", None)  # None: a higher-order op (flex attention)
    namespace, name = qualified.split("::") if qualified else ("higher_order", op.name())
    return (namespace, name)


def register(*ops: Any) -> Callable[[Formula], Formula]:
    """Register ``fn(func, args, kwargs, out) -> Cost`` for the given operators: aten names,
    (namespace, name) pairs or op packets. Names are not resolved against this torch build (that
    costs a tenth of a second at import): a name torch lacks is never looked up.

    An op registered twice is a mistake in this table: refused at import."""

    def deco(fn: Formula) -> Formula:
        for op in ops:
            key = _key(op)
            if key in _REGISTRY:
                raise ValueError(f"a FLOP formula for {key[0]}::{key[1]} is registered twice")
            _REGISTRY[key] = fn
        return fn

    return deco


def _with_inplace(*names: str) -> list[str]:
    """Each op and its in-place variant (``relu`` and ``relu_``)."""
    return [v for n in names for v in (n, n + "_")]


def named_args(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Map positional and keyword arguments to the names in the op's schema."""
    out: dict[str, Any] = {}
    schema_args = func._schema.arguments
    for a, v in zip(schema_args, args):
        out[a.name] = v
    for a in schema_args[len(args):]:
        if a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out


def _numel(x: Any) -> int:
    return x.numel() if isinstance(x, torch.Tensor) else 0


def _first_tensor(x: Any) -> torch.Tensor | None:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (list, tuple)):
        for y in x:
            t = _first_tensor(y)
            if t is not None:
                return t
    return None


def _out_numel(out: Any) -> int:
    t = _first_tensor(out)
    return t.numel() if t is not None else 0


def _vector(flops: int) -> Cost:
    return Cost(int(flops), 0, "vector")


def constant(cost: Cost) -> Formula:
    """The same cost whatever the arguments (data movement, views)."""
    return lambda func, args, kwargs, out: cost


def pointwise(k: int) -> Formula:
    """k FLOPs per output element."""
    return lambda func, args, kwargs, out: _vector(k * _out_numel(out))


def reduction(k: int) -> Formula:
    """k FLOPs per element of the first input."""
    return lambda func, args, kwargs, out: _vector(k * _numel(args[0]))


# --------------------------------------------------------------------------- casts
# Ops that make a converted copy of a tensor. The recorder tags such copies of parameters
# (autocast's cached low-precision weights), which sharded training keeps per unit.
CASTS = frozenset({"_to_copy"})


def is_cast(func: Any) -> bool:
    return func.namespace == "aten" and func._overloadpacket.__name__ in CASTS


# --------------------------------------------------------------------------- attention

def causal_pairs(lq: int, lk: int) -> int:
    """(query, key) pairs visible under a top-left aligned causal mask (torch's is_causal)."""
    full = min(lq, lk)
    # queries 0..full-1 see i+1 keys; queries beyond lk see all lk keys
    return full * (full + 1) // 2 + max(0, lq - lk) * lk


# (visible pairs, all pairs) of the causal attention call whose matmuls are running on the
# math path (set by trace/kernels.py around such a call, forward and backward)
_CAUSAL: list[tuple[int, int]] = []


@contextmanager
def causal_scope(visible: int, total: int) -> Iterator[None]:
    """Within: batched matmuls belong to a causal attention and count its visible pairs only."""
    enter_causal_scope(visible, total)
    try:
        yield
    finally:
        leave_causal_scope()


def enter_causal_scope(visible: int, total: int) -> None:
    """The scope of :func:`causal_scope` for code that cannot use a ``with`` block (a
    backward hook opens it, another closes it with :func:`leave_causal_scope`)."""
    _CAUSAL.append((visible, total))


def leave_causal_scope() -> None:
    if _CAUSAL:
        _CAUSAL.pop()


def _attention_dims(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int, int]:
    *batch, lq, e = q.shape
    lk = k.shape[-2]
    ev = v.shape[-1]
    return math.prod(batch), lq, lk, e, ev


def attention_cost(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool,
                   backward: bool = False) -> Cost:
    """Scores Q K^T and weighted sum P V over the visible pairs.

    Forward: MACs = pairs x (E + Ev); vector FLOPs 5 per score (scale + softmax).
    Backward: dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: MACs = pairs x 2(E + Ev),
    vector FLOPs 4 per score (softmax backward and scale).
    """
    bh, lq, lk, e, ev = _attention_dims(q, k, v)
    pairs = bh * (causal_pairs(lq, lk) if is_causal else lq * lk)
    problem = ("attn", bh, lq, lk, e, ev, bool(is_causal), bool(backward))
    if backward:
        macs = pairs * 2 * (e + ev)
        return Cost(2 * macs + 4 * pairs, macs, "matrix", problem)
    macs = pairs * (e + ev)
    return Cost(2 * macs + 5 * pairs, macs, "matrix", problem)


def _sdpa(backward: bool, offset: int) -> Formula:
    """Fused attention kernels: torch's formulas count every pair, ours only the visible
    ones of a causal call, hence these override torch's registrations."""

    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        a = named_args(func, args, kwargs)
        q, k, v = args[offset], args[offset + 1], args[offset + 2]
        return attention_cost(q, k, v, bool(a.get("is_causal", False)), backward)

    return formula


register("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
         "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
         "_flash_attention_forward", "_efficient_attention_forward",
         "_scaled_dot_product_fused_attention_overrideable")(_sdpa(False, 0))
register("_scaled_dot_product_flash_attention_for_cpu_backward",
         "_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward",
         "_scaled_dot_product_cudnn_attention_backward", "_flash_attention_backward",
         "_efficient_attention_backward",
         "_scaled_dot_product_fused_attention_overrideable_backward")(_sdpa(True, 1))


@register("_native_multi_head_attention")
def _native_mha(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """nn.MultiheadAttention's fused inference path: in-projection, attention, out-projection."""
    a = named_args(func, args, kwargs)
    q, k = a["query"], a["key"]
    e, heads = int(a["embed_dim"]), int(a["num_head"])
    # query is (B, Lq, E) or (Lq, E)
    lq = q.shape[-2]
    lk = k.shape[-2]
    b = math.prod(q.shape[:-2])
    d = e // heads
    proj_macs = b * (lq * e * e + 2 * lk * e * e) + b * lq * e * e
    attn_pairs = b * heads * lq * lk
    attn_macs = attn_pairs * 2 * d
    bias_flops = b * (lq * e + 2 * lk * e) + b * lq * e if a.get("qkv_bias") is not None else 0
    macs = proj_macs + attn_macs
    return Cost(2 * macs + 5 * attn_pairs + bias_flops, macs, "matrix")


# --------------------------------------------------------------------------- matmul and convolution
# torch.utils.flop_counter's formulas (FLOPs = 2 x MACs), with the bias add counted as
# vector FLOPs; every other op torch's registry prices is registered at the end of this file.

def _shapes(x: Any) -> Any:
    """``x`` with every tensor replaced by its shape, lists, tuples and dicts walked (what
    torch's ``shape_wrapper`` hands its formulas, without a pytree walk per call)."""
    if isinstance(x, torch.Tensor):
        return x.shape
    if type(x) in (list, tuple):
        return type(x)(_shapes(v) for v in x)
    if type(x) is dict:
        return {k: _shapes(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, dict)):  # a named tuple or another container: torch's own walk
        return tree_map(lambda v: v.shape if isinstance(v, torch.Tensor) else v, x)
    return x


def _torch_flops(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    f = _torch_flop_registry[func._overloadpacket]
    raw = getattr(f, "__wrapped__", None)  # the formula torch's shape_wrapper wraps
    if raw is None:
        return int(f(*args, **kwargs, out_val=out))
    return int(raw(*(_shapes(a) for a in args), out_shape=_shapes(out), **{k: _shapes(v) for k, v in kwargs.items()}))


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if isinstance(x, torch.Tensor) else ()


def matrix_problem(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The problem a matmul or convolution kernel solves (see :class:`Cost`), from its operands."""
    name = func._overloadpacket.__name__
    a = named_args(func, args, kwargs)
    if name in ("mm", "addmm", "bmm", "baddbmm"):
        x, y = (args[0], args[1]) if name in ("mm", "bmm") else (a.get("mat1", a.get("batch1")),
                                                                    a.get("mat2", a.get("batch2")))
        sx, sy = _shape(x), _shape(y)
        if len(sx) < 2 or len(sy) < 2:
            return ()
        return ("gemm", math.prod(sx[:-2]), sx[-2], sy[-1], sx[-1])
    if "convolution" in name or name == "_slow_conv2d_forward":
        backward = name == "convolution_backward"
        x, w = (args[1], args[2]) if backward else (args[0], args[1])
        sx, sw = _shape(x), _shape(w)
        if len(sx) < 3 or len(sw) < 3:
            return ()
        groups = int(a.get("groups", 1) or 1)
        transposed = bool(a.get("transposed", False))
        c_out = sw[1] * groups if transposed else sw[0]
        spatial_out = math.prod(_shape(args[0])[2:]) if backward else 0
        mask = tuple(bool(m) for m in a.get("output_mask", ())) if backward else ()
        return ("conv", sx[0], sx[1], c_out, spatial_out, math.prod(sw[2:]), groups,
                "backward" + "".join("dw"[i] for i, m in enumerate(mask[:2]) if m) if backward else "forward",
                ("t" if transposed else "") + "x".join(str(int(d)) for d in sw[2:]),
                max((int(v) for v in a.get("stride") or ()), default=1),
                max((int(v) for v in a.get("dilation") or ()), default=1))
    return ()


def torch_matrix(bias: str | None = None) -> Formula:
    """torch's formula; plus 1 vector FLOP per output element when argument ``bias`` is a tensor."""

    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        macs = _torch_flops(func, args, kwargs, out) // 2
        extra = 0
        if bias is not None and isinstance(named_args(func, args, kwargs).get(bias), torch.Tensor):
            extra = _out_numel(out)
        problem = matrix_problem(func, args, kwargs)
        if problem and problem[0] == "conv" and not problem[4]:  # the forward's output positions
            first = _first_tensor(out)
            problem = (*problem[:4], math.prod(first.shape[2:]) if first is not None else 0, *problem[5:])
        return Cost(2 * macs + extra, macs, "matrix", problem)

    return formula


register("addmm", "baddbmm")(torch_matrix("self"))
register("convolution", "_convolution", "convolution_overrideable", "_slow_conv2d_forward")(
    torch_matrix("bias"))


@register("convolution_backward")
def _conv_backward(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """torch's formula for the input and weight gradients, but for a grouped convolution's
    weight gradient, which torch's counts as if the convolution were not grouped (every input
    channel against every output channel: ``groups`` times too many; a depthwise convolution's
    weight gradient came out hundreds of times too large). Each weight element sums its
    products over the batch's output positions: C_out x C_in / groups x kernel x N x positions
    MACs, as many as the forward's. The bias gradient (``output_mask[2]``) is a reduction over
    grad_output: 1 FLOP per element."""
    macs = _torch_flops(func, args, kwargs, out) // 2
    a = named_args(func, args, kwargs)
    mask = a.get("output_mask")
    groups = int(a.get("groups", 1) or 1)
    if groups > 1 and mask is not None and mask[1] and not a.get("transposed", False):
        grad_out, x, w = args[0], args[1], args[2]
        n, c_out, positions = grad_out.shape[0], grad_out.shape[1], math.prod(grad_out.shape[2:])
        counted = math.prod(w.shape[2:]) * positions * x.shape[1] * c_out * n  # torch's, ungrouped
        macs += counted // groups - counted
    extra = _numel(args[0]) if mask is not None and len(mask) > 2 and mask[2] else 0
    return Cost(2 * macs + extra, macs, "matrix", matrix_problem(func, args, kwargs))


@register("bmm")
def _bmm(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """torch's formula, except inside a causal attention on the math path (two bmm and a
    softmax over a full score matrix): there only the visible pairs count, so causal
    attention is counted alike whichever kernel runs it."""
    macs = _torch_flops(func, args, kwargs, out) // 2
    if _CAUSAL:
        visible, total = _CAUSAL[-1]
        macs = macs * visible // total
    return Cost(2 * macs, macs, "matrix", matrix_problem(func, args, kwargs))


@register("_grouped_mm", "_scaled_grouped_mm", "_scaled_grouped_mm_v2")
def _grouped_mm(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Mixture-of-experts matmuls, each group of rows against its own matrix.

    (T, K) x (G, K, N) with offsets over T: every row meets one K x N matrix: T x K x N.
    (K, T) x (T, N) with offsets over T (the weight gradient): K x T x N in all.
    (G, M, K) x (G, K, N): G x M x K x N. Each is the output's elements times the reduction
    length, with the reduction split among the groups in the second case."""
    a, b = args[0], args[1]
    both_2d = a.dim() == 2 and b.dim() == 2
    macs = a.shape[0] * a.shape[1] * b.shape[1] if both_2d else _out_numel(out) * a.shape[-1]
    return Cost(2 * macs, macs, "matrix")


# --------------------------------------------------------------------------- recurrent
# GRU and plain RNN run as mm/addmm plus pointwise ops on CPU; LSTM runs as one fused
# kernel per layer and direction (mkldnn on CPU, cuDNN on CUDA). For the fused kernels
# every 2-D weight is applied once per time step and batch row: MACs = T x B x sum(numel).
# Vector FLOPs per step and row: 2 bias adds per gate unit (with biases), 1 nonlinearity
# per gate unit, and the cell update c = f*c + i*g, h = o*tanh(c) (5 per hidden unit).

_RNN_GATES = {0: 1, 1: 1, 2: 4, 3: 3}  # cuDNN mode numbers: RNN_RELU, RNN_TANH, LSTM, GRU


def _rnn_cost(steps_rows: int, weights: Sequence[Any], hidden: int, mode: int, biases: bool,
              backward: bool) -> Cost:
    macs = steps_rows * sum(w.numel() for w in weights if isinstance(w, torch.Tensor) and w.dim() == 2)
    g = _RNN_GATES.get(int(mode), 4)
    vec = steps_rows * hidden * (g * (3 if biases else 1) + (5 if g == 4 else 0))
    if backward:
        macs *= 2
        vec *= 2
    return Cost(2 * macs + vec, macs, "matrix")


def _steps_rows(x: torch.Tensor, batch_sizes: Any) -> int:
    # packed input is (sum of batch sizes, I); padded input is (T, B, I) or (B, T, I)
    return x.shape[0] if x.dim() == 2 else x.shape[0] * x.shape[1]


@register("mkldnn_rnn_layer")
def _mkldnn_rnn(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    a = named_args(func, args, kwargs)
    return _rnn_cost(_steps_rows(a["input"], a["batch_sizes"]), [a["weight0"], a["weight1"]],
                     int(a["hidden_size"]), int(a["mode"]), bool(a["has_biases"]), False)


@register("mkldnn_rnn_layer_backward")
def _mkldnn_rnn_bwd(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    a = named_args(func, args, kwargs)
    return _rnn_cost(_steps_rows(a["input"], a["batch_sizes"]), [a["weight1"], a["weight2"]],
                     int(a["hidden_size"]), int(a["mode"]), bool(a["has_biases"]), True)


@register("_cudnn_rnn", "miopen_rnn")
def _cudnn_rnn(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    a = named_args(func, args, kwargs)
    weights = a["weight"]
    return _rnn_cost(_steps_rows(a["input"], a.get("batch_sizes")), weights, int(a["hidden_size"]),
                     int(a["mode"]), any(w.dim() == 1 for w in weights), False)


# --------------------------------------------------------------------------- pointwise
# Every op tagged pointwise costs 1 FLOP per output element (its family, in formula_for).
# These cost otherwise, or are not tagged pointwise; each with its in-place variant.
PER_ELEMENT: dict[str, int] = {
    "addcmul": 2, "addcdiv": 2, "lerp": 2, "hardswish": 3, "hardsigmoid": 2, "silu": 2, "softplus": 3,
    "elu": 3, "hardswish_backward": 3, "softplus_backward": 3, "elu_backward": 3,
    "hardtanh": 1, "hardtanh_backward": 1, "leaky_relu_backward": 1, "relu": 1, "gelu": 1,
    "native_dropout": 1, "native_dropout_backward": 1, "bernoulli": 1,
    "floor_divide": 1, "remainder": 1, "fmod": 1,  # integer arithmetic is not tagged pointwise
}
for _name, _k in PER_ELEMENT.items():
    register(*_with_inplace(_name))(pointwise(_k))


# --------------------------------------------------------------------------- reductions

register("sum", "mean", "amax", "amin", "max", "min", "prod", "argmax", "argmin", "histc", "bincount",
         "logsumexp", "cumsum", "any", "all", "nansum", "linalg_vector_norm", "norm", "aminmax", "cumprod",
         "count_nonzero")(reduction(1))
# mean, then squared deviations summed
register("var", "std", "var_mean", "std_mean")(reduction(3))
# max, subtract, exp, sum, divide
register("_softmax", "_log_softmax", "softmax", "_safe_softmax")(reduction(5))
# grad * y, row sum, subtract and multiply
register("_softmax_backward_data", "_log_softmax_backward_data")(reduction(3))


@register("linalg_vector_norm_backward")
def _norm_vec_bwd(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    return _vector(3 * _out_numel(out))


# --------------------------------------------------------------------------- normalisation

def _norm_cost(numel: int, affine: bool, stats: bool) -> int:
    return numel * ((4 if affine else 2) + (3 if stats else 0))


def normalisation(stats: bool | None) -> Formula:
    """Normalise and apply the affine transform; ``stats``: whether the statistics are
    computed (None: as the op's ``training`` argument says)."""

    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        a = named_args(func, args, kwargs)
        computed = bool(a.get("training", True)) if stats is None else stats
        return _vector(_norm_cost(_numel(args[0]), a.get("weight") is not None, computed))

    return formula


register("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
         "cudnn_batch_norm", "miopen_batch_norm", "_batch_norm_with_update",
         "_batch_norm_with_update_functional")(normalisation(None))
register("_native_batch_norm_legit_no_training", "_batch_norm_no_update")(normalisation(False))
register("native_layer_norm", "native_group_norm")(normalisation(True))


@register("_fused_rms_norm", ("footprint", "_fused_rms_norm"))
def _rms_norm(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Mean of squares (2), rsqrt and scale (1), times the weight (1) when there is one."""
    affine = named_args(func, args, kwargs).get("weight") is not None
    return _vector(_numel(args[0]) * (3 + (1 if affine else 0)))


@register("native_batch_norm_backward", "native_layer_norm_backward", "native_group_norm_backward",
          "cudnn_batch_norm_backward", "miopen_batch_norm_backward", "batch_norm_backward",
          "_fused_rms_norm_backward", ("footprint", "_fused_rms_norm_backward"))
def _norm_backward(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Twice the forward's training cost (two reductions and the elementwise chain);
    grad_out is args[0], the input args[1]."""
    return _vector(2 * _norm_cost(_numel(args[1]), True, True))


# --------------------------------------------------------------------------- pooling and resampling

def _window(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> int:
    k = named_args(func, args, kwargs).get("kernel_size")
    if k is None:
        return 1
    return math.prod(k) if isinstance(k, (list, tuple)) else int(k)


@register("max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices",
          "avg_pool1d", "avg_pool2d", "avg_pool3d")
def _pool(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """One compare (max) or add (average) per window element per output element."""
    return _vector(_window(func, args, kwargs) * _out_numel(out))


@register("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward",
          "avg_pool2d_backward", "avg_pool3d_backward")
def _pool_backward(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Scatter-add of each output gradient into its window: 1 per window element."""
    return _vector(_window(func, args, kwargs) * _numel(args[0]))


# every input element added (or compared) once
register("_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool2d", "adaptive_max_pool3d",
         "adaptive_avg_pool1d")(reduction(1))


@register("_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward", "adaptive_max_pool2d_backward",
          "adaptive_max_pool3d_backward")
def _adaptive_pool_backward(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Every gradient element written once."""
    return _vector(max(_numel(args[0]), _out_numel(out)))


def interpolation(dims: int, cubic: bool = False, backward: bool = False) -> Formula:
    """Linear interpolation: 2 FLOPs per lerp, 2^dims - 1 lerps per output element (bicubic
    4x that); the backward per element of the incoming gradient."""
    per = 2 * (2**dims - 1) * (4 if cubic else 1)
    if backward:
        return lambda func, args, kwargs, out: _vector(per * _numel(args[0]))
    return pointwise(per)


register("upsample_linear1d")(interpolation(1))
register("upsample_bilinear2d", "_upsample_bilinear2d_aa")(interpolation(2))
register("upsample_trilinear3d")(interpolation(3))
register("upsample_bicubic2d")(interpolation(2, cubic=True))
register("upsample_bilinear2d_backward")(interpolation(2, backward=True))
register("upsample_bicubic2d_backward")(interpolation(2, cubic=True, backward=True))


def grid_sample(three_d: bool) -> Formula:
    """Per output element: bilinear (trilinear) interpolation as lerps (6, or 14 in 3-D),
    nearest 0, bicubic 4x bilinear; plus 4 (6) per sampling point to unnormalise the grid."""

    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        a = named_args(func, args, kwargs)
        mode = int(a.get("interpolation_mode", 0))
        per = (14 if three_d else 6) * (0, 1, 0, 4)[mode + 1] if mode in (0, 1, 2) else 6
        grid = a.get("grid")
        points = grid.numel() // grid.shape[-1] if isinstance(grid, torch.Tensor) else 0
        return _vector(per * _out_numel(out) + (6 if three_d else 4) * points)

    return formula


register("grid_sampler_2d", "_grid_sampler_2d_cpu_fallback")(grid_sample(False))
register("grid_sampler_3d")(grid_sample(True))


# --------------------------------------------------------------------------- losses and scatter-accumulate

# a difference or a pick, then the reduction: 2 FLOPs per input element
register("nll_loss_forward", "nll_loss2d_forward", "nll_loss_backward", "nll_loss2d_backward", "mse_loss",
         "mse_loss_backward", "l1_loss", "smooth_l1_loss", "binary_cross_entropy",
         "binary_cross_entropy_with_logits", "huber_loss")(reduction(2))
# one add per gradient (or bag) element
register("embedding_dense_backward", "_embedding_bag", "embedding_bag", "_embedding_bag_backward",
         "_embedding_bag_dense_backward")(reduction(1))


@register("index_add", "index_add_", "scatter_add", "scatter_add_", "scatter_reduce")
def _scatter_add(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """One add per source element."""
    a = named_args(func, args, kwargs)
    return _vector(_numel(a.get("source", a.get("src"))))


@register("index_put", "index_put_", "_index_put_impl_")
def _index_put(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """One add per value when accumulating; otherwise a copy."""
    a = named_args(func, args, kwargs)
    return _vector(_numel(a.get("values"))) if a.get("accumulate") else DATA


# --------------------------------------------------------------------------- seen on real architectures
# gated linear unit: a * sigmoid(b), per output element; its backward per incoming gradient element
register("glu")(pointwise(2))
register("glu_backward")(reduction(4))
# weight norm w = g * v / ||v||: squares and sum (2), divide and scale (2) per element of v; backward twice
register("_weight_norm_interface")(reduction(4))
register("_weight_norm_interface_backward")(reduction(8))
# PReLU: a compare and a multiply per element, forward and backward
register("_prelu_kernel")(pointwise(2))
register("_prelu_kernel_backward")(reduction(2))
# running maximum or minimum: one compare per element; sampling: a running sum of the weights
register("cummax", "cummin", "_cummax_helper", "_cummin_helper", "_is_all_true", "_is_any_true",
         "multinomial")(reduction(1))
# polar form to complex: a cosine, a sine and two multiplies per element
register("polar")(pointwise(4))
# membership tests and searches: comparisons that select, no arithmetic on the values
register("isin")(constant(DATA))


def triangular_solve(triangle: int, rhs: int) -> Formula:
    """Forward or back substitution: row i of an n x n triangle (argument ``triangle``) takes
    i + 1 multiply-adds per right-hand side: n(n + 1)/2 MACs per column of B (argument
    ``rhs``), per batch."""

    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        a_mat, b_mat = args[triangle], args[rhs]
        n = a_mat.shape[-1]
        macs = n * (n + 1) // 2 * (b_mat.numel() // max(1, b_mat.shape[-2]))
        return Cost(2 * macs, macs, "matrix")

    return formula


register("linalg_solve_triangular")(triangular_solve(0, 1))
register("triangular_solve")(triangular_solve(1, 0))  # triangular_solve(B, A)


def fft(scale: float) -> Formula:
    """A fast Fourier transform: ``scale`` x N log2 N FLOPs per transform of N points over the
    transformed dimensions (5 for complex-to-complex, the usual count; 2.5 with a real side)."""

    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        x = args[0]
        dims = named_args(func, args, kwargs).get("dim") or range(x.dim())
        n = math.prod(x.shape[d] for d in dims) if x.dim() else 1
        big = max(n, _out_numel(out) // max(1, x.numel() // max(n, 1)))  # c2r: the output's length
        transforms = x.numel() // max(n, 1)
        return _vector(round(scale * big * math.log2(big) * transforms) if big > 1 else 0)

    return formula


register("_fft_c2c")(fft(5.0))
register("_fft_r2c", "_fft_c2r")(fft(2.5))


# log(1 + exp(-x)) with the sign trick: exp, add, log per element; its backward likewise
register("log_sigmoid_forward")(pointwise(3))
register("log_sigmoid_backward")(reduction(3))


@register("_euclidean_dist")
def _euclidean_dist(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Distances between rows of x1 (P x M) and x2 (R x M) through a matmul: P x R x M MACs,
    plus the squared norms (2 per element of each input) and 3 per distance (add, add, sqrt)."""
    x1, x2 = args[0], args[1]
    macs = _out_numel(out) * x1.shape[-1]
    return Cost(2 * macs + 2 * (x1.numel() + x2.numel()) + 3 * _out_numel(out), macs, "matrix")


@register("_cdist_forward")
def _cdist(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """p-norm distances computed pairwise: a difference, a power and an add per coordinate of
    each pair (3 FLOPs), then the root per distance."""
    return _vector(3 * _out_numel(out) * args[0].shape[-1] + _out_numel(out))


# --------------------------------------------------------------------------- the rest of the operator set
# Every aten operator that can reach a dispatch mode (not decomposed above it) was gone
# through; what no family rule prices is here.

def matmul_like(bias: str | None = None) -> Formula:
    """A product whose output element is a dot product over the first input's last
    dimension: out elements x K MACs (mv, dot, integer and packed-weight matmuls), plus the
    bias add when argument ``bias`` is a tensor."""

    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        macs = max(1, _out_numel(out)) * args[0].shape[-1] if args[0].dim() else 0
        extra = _out_numel(out) if bias and isinstance(named_args(func, args, kwargs).get(bias), torch.Tensor) else 0
        return Cost(2 * macs + extra, macs, "matrix")

    return formula


register("mv", "dot", "vdot", "_int_mm", "_weight_int8pack_mm", "_weight_int4pack_mm",
         "_weight_int4pack_mm_for_cpu", "_weight_int4pack_mm_with_scales_and_zeros", "_dyn_quant_matmul_4bit",
         "_scaled_mm_v2")(matmul_like())
register("addmv", "addmv_")(matmul_like("self"))


@register("_addmm_activation")
def _addmm_activation(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """addmm (bias add included) followed by ReLU or GELU: 1 more FLOP per output element."""
    macs = args[1].shape[0] * args[1].shape[1] * args[2].shape[1]
    return Cost(2 * macs + 2 * _out_numel(out), macs, "matrix")


@register("addbmm", "addbmm_")
def _addbmm(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """A batch of (n x m)(m x p) products summed into one n x p: b x n x m x p MACs, plus the
    sum over the batch and the add of ``self`` (b per output element)."""
    b1, b2 = args[1], args[2]
    macs = b1.shape[0] * b1.shape[1] * b1.shape[2] * b2.shape[2]
    return Cost(2 * macs + b1.shape[0] * _out_numel(out), macs, "matrix")


@register("addr", "addr_")
def _addr(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Outer product added to ``self``: one multiply-add per output element."""
    n = _out_numel(out)
    return Cost(2 * n, n, "matrix")


@register("_transformer_encoder_layer_fwd")
def _encoder_layer(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """nn.TransformerEncoderLayer's fused inference path on (B, T, E): the projections and the
    feed-forward (every weight once per token), attention over T x T pairs per head;
    vector work: bias adds, two layer norms (7 per element), softmax (5 per score), the
    activation and two residual adds."""
    a = named_args(func, args, kwargs)
    x = a["src"]
    e, heads = int(a["embed_dim"]), int(a["num_heads"])
    t = x.shape[-2]
    tokens = x.numel() // e
    weights = sum(_numel(a[k]) for k in ("qkv_weight", "proj_weight", "ffn_weight_1", "ffn_weight_2"))
    biases = sum(_numel(a[k]) for k in ("qkv_bias", "proj_bias", "ffn_bias_1", "ffn_bias_2"))
    pairs = (tokens // t) * heads * t * t
    macs = tokens * weights + pairs * 2 * (e // heads)
    ffn = _numel(a["ffn_bias_1"]) or e
    vector = tokens * (biases + 2 * 7 * e + ffn + 2 * e) + 5 * pairs
    return Cost(2 * macs + vector, macs, "matrix")


# fused optimizer steps over lists of parameters, per element: Adam 13 FLOPs (two moment
# updates 3 + 4, the denominator 3, the update 3), AdamW 2 more for the decoupled decay
def fused_optimizer(per_element: int) -> Formula:
    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        return _vector(per_element * sum(_numel(t) for t in args[0]))

    return formula


register("_fused_adam", "_fused_adam_")(fused_optimizer(13))
register("_fused_adamw", "_fused_adamw_")(fused_optimizer(15))
register("_fused_sgd", "_fused_sgd_")(fused_optimizer(2))
# a finiteness check and a multiply per gradient element
register("_amp_foreach_non_finite_check_and_unscale_")(fused_optimizer(2))
register("_add_relu", "_add_relu_")(pointwise(2))
register("hardsigmoid_backward")(pointwise(2))
register("__irshift__", "__ilshift__")(pointwise(1))
register("_fused_moving_avg_obs_fq_helper")(reduction(4))  # min, max, then scale and round each element
register("linear")(matmul_like("bias"))


@register("linear_backward")
def _linear_backward(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """The input's and the weight's gradients: two products of tokens x N x K, and the bias's
    gradient, a sum over tokens (as asked by ``output_mask``)."""
    x, grad = args[0], args[1]
    mask = named_args(func, args, kwargs).get("output_mask") or (True, True, True)
    k, n = x.shape[-1], grad.shape[-1]
    tokens = x.numel() // max(1, k)
    macs = tokens * n * k * (int(bool(mask[0])) + int(bool(mask[1])))
    return Cost(2 * macs + (grad.numel() if len(mask) > 2 and mask[2] else 0), macs, "matrix")


def semi_structured(arg: int, dim: int) -> Formula:
    """2:4 sparse matmuls, counted as the dense product they stand for (as the dense peak
    figures of the hardware database are): output elements x the dense reduction length,
    ``args[arg].shape[dim]``."""

    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        macs = _out_numel(out) * args[arg].shape[dim]
        return Cost(2 * macs, macs, "matrix")

    return formula


register("_sparse_semi_structured_mm")(semi_structured(2, 0))
register("_sparse_semi_structured_addmm")(semi_structured(3, 0))
register("_sparse_semi_structured_linear")(semi_structured(0, -1))
register("_masked_scale")(pointwise(1))
# gates already multiplied: 4 bias adds, 4 nonlinearities and 5 for the cell, per hidden unit
register("_thnn_fused_lstm_cell")(lambda func, args, kwargs, out: _vector(13 * _numel(args[2])))
register("_thnn_fused_lstm_cell_backward_impl")(lambda func, args, kwargs, out: _vector(26 * _numel(args[2])))
register("linalg_cross")(pointwise(3))  # a x b - c x d per component
register("hann_window")(pointwise(3))  # a cosine, a multiply and a subtract per point
register("logspace")(pointwise(2))
register("quantize_per_tensor")(pointwise(3))  # scale, round, clamp
register("trace")(lambda func, args, kwargs, out: _vector(min(args[0].shape[-2:])))
# each output point: a 2 x 3 (3 x 4) affine matrix times its coordinates, 6 (12) FLOPs per coordinate
register("affine_grid_generator")(pointwise(6))
# selections over a dimension: a compare per element
register("kthvalue", "median", "nanmedian", "mode", "segment_reduce", "_segment_reduce_backward",
         "index_reduce", "index_reduce_", "_embedding_bag_forward_only",
         "_embedding_bag_per_sample_weights_backward")(reduction(1))
register("logcumsumexp", "dist", "renorm", "renorm_")(reduction(3))  # exp/sub, add/pow, log/scale
# losses and their backwards: a difference and a reduction per element (as the forward losses)
register("binary_cross_entropy_backward", "huber_loss_backward", "smooth_l1_loss_backward",
         "soft_margin_loss", "soft_margin_loss_backward", "multi_margin_loss",
         "multilabel_margin_loss_forward", "rrelu_with_noise_backward")(reduction(2))
# padding backwards: the gradient of each padded element added back once
register("reflection_pad1d_backward", "reflection_pad3d_backward", "replication_pad1d_backward",
         "replication_pad2d_backward", "replication_pad3d_backward")(reduction(1))
register("_upsample_bicubic2d_aa")(interpolation(2, cubic=True))
register("_upsample_lanczos2d_aa")(interpolation(2, cubic=True))
register("_upsample_bilinear2d_aa_backward")(interpolation(2, backward=True))
register("_upsample_lanczos2d_aa_backward")(interpolation(2, cubic=True, backward=True))
register("fractional_max_pool2d")(reduction(1))


def grid_sample_backward(three_d: bool) -> Formula:
    """Twice the forward: the input's and the grid's gradients."""
    forward = grid_sample(three_d)

    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        return _vector(2 * forward(func, args[1:], kwargs, args[0]).flops)

    return formula


register("grid_sampler_2d_backward", "_grid_sampler_2d_cpu_fallback_backward")(grid_sample_backward(False))
register("grid_sampler_3d_backward")(grid_sample_backward(True))


@register("_pdist_forward")
def _pdist(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """N(N-1)/2 pairs of M coordinates: a difference, a power and an add each, a root per pair."""
    n, m = args[0].shape[-2], args[0].shape[-1]
    return _vector((3 * m + 1) * n * (n - 1) // 2)


@register("_pdist_backward", "_cdist_backward")
def _dist_backward(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Every pair's gradient spread over its coordinates: 3 FLOPs per (pair, coordinate),
    over the output gradient's distances times the coordinates."""
    return _vector(3 * _numel(args[0]) * args[1].shape[-1])


# Dense linear algebra, the standard LAPACK counts for an n x n matrix (m x n where it
# differs), per matrix of the batch, as vector FLOPs (no MACs: not the matmul figure other
# tools report): Cholesky n^3/3; LU 2n^3/3; inverse 2n^3; QR 2mn^2 - 2n^3/3 (plus the same
# to form Q); symmetric eigenvalues 4n^3/3, with vectors 9n^3; general eigenvalues 10n^3,
# with vectors 25n^3; SVD 4mn^2 + 8n^3 with vectors, 4mn^2 - 4n^3/3 without; determinant as
# LU; a solve LU plus 2n^2 per right-hand side; a triangular or Cholesky solve 2n^2 per
# right-hand side.

def lapack(count: Callable[[int, int], float], rhs: int | None = None) -> Formula:
    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        a = args[0]
        m, n = a.shape[-2], a.shape[-1]
        batch = a.numel() // max(1, m * n)
        total = count(m, n)
        if rhs is not None and len(args) > rhs and isinstance(args[rhs], torch.Tensor):
            b = args[rhs]
            total += 2 * n * n * (b.shape[-1] if b.dim() > 1 else 1)
        return _vector(round(batch * total))

    return formula


register("linalg_cholesky_ex", "cholesky")(lapack(lambda m, n: n**3 / 3))
register("linalg_lu_factor_ex", "linalg_lu", "_linalg_det", "_linalg_slogdet", "linalg_ldl_factor_ex")(
    lapack(lambda m, n: 2 * n**3 / 3))
register("linalg_inv_ex", "cholesky_inverse")(lapack(lambda m, n: 2 * n**3))
register("linalg_qr", "linalg_householder_product", "ormqr")(
    lapack(lambda m, n: 2 * (2 * m * n * n - 2 * n**3 / 3)))
register("_linalg_eigh")(lapack(lambda m, n: 9 * n**3))
register("_linalg_eigvals", "linalg_eigvals")(lapack(lambda m, n: 10 * n**3))
register("linalg_eig")(lapack(lambda m, n: 25 * n**3))
register("_linalg_svd")(lapack(lambda m, n: 4 * m * n * n + 8 * min(m, n) ** 3))
register("_linalg_solve_ex")(lapack(lambda m, n: 2 * n**3 / 3, rhs=1))
register("linalg_lu_solve", "linalg_ldl_solve", "cholesky_solve", "_cholesky_solve_helper")(
    lapack(lambda m, n: 0.0, rhs=1))
register("linalg_matrix_exp")(lapack(lambda m, n: 8 * 2 * n**3))  # a degree-13 Pade: 6 products and a solve

# moving, packing, selecting or describing bytes, without arithmetic
register(
    "block_diag", "diag_embed", "rot90", "tril_indices", "triu_indices", "empty_permuted", "_chunk_cat",
    "_reshape_copy", "unsafe_split_with_sizes", "nonzero_static", "unique_consecutive", "unique_dim", "_unique",
    "lift", "resize", "resize_as", "_resize_output", "_resize_output_", "shallow_copy_data_",
    "_nested_tensor_from_tensor_list", "_pack_padded_sequence", "_jagged_to_padded_dense_forward",
    "_padded_dense_to_jagged_forward", "_sparse_coo_tensor_with_dims_and_tensors", "_spdiags", "to_mkldnn",
    "max_unpool2d", "max_unpool3d", "_upsample_nearest_exact1d", "_upsample_nearest_exact3d",
    "_upsample_nearest_exact2d_backward", "masked_scatter_backward", "complex", "lu_unpack",
    "_convert_weight_to_int4pack", "_convert_weight_to_int4pack_for_cpu", "_dyn_quant_pack_4bit_weight",
    "_philox_key_fold_in", "_philox_key_split", "_philox_normal_", "_philox_uniform_", "_make_dep_token",
    "_functional_sym_constrain_range", "_functional_sym_constrain_range_for_size",
)(constant(DATA))
register("is_coalesced", "is_pinned", "is_same_size", "dense_dim", "sparse_dim")(constant(VIEW))


# --------------------------------------------------------------------------- other kernels of the same work
# Convolutions, pools, norms and softmaxes that other backends (MKL-DNN, cuDNN, MIOpen, MPS,
# the slow reference kernels) or quantized and sparse layouts run under their own names.

def convolution(transposed: bool) -> Formula:
    """Every output element of a convolution takes C_in/groups x kernel MACs, i.e. the
    weight's elements per output channel; a transposed one scatters every input element
    over the weight's elements per input channel. A bias adds 1 per output element."""

    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        x, w = args[0], args[1]
        per = w.numel() // max(1, w.shape[0])
        macs = (x.numel() if transposed else _out_numel(out)) * per
        bias = named_args(func, args, kwargs).get("bias")
        return Cost(2 * macs + (_out_numel(out) if isinstance(bias, torch.Tensor) else 0), macs, "matrix")

    return formula


register("slow_conv3d_forward", "slow_conv_dilated2d", "slow_conv_dilated3d", "conv_depthwise3d",
         "mkldnn_convolution", "_nnpack_spatial_convolution", "miopen_convolution",
         "miopen_depthwise_convolution", "cudnn_convolution_relu", "cudnn_convolution_add_relu",
         "_mps_convolution")(convolution(False))
register("slow_conv_transpose2d", "slow_conv_transpose3d", "miopen_convolution_transpose",
         "cudnn_convolution_transpose", "_mps_convolution_transpose")(convolution(True))


@register("conv_tbc")
def _conv_tbc(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Time-batch-channel convolution, weight (kernel, C_in, C_out): kernel x C_in MACs per output element."""
    w = args[1]
    macs = _out_numel(out) * w.shape[0] * w.shape[1]
    return Cost(2 * macs + _out_numel(out), macs, "matrix")


@register("convolution_backward_overrideable", "_slow_conv2d_backward", "mps_convolution_backward",
          "mps_convolution_transpose_backward")
def _conv_backward_other(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """The input's and the weight's gradients: each the forward's MACs (grad_output elements x
    the weight's elements per output channel)."""
    w = args[2]
    macs = 2 * _numel(args[0]) * (w.numel() // max(1, w.shape[0]))
    return Cost(2 * macs, macs, "matrix")


register("mkldnn_linear")(matmul_like("bias"))
register("mkldnn_linear_backward")(_linear_backward)


@register("mkldnn_linear_backward_input")
def _mkldnn_linear_grad_input(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """A linear layer's input gradient, grad_output (args[1]) times the weight: each input
    gradient element reduces over the N outputs."""
    macs = _out_numel(out) * args[1].shape[-1]
    return Cost(2 * macs, macs, "matrix")


@register("mkldnn_linear_backward_weights")
def _mkldnn_linear_grad_weight(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """A linear layer's weight gradient, grad_output (args[0]) transposed times the input:
    each of the N x K weight gradients reduces over the tokens; the bias gradient sums them."""
    grad = args[0]
    tokens = grad.numel() // max(1, grad.shape[-1])
    macs = _out_numel(out) * tokens
    return Cost(2 * macs + (grad.numel() if args[3] else 0), macs, "matrix")


@register("matmul_backward")
def _matmul_backward(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Both gradients of a matmul: each grad elements x the reduction length."""
    grad, a = args[0], args[1]
    macs = 2 * grad.numel() * a.shape[-1]
    return Cost(2 * macs, macs, "matrix")


@register("_trilinear")
def _trilinear(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """nn.Bilinear's product: i1 x i2 x i3 over their broadcast shape, summed over sumdim:
    one MAC per element of that shape (two multiplies and an add counted as 2 + 1 FLOPs)."""
    i1, i2, i3, e1, e2, e3 = args[:6]
    full: list[int] = []
    for t, expand in ((i1, e1), (i2, e2), (i3, e3)):
        shape = list(t.shape)
        for d in sorted(expand):
            shape.insert(d, 1)
        full = [max(a, b) for a, b in zip(full, shape)] if full else shape
    macs = math.prod(full)
    return Cost(3 * macs, macs, "matrix")


@register("_compute_linear_combination")
def _linear_combination(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """out[i] = sum_j coefficients[i, j] input[j]: output elements x the number of inputs."""
    macs = _out_numel(out) * args[1].shape[-1]
    return Cost(2 * macs, macs, "matrix")


register("adaptive_avg_pool2d", "adaptive_avg_pool3d", "mkldnn_adaptive_avg_pool2d_backward",
         "adaptive_avg_pool3d_backward", "fractional_max_pool3d", "fractional_max_pool2d_backward",
         "fractional_max_pool3d_backward")(reduction(1))
register("mkldnn_max_pool2d", "mkldnn_max_pool3d", "quantized_max_pool1d", "quantized_max_pool2d",
         "quantized_max_pool3d")(_pool)
register("max_pool2d_backward", "mkldnn_max_pool2d_backward", "mkldnn_max_pool3d_backward")(_pool_backward)
register("upsample_linear1d_backward")(interpolation(1, backward=True))
register("upsample_trilinear3d_backward")(interpolation(3, backward=True))
register("_upsample_bicubic2d_aa_backward")(interpolation(2, cubic=True, backward=True))
# nearest-neighbour backward: each gradient element added once into its source
register("upsample_nearest1d_backward", "upsample_nearest3d_backward", "_upsample_nearest_exact1d_backward",
         "_upsample_nearest_exact3d_backward")(reduction(1))
register("cudnn_grid_sampler")(grid_sample(False))
register("cudnn_grid_sampler_backward")(grid_sample_backward(False))
register("cudnn_affine_grid_generator", "cudnn_affine_grid_generator_backward")(pointwise(6))
register("log_softmax", "_masked_softmax", "_sparse_softmax", "_sparse_log_softmax")(reduction(5))
register("_masked_softmax_backward", "_sparse_softmax_backward_data",
         "_sparse_log_softmax_backward_data")(reduction(3))
# batch-norm statistics kernels (SyncBatchNorm's pieces): mean and variance 3 per element,
# gathering per-device statistics 1, the backward's reductions 3 and its elementwise part 3
register("batch_norm_stats", "batch_norm_update_stats", "batch_norm_backward_reduce",
         "batch_norm_backward_elemt", "embedding_renorm", "embedding_renorm_")(reduction(3))
register("batch_norm_gather_stats", "batch_norm_gather_stats_with_counts", "native_norm", "_aminmax",
         "histogram", "_histogramdd_from_bin_cts", "_histogramdd_from_bin_tensors", "_histogramdd_bin_edges",
         "hash_tensor", "_logcumsumexp")(reduction(1))
register("allclose")(reduction(3))  # difference, tolerance, compare
register("quantized_batch_norm")(normalisation(False))
register("multi_margin_loss_backward", "multilabel_margin_loss_backward")(reduction(2))
register("hardshrink_backward", "softshrink_backward")(pointwise(1))
register("glu_jvp")(pointwise(4))
register("glu_backward_jvp")(pointwise(6))
register("_transform_bias_rescale_qkv")(pointwise(2))  # a bias add and a scale
register("bartlett_window", "blackman_window", "hamming_window", "kaiser_window")(pointwise(3))
register("dequantize", "quantize_per_channel", "fake_quantize_per_channel_affine_cachemask",
         "fake_quantize_per_tensor_affine_cachemask",
         "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
         "_fake_quantize_learnable_per_channel_affine",
         "_fake_quantize_learnable_per_tensor_affine")(pointwise(3))  # scale, round, clamp
register("_fake_quantize_learnable_per_channel_affine_backward",
         "_fake_quantize_learnable_per_tensor_affine_backward", "quantize_per_tensor_dynamic",
         "_fused_moving_avg_obs_fq_helper_functional")(reduction(4))
register("_fused_adagrad", "_fused_adagrad_")(fused_optimizer(5))  # sum of squares, root, divide, update
register("_amp_foreach_non_finite_check_and_unscale")(fused_optimizer(2))
register("_amp_update_scale", "_amp_update_scale_")(pointwise(1))
# special functions' gradients (digamma-like series): about 10 FLOPs per element, an estimate
register("_dirichlet_grad", "_standard_gamma_grad")(pointwise(10))
# a GRU cell on gates already multiplied: 3 gates of bias adds and nonlinearities, the update 5
register("_thnn_fused_gru_cell")(lambda func, args, kwargs, out: _vector(14 * _numel(args[2])))
register("_thnn_fused_gru_cell_backward")(lambda func, args, kwargs, out: _vector(28 * _numel(args[0])))


def ctc(first: int) -> Formula:
    """The CTC forward (or backward) recursion: for every time step, batch row and state of
    the extended target (2S + 1), a log-sum-exp of up to three terms, about 5 FLOPs; the
    log-probabilities and targets start at argument ``first``."""

    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        log_probs, targets = args[first], args[first + 1]
        t, n = log_probs.shape[0], log_probs.shape[1] if log_probs.dim() > 2 else 1
        s = targets.shape[-1] if targets.dim() > 1 else max(1, targets.numel() // max(1, n))
        return _vector(5 * t * n * (2 * s + 1))

    return formula


register("_ctc_loss", "_cudnn_ctc_loss", "miopen_ctc_loss")(ctc(0))
register("_ctc_loss_backward")(ctc(1))


register("geqrf")(lapack(lambda m, n: 2 * m * n * n - 2 * n**3 / 3))
register("linalg_lstsq")(lapack(lambda m, n: 2 * m * n * n - 2 * n**3 / 3, rhs=1))
register("linalg_pinv")(lapack(lambda m, n: 4 * m * n * n + 8 * min(m, n) ** 3 + m * n * min(m, n)))

# moving, packing, converting or describing bytes, without arithmetic
register(
    "_stack", "_lazy_clone", "_coalesce", "_coalesced", "_coalesced_", "_to_sparse", "_to_sparse_bsc",
    "_to_sparse_bsr", "_to_sparse_csc", "_to_sparse_csr", "sparse_coo_tensor", "sparse_compressed_tensor",
    "_sparse_coo_tensor_with_dims", "_sparse_compressed_tensor_with_dims", "sparse_resize", "sparse_resize_",
    "sparse_resize_and_clear", "sparse_resize_and_clear_", "copy_sparse_to_sparse", "copy_sparse_to_sparse_",
    "resize_as_sparse", "resize_as_sparse_", "sparse_mask", "_sparse_mask_projection",
    "_convert_indices_from_coo_to_csr", "_convert_indices_from_csr_to_coo", "int_repr", "q_per_channel_scales",
    "q_per_channel_zero_points", "_make_per_channel_quantized_tensor", "_make_per_tensor_quantized_tensor",
    "_empty_affine_quantized", "_empty_per_channel_affine_quantized", "empty_quantized", "put", "put_", "set",
    "from_file", "to_padded_tensor", "_nested_from_padded", "_nested_from_padded_and_nested_example",
    "_nested_tensor_from_mask", "_nested_tensor_from_mask_left_aligned", "_mkldnn_reshape", "_mkldnn_transpose",
    "_mkldnn_transpose_", "mkldnn_reorder_conv2d_weight", "mkldnn_reorder_conv3d_weight",
    "_cudnn_rnn_flatten_weight", "_new_zeros_with_same_feature_meta", "unique_dim_consecutive", "fft_fftfreq",
    "fft_rfftfreq", "range", "_philox_normal", "_philox_uniform",
)(constant(DATA))
register(
    "is_set_to", "_has_same_storage_numel", "_validate_compressed_sparse_indices", "_functional_assert_scalar",
    "_linalg_check_errors", "_nested_tensor_size", "_nested_tensor_storage_offsets", "_nested_tensor_strides",
    "_nested_compute_contiguous_strides_offsets",
    # views that autograd does not track: the result shares the input's storage, no kernel runs
    "_unsafe_view", "_reshape_alias",
)(constant(VIEW))


# --------------------------------------------------------------------------- data movement
# Ops that move, select or create bytes without arithmetic.
register(
    # copies and conversions
    "clone", "copy", "copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "contiguous", "lift_fresh_copy",
    "alias_copy", "_pin_memory", "_to_dense", "view_copy", "unfold_copy", "slice_copy", "narrow_copy",
    "permute_copy", "transpose_copy", "t_copy", "expand_copy", "squeeze_copy", "unsqueeze_copy", "detach_copy",
    "split_with_sizes_copy", "unbind_copy", "split_copy", "unsafe_split", "unsafe_chunk", "tensor_split",
    # joining, gathering, scattering, selecting
    "cat", "stack", "index", "_unsafe_index", "index_select", "gather", "scatter", "scatter_", "embedding", "take",
    "masked_select", "masked_scatter", "nonzero", "where", "masked_fill", "masked_fill_", "_index_put_impl",
    "_unsafe_index_put", "_unsafe_masked_index", "_unsafe_masked_index_put_accumulate", "index_fill",
    "index_fill_", "index_copy", "index_copy_", "slice_scatter", "select_scatter", "diagonal_scatter",
    "as_strided_scatter", "masked_fill_backward", "select_backward", "slice_backward", "diagonal_backward",
    "unfold_backward", "index_select_backward",
    # padding, repetition, reordering
    "constant_pad_nd", "reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d",
    "replication_pad2d", "replication_pad3d", "reflection_pad2d_backward", "repeat", "repeat_interleave", "roll",
    "flip", "tril", "triu", "tril_", "triu_", "sort", "topk", "argsort", "unique", "_unique2", "col2im", "im2col",
    "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle", "upsample_nearest1d",
    "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact2d", "upsample_nearest2d_backward",
    "bucketize", "searchsorted", "one_hot",
    # creation and filling
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "arange", "linspace", "scalar_tensor",
    "fill", "fill_", "zero_", "zero", "rand", "rand_like", "randn", "randn_like", "randint", "randperm", "normal_",
    "uniform_", "random_", "exponential_", "eye", "_efficientzerotensor",
    # metadata, storage and checks
    "set_", "resize_", "resize_as_", "as_strided_", "detach_", "requires_grad_", "_has_compatible_shallow_copy_type",
    "_local_scalar_dense", "item", "_assert_async", "_assert_tensor_metadata", "sym_constrain_range_for_size",
    "_functional_assert_async", "clamp_min_", "logical_and_",
)(constant(DATA))


# --------------------------------------------------------------------------- other namespaces
# Operators that libraries register under their own namespace, looked up by (namespace, name)
# when the op is first seen (the library may be imported after this module).
def register_external(namespace: str, name: str) -> Callable[[Formula], Formula]:
    """Register a formula for ``namespace::name`` (refused twice, as :func:`register`)."""
    return register((namespace, name))


@register_external("torchvision", "nms")
def _nms(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Non-maximum suppression, at most: every pair of N boxes compared once, 12 FLOPs per
    intersection-over-union (4 min/max, 2 differences, 3 products, the union's 2 adds, a
    divide); the sort moves data. Fewer pairs run when boxes are suppressed early."""
    n = args[0].shape[0]
    return _vector(12 * n * (n - 1) // 2)


@register_external("torchvision", "roi_align")
def _roi_align(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Each output element averages sampling_ratio^2 bilinear samples (4 weights applied:
    4 multiplies, 3 adds, plus 3 for the weights, 10 FLOPs) and adds each to the mean. An
    adaptive ratio (-1) depends on the boxes' sizes: counted as 2 x 2 samples."""
    ratio = int(args[5]) if len(args) > 5 else -1
    samples = ratio * ratio if ratio > 0 else 4
    return _vector(11 * samples * _out_numel(out))


# --------------------------------------------------------------------------- families and lookup

_IGNORED_NAMESPACES = ("prim", "profiler")
_FOREACH_DATA = ("copy", "zero", "fill")
_FOREACH_REDUCTIONS = ("norm", "max")


def _foreach(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """torch._foreach_X over a list: the per-element cost of X times the elements."""
    name = func._overloadpacket.__name__.removeprefix("_foreach_").rstrip("_")
    if name in _FOREACH_DATA:
        return DATA
    first = args[0]
    numel = sum(_numel(t) for t in first) if isinstance(first, (list, tuple)) else _numel(first)
    return _vector(numel if name in _FOREACH_REDUCTIONS else PER_ELEMENT.get(name, 1) * numel)


def _family(func: Any) -> Formula:
    """The formula of an op that has none of its own, from what the op says of itself: a view
    (or an in-place change of a view's metadata, or an op of an ignored namespace) costs
    nothing; a copy of a view (``view_copy``) moves bytes; ``_foreach_X`` costs X per element;
    an in-place ``X_`` costs what X does; a pointwise op 1 FLOP per element, a reduction 1 per
    input element; an op that draws random numbers (``nondeterministic_seeded``) moves bytes."""
    name = func._overloadpacket.__name__
    tags = func.tags
    if func.is_view or func.namespace in _IGNORED_NAMESPACES or torch.Tag.inplace_view in tags:
        return constant(VIEW)
    if torch.Tag.view_copy in tags:
        return constant(DATA)
    if name.startswith("_foreach_"):
        return _foreach
    inplace_of = name.endswith("_") and not name.endswith("__")
    if inplace_of and ("aten", name[:-1]) in _REGISTRY:
        return _REGISTRY[("aten", name[:-1])]
    base = getattr(aten, name[:-1], None) if inplace_of else None
    if torch.Tag.pointwise in tags or _pointwise_family(func._overloadpacket) or (
            base is not None and _pointwise_family(base)):
        return pointwise(1)
    if torch.Tag.reduction in tags:
        return reduction(1)
    if torch.Tag.nondeterministic_seeded in tags:
        return constant(DATA)
    return constant(UNKNOWN)


def _pointwise_family(packet: Any) -> bool:
    """Whether any overload of ``packet`` is tagged pointwise (its ``out=`` and scalar forms
    often are not, though they run the same kernel)."""
    if packet not in _POINTWISE_PACKETS:
        _POINTWISE_PACKETS[packet] = any(torch.Tag.pointwise in getattr(packet, o).tags
                                         for o in packet.overloads())
    return _POINTWISE_PACKETS[packet]


_POINTWISE_PACKETS: dict[Any, bool] = {}
_RESOLVED: dict[Any, Formula] = {}


def formula_for(func: Any) -> Formula:
    """The formula that prices ``func`` (an OpOverload), resolved once and cached."""
    fn = _RESOLVED.get(func)
    if fn is None:
        fn = _RESOLVED[func] = _REGISTRY.get((func.namespace, func._overloadpacket.__name__)) or _family(func)
    return fn


# torch.utils.flop_counter's formulas for every op it prices that this table does not:
# the ones above override it for bias adds, causal attention and grouped matmuls.
register(*[p for p in _torch_flop_registry if _key(p) not in _REGISTRY])(torch_matrix())
