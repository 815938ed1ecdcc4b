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

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from . import onednn_rnn
from .cuda_ops import cuda_rms_norm
from .formulas import causal_pairs, causal_scope, enter_causal_scope, leave_causal_scope
from .step import recomputing

_FLASH_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _sdpa_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    out = dict(zip(names, args))
    out.update(kwargs)
    return out


def cpu_flash_eligible(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: dict[str, Any]) -> bool:
    """A close reading of ATen's ``use_flash_attention_cpp`` checks (dense 4-D inputs, equal
    head sizes, a supported dtype, a mask that broadcasts, no dropout while training), on
    the dtypes the kernel sees: under autocast, q, k and v cast to autocast's dtype first."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return False
    dtypes = {t.dtype for t in (q, k, v)}
    if q.device.type != "meta" and torch.is_autocast_enabled(q.device.type) and all(
            t.is_floating_point() for t in (q, k, v)):
        dtypes = {torch.get_autocast_dtype(q.device.type)}
    if len(dtypes) != 1 or dtypes.pop() not in _FLASH_DTYPES:
        return False
    if not (q.shape[-1] == k.shape[-1] == v.shape[-1]):
        return False
    if q.shape[0] != k.shape[0] or k.shape[1] != v.shape[1]:
        return False
    # one key/value head broadcasts over the query heads (multi-query attention) without
    # enable_gqa; other head counts need it
    if q.shape[1] != k.shape[1] and k.shape[1] != 1 and not (a.get("enable_gqa") and q.shape[1] % k.shape[1] == 0):
        return False
    if min(q.shape[-2], k.shape[-2]) == 0:
        return False
    if float(a.get("dropout_p", 0.0) or 0.0) > 0.0 and torch.is_grad_enabled():
        return False
    mask = a.get("attn_mask")
    return not (mask is not None and a.get("is_causal"))


def _count_math_causal(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any], q: torch.Tensor,
                       k: torch.Tensor, v: torch.Tensor) -> Any:
    lq, lk = q.shape[-2], k.shape[-2]
    scope = (causal_pairs(lq, lk), lq * lk)
    with causal_scope(*scope):
        out = original(*args, **kwargs)
    if torch.is_grad_enabled() and not recomputing() and isinstance(out, torch.Tensor) and out.requires_grad:
        ins = [t for t in (q, k, v) if isinstance(t, torch.Tensor) and t.requires_grad]
        if ins:  # the same scope while autograd runs this call's backward
            torch.autograd.graph.register_multi_grad_hook([out], lambda _g: enter_causal_scope(*scope))
            torch.autograd.graph.register_multi_grad_hook(ins, lambda _g: leave_causal_scope())
    return out


class CpuKernels:
    """Route meta-tensor attention to the CPU's flash-attention kernel where the CPU would.

    A context manager that swaps ``torch.nn.functional.scaled_dot_product_attention`` for
    the span of a trace (nn.MultiheadAttention, transformers and timm all call it through
    that name), and puts the original back on exit.

    It also swaps ``torch.nn.functional.linear`` for the one case where ATen's own linear
    allocates differently under a dispatch mode: a bias and an input it cannot flatten
    (not contiguous, not 2-D; an LSTM's batch-first output). ATen runs ``matmul`` and then
    ``output.add_(bias)`` in place, but ``isTensorSubclassLike`` is true whenever a
    dispatch mode is on, so under the trace's mode it takes its composite-compliant
    branch, ``at::add(output, bias)``: a second output as large as the first, alive with
    it. The swap does what the real kernel does (a matmul, then the in-place add).

    It also hands ``host_tensor`` the CPU tensors made outside the dispatcher that the CPU
    allocator records: ``torch.get_rng_state()``'s copy of the generator (5056 bytes), which
    activation checkpointing keeps per checkpointed call until its backward and takes again
    around each recomputation (``torch.random.fork_rng``).

    For a CUDA target (``cuda``) it also swaps ``torch.nn.functional.rms_norm`` (nn.RMSNorm's) for
    the one kernel CUDA runs (:func:`.cuda_ops.cuda_rms_norm`).
    """

    def __init__(self, reroute: bool = True,
                 host_tensor: Callable[[str, torch.Tensor], None] | None = None,
                 fuse: Callable[[dict[str, Any]], bool] | None = None, cuda: bool = False) -> None:
        self.cuda = cuda
        self._saved_rms: Any = None
        self._saved: Any = None
        self._saved_rng: Any = None
        self._saved_linear: Any = None
        self.reroute = reroute  # send meta-tensor calls to the CPU's fused kernel
        # a CUDA target's choice (StepOptions.fuse_attention): calls the CPU runs through the math
        # path only for their dropout, traced through the fused kernel where it says so
        self.fuse = fuse
        self.host_tensor = host_tensor
        # each distinct attention call: what a GPU's kernel choice depends on, the path the CPU
        # took and how often (estimate/kernels/sdpa.py picks CUDA's kernel from these)
        self.attention: list[dict[str, Any]] = []

    def __enter__(self) -> CpuKernels:
        self._saved = F.scaled_dot_product_attention
        original = self._saved
        self._saved_rng = torch.get_rng_state
        if self.host_tensor is not None:
            get_state, note = self._saved_rng, self.host_tensor

            def get_rng_state() -> torch.Tensor:
                state = get_state()
                note("torch.get_rng_state", state)
                return state

            torch.get_rng_state = get_rng_state

        def sdpa(*args: Any, **kwargs: Any) -> Any:
            a = _sdpa_args(args, kwargs)
            q, k, v = a["query"], a["key"], a["value"]
            if not isinstance(q, torch.Tensor):
                return original(*args, **kwargs)
            eligible = cpu_flash_eligible(q, k, v, a)
            if not eligible and self.fuse is not None and self._fused_for_target(q, k, v, a):
                self._note_call(q, k, v, a, "flash")
                return _fused(q, k, v, a)
            self._note_call(q, k, v, a, "flash" if eligible and q.device.type in ("meta", "cpu") else "math")
            if self.reroute and q.device.type == "meta" and eligible:
                # grouped-query attention: the CPU kernel reads each key/value head for its group of
                # query heads as it is (the allocator shows no repeated copy, and its backward's key
                # and value gradients have the key/value heads' size)
                out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    q, k, v, float(a.get("dropout_p", 0.0) or 0.0), bool(a.get("is_causal", False)),
                    attn_mask=a.get("attn_mask"), scale=a.get("scale"),
                )
                return out
            if a.get("is_causal") and a.get("attn_mask") is None and not eligible:
                return _count_math_causal(original, args, kwargs, q, k, v)
            return original(*args, **kwargs)

        F.scaled_dot_product_attention = sdpa
        self._saved_linear = F.linear
        F.linear = _in_place_bias(self._saved_linear)
        self._saved_rms = F.rms_norm
        if self.cuda:
            F.rms_norm = cuda_rms_norm(self._saved_rms)
        return self

    def _fused_for_target(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: dict[str, Any]) -> bool:
        """Whether the CPU takes the math path for this call's dropout alone, or for a value head size
        of its own (multi-head latent attention: DeepSeek's 192 against 128, which cuDNN's and
        FlashAttention-3's kernels take as they are), and the target fuses it."""
        dropout = float(a.get("dropout_p", 0.0) or 0.0) > 0.0 and torch.is_grad_enabled()
        own_value = q.shape[-1] == k.shape[-1] != v.shape[-1] and tuple(k.shape[:-1]) == tuple(v.shape[:-1]) \
            and _not_real(q)
        if not (dropout or own_value) or not cpu_flash_eligible(q, k, k if own_value else v, {**a, "dropout_p": 0.0}):
            return False
        call = _call_record(q, k, v, a, "math")
        return call is not None and self.fuse is not None and self.fuse(call)

    def _note_call(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: dict[str, Any], path: str) -> None:
        call = _call_record(q, k, v, a, path)
        if call is not None:
            self.add_attention([(call, 1)])

    def attention_counts(self) -> list[int]:
        """How many calls each distinct attention call has had so far (for :meth:`attention_since`)."""
        return [seen["calls"] for seen in self.attention]

    def attention_since(self, counts: list[int]) -> list[tuple[dict[str, Any], int]]:
        """The attention calls noted since ``counts`` was taken: (call, how many)."""
        before = counts + [0] * (len(self.attention) - len(counts))  # calls first seen since
        return [({k: v for k, v in seen.items() if k != "calls"}, seen["calls"] - n)
                for seen, n in zip(self.attention, before, strict=True) if seen["calls"] > n]

    def add_attention(self, calls: list[tuple[dict[str, Any], int]]) -> None:
        """Note attention calls (a replayed block's, as its recorded call noted them)."""
        for call, n in calls:
            for seen in self.attention:
                if all(seen[key] == value for key, value in call.items()):
                    seen["calls"] += n
                    break
            else:
                self.attention.append({**call, "calls": n})

    def __exit__(self, *exc: Any) -> None:
        F.scaled_dot_product_attention = self._saved
        torch.get_rng_state = self._saved_rng
        F.linear = self._saved_linear
        F.rms_norm = self._saved_rms


def _call_record(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: dict[str, Any],
                 path: str) -> dict[str, Any] | None:
    """What a GPU's kernel choice depends on for one attention call, and the path the trace took."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return None
    dtype = q.dtype
    if torch.is_autocast_enabled("cpu") and q.is_floating_point():
        dtype = torch.get_autocast_dtype("cpu")
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    return {"dtype": str(dtype).removeprefix("torch."), "head_dim": int(q.shape[-1]),
            "head_dim_k": int(k.shape[-1]), "head_dim_v": int(v.shape[-1]), "q_heads": int(q.shape[1]),
            "kv_heads": int(k.shape[1]), "seq_q": int(q.shape[-2]), "seq_k": int(k.shape[-2]),
            "mask": a.get("attn_mask") is not None, "causal": bool(a.get("is_causal", False)),
            "dropout": float(a.get("dropout_p", 0.0) or 0.0), "grad": grad,
            "enable_gqa": bool(a.get("enable_gqa", False)), "cpu_path": path}


def _not_real(t: torch.Tensor) -> bool:
    """A meta or fake tensor: its kernels are shape functions, defined for every device's operators."""
    from torch._subclasses.fake_tensor import is_fake

    return t.device.type == "meta" or is_fake(t)


def _fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: dict[str, Any]) -> torch.Tensor:
    """The call through the fused kernel (what flash or memory-efficient attention keep: the
    output and its log-sum-exp, no score matrix, no dropout mask: they draw it again from the
    generator's seed and offset), in autocast's dtype where autocast is on."""
    if torch.is_autocast_enabled("cpu") and q.is_floating_point():
        low = torch.get_autocast_dtype("cpu")
        q, k, v = (t.to(low) for t in (q, k, v))
    if v.shape[-1] != q.shape[-1]:  # meta or fake tensors only: a kernel whose output has the value's head size
        out, *_ = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, a.get("attn_mask"), torch.is_grad_enabled(), float(a.get("dropout_p", 0.0) or 0.0),
            bool(a.get("is_causal", False)), scale=a.get("scale"))
        return out
    out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, float(a.get("dropout_p", 0.0) or 0.0), bool(a.get("is_causal", False)),
        attn_mask=a.get("attn_mask"), scale=a.get("scale"))
    return out


