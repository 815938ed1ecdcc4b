"""What a GPU's kernels do beyond the operator the trace records: extra memory traffic and
work that the per-operator roofline (:mod:`.roofline`) adds to an operator's bytes or
leaves out. One function per mechanism, each with its source.

* :func:`layout_transpose_bytes`: tensor-core convolutions in NCHW run on NHWC kernels with
  transposes around them;
* :func:`batch_norm_pass_bytes`: a batch norm in training reads its input twice (forward)
  and its input and gradient twice (backward);
* :func:`is_state_init`: the optimizer's state is created in the first step only, which the
  trace records but a steady-state step does not run.
"""

from __future__ import annotations

import math

from ..trace.records import OpEvent

LAYOUTS = ("nchw", "nhwc")
# convolution dtypes that run on NVIDIA tensor cores in NHWC kernels
TENSOR_CORE_CONV_DTYPES = ("fp16", "bf16")
# operators an optimizer's first step runs to create its state (exp_avg, exp_avg_sq, step)
STATE_INIT_OPS = ("aten.zeros_like.", "aten.zeros.", "aten.empty_like.", "aten.empty.", "aten.full.",
                  "aten.scalar_tensor.", "aten.lift_fresh", "aten.new_zeros.", "aten.new_empty.")


def _out_bytes(e: OpEvent, index: int = 0) -> int:
    """Bytes of the operator's ``index``-th output (its dtype's item size times its elements)."""
    if len(e.out_shapes) <= index or len(e.out_dtypes) <= index:
        return 0
    size = {"float64": 8, "float32": 4, "int64": 8, "int32": 4}.get(e.out_dtypes[index], 2)
    return size * math.prod(e.out_shapes[index])


def layout_transpose_bytes(e: OpEvent, dtype_key: str, layout: str) -> int:
    """Extra bytes a 2-d convolution moves on an NVIDIA GPU when its tensors are NCHW.

    NVIDIA's tensor cores run convolutions in NHWC; given NCHW (PyTorch's default, contiguous)
    tensors, cuDNN transposes each operand to NHWC before the convolution and its result back
    after: "the NCHW tensor must be transposed to NHWC before the convolution and transposed
    back to NCHW after" (MosaicML Composer, Channels Last method card, after NVIDIA's diagram:
    https://docs.mosaicml.com/projects/composer/en/stable/method_cards/channels_last.html;
    "To have tensor cores achieve the optimal throughput they require the data layout to be
    NHWC rather than NCHW", onnxruntime PR 17200). The kernels show in a profile as
    ``nchwToNhwcKernel`` and ``nhwcToNchwKernel`` (``benchmarks/train_kernels.py`` counts them).
    Each transpose reads and writes its tensor once, so every tensor the convolution reads or
    writes (forward: input, weight, output; backward: output gradient, input, weight and the
    two gradients) is moved once more each way: the convolution's own bytes, again.
    fp32 convolutions without tensor cores, and TF32 ones (cuDNN has NCHW TF32 kernels), are
    left as they are; channels-last (NHWC) tensors need no transposes.
    """
    if layout == "nhwc" or dtype_key not in TENSOR_CORE_CONV_DTYPES or "convolution" not in e.op:
        return 0
    if not e.out_shapes or len(e.out_shapes[0]) != 4:  # 2-d convolutions only
        return 0
    return e.bytes_read + e.bytes_written


def batch_norm_pass_bytes(e: OpEvent, training: bool) -> int:
    """Extra bytes of a batch norm in training: its kernels pass over the activations twice.

    PyTorch's CUDA batch norm in training first reduces the batch statistics, then
    normalises: forward ``batch_norm_collect_statistics_kernel`` (reads the input) then
    ``batch_norm_transform_input_kernel`` (reads it again, writes the output); backward
    ``batch_norm_backward_reduce_kernel`` (reads the output gradient and the input) then
    ``batch_norm_backward_elemt_kernel`` (reads both again, writes the input gradient)
    (aten/src/ATen/native/cuda/Normalization.cuh). The trace counts each tensor once, so a
    forward reads its input once more (the size of its output) and a backward its two
    inputs once more (twice the size of its input gradient). In inference the running
    statistics are used: one pass.
    """
    if not training:
        return 0
    if e.op.startswith("aten.native_batch_norm_backward"):
        return 2 * _out_bytes(e)
    if e.op.startswith("aten.native_batch_norm.") or e.op.startswith("aten._native_batch_norm_legit."):
        return _out_bytes(e)
    return 0


def is_state_init(e: OpEvent) -> bool:
    """An operator that creates optimizer state (zeros for Adam's moments, the step count).

    torch.optim creates its state lazily, in the first ``step()`` (``_init_group``: e.g.
    ``torch.zeros_like(p)`` for Adam's ``exp_avg`` and ``exp_avg_sq``); the trace records that
    first step, whose memory the peak needs, but every later step finds the state made.
    A throughput is the time of those later steps.
    """
    return e.phase == "optimizer" and e.op.startswith(STATE_INIT_OPS)
