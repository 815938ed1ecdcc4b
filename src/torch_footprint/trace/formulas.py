"""FLOP formulas: one registry keyed by aten operator.

Each formula is a short pure function of the operator's arguments and output, registered
against its aten ops with :func:`register`, in the style of ``torch.utils.flop_counter``.
The dispatch mode that records the trace knows nothing of any particular operator: it
calls :func:`cost_of` for every op.

Conventions (see the README's "Conventions" section):

* 1 FLOP = one floating-point add or multiply; 1 MAC = one multiply-accumulate = 2 FLOPs.
* ``matrix`` ops (matmul, convolution, attention) report MACs and FLOPs = 2 x MACs.
  Matmul and convolution formulas come from ``torch.utils.flop_counter``; a bias added by
  ``addmm``/``convolution`` is counted as vector FLOPs (1 per output element).
* Attention counts only the (query, key) pairs that the mask lets through when it is
  causal: sum over queries of the keys visible to each (top-left aligned, as torch does).
* ``vector`` ops: any op tagged pointwise costs 1 FLOP per output element, unless listed
  in ``POINTWISE_COST`` (compound ops such as addcmul = 2). Reductions cost 1 FLOP per
  input element (var/std 3). Softmax 5 per element (max, subtract, exp, sum, divide),
  its backward 3. Norms: 4 per element to normalise and apply the affine transform (2
  without weight and bias), plus 3 per element when the statistics are computed (mean 1,
  variance 2); their backward is counted as twice the forward.
* ``data`` ops move bytes without arithmetic (copies, concatenation, gathers, creation).
* ``view`` ops change metadata only: no kernel, no bytes.
* Anything else is ``unknown``: FLOPs are not counted and the op is listed by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch.utils.flop_counter import flop_registry as _torch_flop_registry

aten = torch.ops.aten


class Cost(NamedTuple):
    flops: int
    macs: int
    kind: str


Formula = Callable[..., Cost]
_REGISTRY: dict[Any, Formula] = {}

ZERO_DATA = Cost(0, 0, "data")
VIEW = Cost(0, 0, "view")


def register(*ops: Any) -> Callable[[Formula], Formula]:
    """Register ``fn(func, args, kwargs, out) -> Cost`` for the given aten op packets."""

    def deco(fn: Formula) -> Formula:
        for op in ops:
            _REGISTRY[op] = fn
        return fn

    return deco


def _opt(name: str) -> Any:
    """An aten packet by name, or None where this torch build lacks it."""
    return getattr(aten, name, None)


def _ops(*names: str) -> list[Any]:
    return [p for p in (_opt(n) for n in names) if p is not None]


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


def _pointwise(k: int) -> Formula:
    """k FLOPs per output element."""
    return lambda func, args, kwargs, out: _vector(k * _out_numel(out))


# --------------------------------------------------------------------------- matrix ops
# Matmul and convolution: torch.utils.flop_counter's formulas (FLOPs = 2 x MACs).

_BIAS_ARG = {"addmm": "self", "baddbmm": "self", "convolution": "bias", "_convolution": "bias",
             "convolution_overrideable": "bias", "cudnn_convolution": None, "_slow_conv2d_forward": "bias"}


def _torch_matrix(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    flops = int(_torch_flop_registry[func._overloadpacket](*args, **kwargs, out_val=out))
    macs = flops // 2
    bias_name = _BIAS_ARG.get(func._overloadpacket.__name__)
    extra = 0
    if bias_name is not None:
        bias = named_args(func, args, kwargs).get(bias_name)
        if isinstance(bias, torch.Tensor):
            extra = _out_numel(out)
    if func._overloadpacket is aten.convolution_backward:
        # grad of bias (output_mask[2]) is a reduction over grad_output
        mask = named_args(func, args, kwargs).get("output_mask")
        if mask is not None and len(mask) > 2 and mask[2]:
            extra = _numel(args[0])
    return Cost(macs * 2 + extra, macs, "matrix")


# --------------------------------------------------------------------------- attention

def causal_pairs(lq: int, lk: int) -> int:
    """(query, key) pairs visible under a top-left aligned causal mask (torch's is_causal)."""
    full = min(lq, lk)
    # queries 0..full-1 see i+1 keys; queries beyond lk see all lk keys
    return full * (full + 1) // 2 + max(0, lq - lk) * lk


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
    if backward:
        macs = pairs * 2 * (e + ev)
        return Cost(2 * macs + 4 * pairs, macs, "matrix")
    macs = pairs * (e + ev)
    return Cost(2 * macs + 5 * pairs, macs, "matrix")


def _sdpa(backward: bool, offset: int) -> Formula:
    def formula(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        a = named_args(func, args, kwargs)
        q, k, v = args[offset], args[offset + 1], args[offset + 2]
        return attention_cost(q, k, v, bool(a.get("is_causal", False)), backward)

    return formula


for _name in ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
              "_flash_attention_forward", "_efficient_attention_forward",
              "_scaled_dot_product_fused_attention_overrideable"):
    register(*_ops(_name))(_sdpa(False, 0))
for _name in ("_scaled_dot_product_flash_attention_for_cpu_backward",
              "_scaled_dot_product_flash_attention_backward",
              "_scaled_dot_product_efficient_attention_backward",
              "_scaled_dot_product_cudnn_attention_backward",
              "_flash_attention_backward", "_efficient_attention_backward",
              "_scaled_dot_product_fused_attention_overrideable_backward"):
    register(*_ops(_name))(_sdpa(True, 1))


@register(*_ops("_native_multi_head_attention"))
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


@register(*_ops("_grouped_mm", "_scaled_grouped_mm"))
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


@register(*_ops("mkldnn_rnn_layer"))
def _mkldnn_rnn(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    a = named_args(func, args, kwargs)
    return _rnn_cost(_steps_rows(a["input"], a["batch_sizes"]), [a["weight0"], a["weight1"]],
                     int(a["hidden_size"]), int(a["mode"]), bool(a["has_biases"]), False)


@register(*_ops("mkldnn_rnn_layer_backward"))
def _mkldnn_rnn_bwd(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    a = named_args(func, args, kwargs)
    return _rnn_cost(_steps_rows(a["input"], a["batch_sizes"]), [a["weight1"], a["weight2"]],
                     int(a["hidden_size"]), int(a["mode"]), bool(a["has_biases"]), True)


@register(*_ops("_cudnn_rnn", "miopen_rnn"))
def _cudnn_rnn(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    a = named_args(func, args, kwargs)
    weights = a["weight"]
    return _rnn_cost(_steps_rows(a["input"], a.get("batch_sizes")), weights, int(a["hidden_size"]),
                     int(a["mode"]), any(w.dim() == 1 for w in weights), False)


# --------------------------------------------------------------------------- vector ops

# Pointwise ops whose cost per output element is not 1.
POINTWISE_COST: dict[str, int] = {
    "addcmul": 2, "addcdiv": 2, "lerp": 2, "hardswish": 3, "hardsigmoid": 2, "silu": 2,
    "hardswish_backward": 3, "hardtanh_backward": 1,
}
for _name in ("floor_divide", "floor_divide_", "remainder", "fmod"):  # integer arithmetic not tagged pointwise
    register(*_ops(_name))(_pointwise(1))
# Pointwise-tagged ops that only move or select data.
POINTWISE_DATA = {"clone", "where", "masked_fill", "_to_copy", "copy", "copy_", "fill", "fill_",
                  "lift_fresh_copy", "zero", "zero_", "masked_fill_", "_conj", "alias_copy"}

for _name, _k in (("hardswish", 3), ("hardswish_", 3), ("hardswish_backward", 3),
                  ("hardtanh_backward", 1), ("native_dropout", 1), ("native_dropout_backward", 1),
                  ("bernoulli", 1), ("bernoulli_", 1), ("softplus", 3), ("softplus_backward", 3),
                  ("elu", 3), ("elu_backward", 3), ("leaky_relu_backward", 1), ("gelu_", 1),
                  ("silu_", 2), ("relu_", 1), ("hardtanh", 1), ("hardtanh_", 1)):
    register(*_ops(_name))(_pointwise(_k))


@register(*_ops("sum", "mean", "amax", "amin", "max", "min", "prod", "argmax", "argmin", "histc", "bincount",
                "logsumexp", "cumsum", "any", "all", "nansum", "linalg_vector_norm", "norm",
                "_log_softmax_backward_data", "aminmax", "cumprod", "count_nonzero"))
def _reduction(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """1 FLOP per input element."""
    name = func._overloadpacket.__name__
    if name == "_log_softmax_backward_data":
        return _vector(3 * _numel(args[0]))
    return _vector(_numel(args[0]))


@register(*_ops("var", "std", "var_mean", "std_mean"))
def _variance(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Mean, then squared deviations summed: 3 FLOPs per input element."""
    return _vector(3 * _numel(args[0]))


@register(*_ops("_softmax", "_log_softmax", "softmax", "_safe_softmax"))
def _softmax(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """max, subtract, exp, sum, divide: 5 FLOPs per element."""
    return _vector(5 * _numel(args[0]))


@register(*_ops("_softmax_backward_data"))
def _softmax_bwd(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """grad * y, row sum, subtract and multiply: 3 FLOPs per element."""
    return _vector(3 * _numel(args[0]))


def _norm_cost(numel: int, affine: bool, stats: bool) -> int:
    return numel * ((4 if affine else 2) + (3 if stats else 0))


@register(*_ops("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                "cudnn_batch_norm", "miopen_batch_norm", "_batch_norm_with_update",
                "_batch_norm_with_update_functional"))
def _batch_norm_train(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    a = named_args(func, args, kwargs)
    x = args[0]
    training = bool(a.get("training", True))
    affine = a.get("weight") is not None
    return _vector(_norm_cost(_numel(x), affine, training))


@register(*_ops("_native_batch_norm_legit_no_training", "_batch_norm_no_update"))
def _batch_norm_eval(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    a = named_args(func, args, kwargs)
    return _vector(_norm_cost(_numel(args[0]), a.get("weight") is not None, False))


@register(*_ops("native_layer_norm", "native_group_norm", "_fused_rms_norm"))
def _layer_norm(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    a = named_args(func, args, kwargs)
    name = func._overloadpacket.__name__
    affine = a.get("weight") is not None
    numel = _numel(args[0])
    if name == "_fused_rms_norm":  # mean of squares (2), rsqrt and scale (1 + 1 with weight)
        return _vector(numel * (3 + (1 if affine else 0)))
    return _vector(_norm_cost(numel, affine, True))


@register(*_ops("native_batch_norm_backward", "native_layer_norm_backward", "native_group_norm_backward",
                "cudnn_batch_norm_backward", "batch_norm_backward", "_fused_rms_norm_backward"))
def _norm_backward(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Twice the forward's training cost (two reductions and the elementwise chain)."""
    # grad_out is args[0], input args[1]
    return _vector(2 * _norm_cost(_numel(args[1]), True, True))


def _window(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> int:
    a = named_args(func, args, kwargs)
    k = a.get("kernel_size")
    if k is None:
        return 1
    return math.prod(k) if isinstance(k, (list, tuple)) else int(k)


@register(*_ops("max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices",
                "avg_pool1d", "avg_pool2d", "avg_pool3d"))
def _pool(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """One compare (max) or add (average) per window element per output element."""
    return _vector(_window(func, args, kwargs) * _out_numel(out))


@register(*_ops("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward",
                "avg_pool2d_backward", "avg_pool3d_backward"))
def _pool_backward(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Scatter-add of each output gradient into its window: 1 per window element."""
    return _vector(_window(func, args, kwargs) * _numel(args[0]))


@register(*_ops("_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool2d",
                "adaptive_max_pool3d", "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward",
                "adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward", "adaptive_avg_pool1d"))
def _adaptive_pool(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Every input element is added (or compared) once; for backward every grad input once."""
    name = func._overloadpacket.__name__
    if name.endswith("backward"):
        return _vector(max(_numel(args[0]), _out_numel(out)))
    return _vector(_numel(args[0]))


@register(*_ops("upsample_bilinear2d", "upsample_linear1d", "upsample_trilinear3d", "upsample_bicubic2d",
                "_upsample_bilinear2d_aa", "upsample_bilinear2d_backward", "upsample_bicubic2d_backward"))
def _interp(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Linear interpolation: 2 FLOPs per lerp, 2^d - 1 lerps per output (bicubic 4x that)."""
    name = func._overloadpacket.__name__
    dims = 1 if "1d" in name else 3 if "3d" in name else 2
    per = 2 * (2**dims - 1) * (4 if "bicubic" in name else 1)
    n = _numel(args[0]) if name.endswith("backward") else _out_numel(out)
    return _vector(per * n)


@register(*_ops("grid_sampler_2d", "grid_sampler_3d", "_grid_sampler_2d_cpu_fallback"))
def _grid_sample(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Per output element: bilinear (trilinear) interpolation as lerps (6, or 14 in 3-D),
    nearest 0, bicubic 4x bilinear; plus 4 (6) per sampling point to unnormalise the grid."""
    a = named_args(func, args, kwargs)
    three_d = "3d" in func._overloadpacket.__name__
    mode = int(a.get("interpolation_mode", 0))
    per = (14 if three_d else 6) * (0, 1, 0, 4)[mode + 1] if mode in (0, 1, 2) else 6
    grid = a.get("grid")
    points = grid.numel() // grid.shape[-1] if isinstance(grid, torch.Tensor) else 0
    return _vector(per * _out_numel(out) + (6 if three_d else 4) * points)


@register(*_ops("nll_loss_forward", "nll_loss2d_forward", "nll_loss_backward", "nll_loss2d_backward",
                "mse_loss", "mse_loss_backward", "l1_loss", "smooth_l1_loss", "binary_cross_entropy",
                "binary_cross_entropy_with_logits", "huber_loss"))
def _loss(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Losses: 2 FLOPs per input element (difference or pick, then reduce)."""
    return _vector(2 * _numel(args[0]))


@register(*_ops("embedding_dense_backward", "index_add", "index_add_", "scatter_add", "scatter_add_",
                "index_put_", "_index_put_impl_", "index_put", "scatter_reduce", "_embedding_bag",
                "embedding_bag", "_embedding_bag_backward", "_embedding_bag_dense_backward"))
def _accumulate(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """Scatter-accumulate: 1 add per source element."""
    name = func._overloadpacket.__name__
    if name.startswith("embedding_dense_backward") or name.startswith("_embedding_bag"):
        return _vector(_numel(args[0]))
    a = named_args(func, args, kwargs)
    if name.startswith("index_put") or name.startswith("_index_put"):
        return _vector(_numel(a.get("values"))) if a.get("accumulate") else ZERO_DATA
    src = a.get("source", a.get("src"))
    return _vector(_numel(src))


@register(*_ops("linalg_vector_norm_backward"))
def _norm_vec_bwd(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    return _vector(3 * _out_numel(out))


# --------------------------------------------------------------------------- data movement

DATA_OPS = (
    "cat", "stack", "clone", "copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "contiguous",
    "index", "_unsafe_index", "index_select", "gather", "scatter", "scatter_", "embedding", "take",
    "masked_select", "masked_scatter", "nonzero", "where", "masked_fill", "masked_fill_",
    "constant_pad_nd", "reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d",
    "replication_pad2d", "replication_pad3d", "reflection_pad2d_backward", "slice_scatter",
    "select_scatter", "diagonal_scatter", "as_strided_scatter", "repeat", "repeat_interleave", "roll",
    "flip", "tril", "triu", "tril_", "triu_", "sort", "topk", "argsort", "unique", "_unique2",
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "arange",
    "linspace", "scalar_tensor", "fill", "fill_", "zero_", "zero", "rand", "rand_like", "randn",
    "randn_like", "randint", "randperm", "normal_", "uniform_", "random_", "exponential_",
    "_local_scalar_dense", "item", "lift_fresh_copy", "upsample_nearest1d", "upsample_nearest2d",
    "upsample_nearest3d", "_upsample_nearest_exact2d", "upsample_nearest2d_backward", "col2im", "im2col",
    "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle", "set_", "resize_",
    "_reshape_alias", "_unsafe_view", "_index_put_impl", "split_with_sizes_copy", "unbind_copy",
    "eye", "tensor_split", "_assert_async", "_assert_tensor_metadata", "sym_constrain_range_for_size",
    "_functional_assert_async", "bucketize", "searchsorted", "one_hot", "detach_", "requires_grad_",
    "_has_compatible_shallow_copy_type", "_pin_memory", "clamp_min_", "_efficientzerotensor",
    "masked_fill_backward", "_to_dense", "view_copy", "unfold_copy", "slice_copy", "logical_and_",
    "select_backward", "slice_backward", "as_strided_", "diagonal_backward", "unfold_backward",
    "index_select_backward", "narrow_copy", "permute_copy", "transpose_copy", "t_copy", "expand_copy",
    "squeeze_copy", "unsqueeze_copy", "alias_copy", "detach_copy", "resize_as_", "_unsafe_index_put",
    "index_fill", "index_fill_", "index_copy", "index_copy_", "new_zeros", "_unsafe_masked_index",
    "_unsafe_masked_index_put_accumulate", "split_copy", "unsafe_split", "unsafe_chunk",
)
for _name in DATA_OPS:
    for _p in _ops(_name):
        _REGISTRY.setdefault(_p, lambda func, args, kwargs, out: ZERO_DATA)


# --------------------------------------------------------------------------- foreach (optimizers)

def _foreach(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """torch._foreach_X over a list: the per-element cost of X times the elements."""
    name = func._overloadpacket.__name__.removeprefix("_foreach_").rstrip("_")
    first = args[0]
    numel = sum(_numel(t) for t in first) if isinstance(first, (list, tuple)) else _numel(first)
    if name in ("copy", "zero", "fill"):
        return ZERO_DATA
    if name in ("norm", "max"):
        return _vector(numel)
    return _vector(POINTWISE_COST.get(name, 1) * numel)


# --------------------------------------------------------------------------- lookup

_IGNORED_NAMESPACES = ("prim", "profiler")



def _unknown(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    return Cost(0, 0, "unknown")


_RESOLVED: dict[Any, Formula] = {}


def formula_for(func: Any) -> Formula:
    """The formula that prices ``func`` (an OpOverload), resolved once and cached."""
    fn = _RESOLVED.get(func)
    if fn is not None:
        return fn
    packet = func._overloadpacket
    name = packet.__name__
    if packet in _REGISTRY:
        fn = _REGISTRY[packet]
    elif packet in _torch_flop_registry:
        fn = _torch_matrix
    elif func.is_view or func.namespace in _IGNORED_NAMESPACES:
        fn = lambda func, args, kwargs, out: VIEW  # noqa: E731
    elif name.startswith("_foreach_"):
        fn = _foreach
    elif torch.Tag.pointwise in func.tags:
        base = name.rstrip("_")
        if name in POINTWISE_DATA or base in POINTWISE_DATA:
            fn = lambda func, args, kwargs, out: ZERO_DATA  # noqa: E731
        else:
            fn = _pointwise(POINTWISE_COST.get(base, 1))
    else:
        fn = _unknown
    _RESOLVED[func] = fn
    return fn


def cost_of(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """The cost of one aten op call (an op it cannot price is ``unknown``, never zero)."""
    return formula_for(func)(func, args, kwargs, out)