def _in_place_bias(original: Any) -> Any:
    """``F.linear`` that adds the bias in place where ATen's linear does outside a dispatch
    mode (see :class:`CpuKernels`): its input neither 2-D (addmm) nor contiguous (flattened
    into addmm). Under autocast the bias is cast as ``linear``'s other arguments are (autocast casts
    them all at ``linear``, which this split does not reach)."""

    def linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if bias is None or input.dim() == 2 or input.is_contiguous():
            return original(input, weight, bias)
        if torch.is_autocast_enabled("cpu") and bias.is_floating_point():
            bias = bias.to(torch.get_autocast_dtype("cpu"))
        return torch.matmul(input, weight.t()).add_(bias)

    return linear


# --------------------------------------------------------------------------- kernel scratch
# Bytes a CPU kernel allocates for itself for the length of the call, seen in the CPU
# allocator's records (the trace cannot see them: they never reach the dispatcher).

def _blas_ready(t: torch.Tensor) -> bool:
    """Whether a BLAS call can read this matrix operand in place (row- or column-major)."""
    if t.dim() < 2 or 0 in t.stride():
        return t.dim() < 2 or t.numel() == 0
    rows, cols = t.shape[-2], t.shape[-1]
    rs, cs = t.stride()[-2], t.stride()[-1]
    return (cs == 1 and rs >= max(cols, 1)) or (rs == 1 and cs >= max(rows, 1))


def _matmul_copies(first: int) -> Any:
    """A matmul copies an operand it cannot hand to BLAS as it is (an expanded gradient, say);
    its operands start at argument ``first`` (1 after addmm's bias)."""

    def scratch(args: tuple[Any, ...]) -> int:
        return sum(t.numel() * t.element_size() for t in args[first:first + 2]
                   if isinstance(t, torch.Tensor) and not _blas_ready(t))

    return scratch


def _depthwise_reorder(args: tuple[Any, ...]) -> int:
    """oneDNN's depthwise convolution reorders its input into a blocked layout."""
    x, w = args[0], args[1]
    groups = args[8] if len(args) > 8 else 1
    transposed = bool(args[6]) if len(args) > 6 else False
    if (isinstance(x, torch.Tensor) and x.dim() == 4 and not transposed and groups > 1
            and groups == x.shape[1] and w.shape[1] == 1):
        return x.numel() * x.element_size()
    return 0


def _conv_backward_scratch(args: tuple[Any, ...]) -> int:
    """A float32 2-D convolution's backward: on ATen's own kernel (small single images), its
    im2col buffer; on oneDNN, a contiguous copy of a strided output gradient
    (``mkldnn_convolution_backward``), the jit kernels' blocked copies
    (:func:`_jit_conv_backward`), and, where the weight gradient goes to oneDNN's gemm-based
    kernel, its scratchpad. On an AVX2 CPU that is a kernel ``jit_avx2``
    refuses, one 14 or more wide (a ViT's 16 x 16 patch embedding); the scratchpad then holds
    a per-thread weight-gradient buffer for the reduction, booked as ``book<float>`` of the
    weights' size in bytes (4 x the weights per thread), and a per-thread im2col buffer of
    C_in x k_h x k_w x output positions floats, each padded by 128 bytes
    (src/cpu/gemm_convolution_utils.cpp in oneDNN 3.12: threads = torch's when
    ``positions / threads < 256`` and the batch is over 1, else one). Elsewhere (AVX-512,
    bfloat16, grouped or transposed convolutions) the kernel's scratch is not modelled."""
    grad, x, w = args[0], args[1], args[2]
    if not (isinstance(grad, torch.Tensor) and isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor)
            and x.dtype == torch.float32 and x.dim() == 4 and len(args) > 10):
        return 0
    transposed, groups, mask = bool(args[7]), int(args[9]), args[10]
    if transposed or groups != 1:
        return 0
    kh, kw = w.shape[2], w.shape[3]
    if not _takes_mkldnn(x, w, args[4], args[6]):
        # ATen's own kernel (_slow_conv2d_backward): one im2col buffer for the call (it runs
        # for a single image, or on one thread), none for a plain 1 x 1 convolution
        plain = kh == kw == 1 and all(int(v) == 1 for v in args[4]) and all(int(v) == 0 for v in args[5])
        return 0 if plain else x.shape[1] * kh * kw * grad.shape[2] * grad.shape[3] * x.element_size()
    copy = grad.numel() * grad.element_size() if not grad.is_contiguous() else 0
    if torch.backends.cpu.get_cpu_capability() != "AVX2" or not x.is_contiguous():
        return copy
    if kw < 14:
        return copy + _jit_conv_backward(grad, x, w, args[4], mask)
    if not mask[1]:
        return copy
    positions = grad.shape[2] * grad.shape[3]
    threads = torch.get_num_threads()
    n = threads if positions // threads < 256 and x.shape[0] != 1 else 1
    weights = w.numel() * 4
    im2col = x.shape[1] * kh * kw * positions * 4
    return copy + (n * weights * 4 + 128) + (n * im2col + 128)


def _takes_mkldnn(x: torch.Tensor, w: torch.Tensor, stride: Any, dilation: Any) -> bool:
    """Whether ATen runs a float32 CPU convolution (one group) on oneDNN: ``use_mkldnn`` in
    aten/src/ATen/native/Convolution.cpp, which keeps small single-image convolutions with
    kernels of 3 or less (and single-threaded 1 x 1 ones) on its own kernels."""
    if not (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled):
        return False
    strided = any(int(v) != 1 for v in stride)
    dilated = any(int(v) != 1 for v in dilation)
    n, kh, kw = x.shape[0], w.shape[-2], w.shape[-1]
    fast_1x1 = strided or dilated or n >= 16 or kw != 1 or kh != 1 or torch.get_num_threads() > 1
    return fast_1x1 and ((kw > 3 and kh > 3) or n > 1 or x.numel() > 20480)


def _jit_conv_backward(grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor, stride: Any, mask: Any) -> int:
    """What oneDNN's ``jit_avx2`` convolution backward holds beyond the op's outputs at its high
    point, on an AVX2 CPU, from the allocator's records of ResNet's convolutions (3 x 3 and
    1 x 1, strides 1 and 2; tests/test_memory.py) read with ideep's ``compute_v2`` and ATen's
    ``mkldnn_convolution_backward``. Each pass reorders its operands into the blocked
    8-channel layout (channels padded to 8): the backward-data pass holds the output
    gradient, the weights and a blocked input gradient (phase A), which ``mkldnn_to_dense``
    then copies to the dense input gradient (B; with a stride, one more dense copy, as
    the allocator shows); the backward-weights pass holds the dense input gradient, the
    output gradient and the input blocked, and a blocked weight gradient and its bias
    gradient (C), then the dense weight gradient beside them (D). A first convolution (3
    input channels) reads its input as it is. The kernels' own scratchpads (the 1 x 1
    stride-2 kernels' input compaction) are not modelled."""
    def pad8(c: int) -> int:
        return -(-c // 8) * 8

    n, c, h, w_in = x.shape
    k = w.shape[0]
    taps = w.shape[2] * w.shape[3]
    flat = c == 3
    if flat and mask[0]:
        return 0
    gy_b = n * pad8(k) * grad.shape[2] * grad.shape[3] * 4
    x_b = n * pad8(c) * h * w_in * 4
    w_b = pad8(k) * (c if flat else pad8(c)) * taps * 4
    gi = n * c * h * w_in * 4 if mask[0] else 0
    gw = k * c * taps * 4 if mask[1] else 0
    gb = k * 4 if len(mask) > 2 and mask[2] else 0
    phases = [0]
    if mask[0]:
        strided = any(int(s) != 1 for s in stride)
        phases += [gy_b + w_b + x_b, x_b + gi + (gi if strided else 0)]
    if mask[1]:
        gb_b = pad8(k) * 4 if gb else 0  # oneDNN's bias gradient, made with the weights'
        phases += [gi + gy_b + (0 if flat else x_b) + w_b + gb_b, gi + w_b + gb_b + gw]
    return max(0, max(phases) - gi - gw - gb)


_aten = torch.ops.aten
CPU_SCRATCH = {
    _aten.mm: _matmul_copies(0), _aten.bmm: _matmul_copies(0),
    _aten.addmm: _matmul_copies(1), _aten.baddbmm: _matmul_copies(1),
    _aten.convolution: _depthwise_reorder,
    _aten.convolution_backward: _conv_backward_scratch,
    _aten.mkldnn_rnn_layer: onednn_rnn.forward_scratch,
    _aten.mkldnn_rnn_layer_backward: onednn_rnn.backward_scratch,
}


_WRAPPED = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}
_TENSOR_SLOTS: dict[Any, tuple[int, ...]] = {}


def wrapped_scalars(func: Any, args: tuple[Any, ...], device: str) -> int:
    """A Python number passed where the op takes a Tensor (``x.mul_(0.9)`` is ``mul_.Tensor``)
    becomes a 0-dim CPU tensor for the call (8 bytes for a float or an int), and the CPU
    kernel casts it to the other operand's dtype (4 bytes for float32) when that differs:
    both appear in the CPU allocator's records, alive for the call only. A dispatch mode sees
    the number, not the tensor, so the trace adds them here. (On CUDA they live in host
    memory: nothing on the device.)"""
    if device != "cpu":
        return 0
    slots = _TENSOR_SLOTS.get(func)
    if slots is None:
        slots = _TENSOR_SLOTS[func] = tuple(i for i, a in enumerate(func._schema.arguments)
                                            if isinstance(a.type, torch.TensorType) and not a.kwarg_only)
    total = 0
    for i in slots:
        if i < len(args) and type(args[i]) in _WRAPPED:
            wrapped = _WRAPPED[type(args[i])]
            total += wrapped.itemsize
            other = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if other is not None and other.dtype != wrapped:
                total += other.dtype.itemsize
    return total


def kernel_scratch(func: Any, args: tuple[Any, ...], device: str) -> int:
    """The scratch bytes ``func``'s kernel on ``device`` allocates for itself (CPU only, so far)."""
    fn = CPU_SCRATCH.get(func._overloadpacket) if device == "cpu" else None
    return fn(args) if fn is not None else 0


# --------------------------------------------------------------------------- nested tensors
NESTED_NOTE = ("nn.TransformerEncoder's nested-tensor path is off for the trace: in eval mode with a "
               "src_key_padding_mask PyTorch packs the unpadded tokens, which needs the mask's values; the "
               "FLOPs and bytes are the dense bound over every token (exact when nothing is padded)")


def dense_encoders(model: torch.nn.Module) -> bool:
    """Turn off ``nn.TransformerEncoder``'s conversion to nested tensors (its eval-mode fast
    path for padded batches), whose sizes depend on the mask's values; whether any encoder had
    it on (the trace's snapshot of the model turns it back on)."""
    changed = [m for m in model.modules() if isinstance(m, torch.nn.TransformerEncoder)
               and getattr(m, "use_nested_tensor", False) and not m.training]
    for m in changed:
        m.use_nested_tensor = False
    return bool(changed)
