"""What a GPU's kernels do beyond the operator the trace records: extra memory traffic and
work that the per-operator roofline (:mod:`.roofline`) adds to an operator's bytes or
leaves out. One function per mechanism, each with its source.

* :func:`layout_transpose_bytes`: tensor-core convolutions in NCHW run on NHWC kernels with
  transposes around them;
* :func:`batch_norm_pass_bytes`: a batch norm in training reads its input twice (forward)
  and its input and gradient twice (backward);
* :func:`batch_norm_layout_factor`: PyTorch's own NCHW batch-norm kernels (bf16) are slower
  than its channels-last ones, and cuDNN's half-precision ones run at a rate of their own;
* :func:`norm_rows_s`: eager layer norm gives each row a thread block of its own;
* :func:`loop_s`: PyTorch's unvectorized elementwise loops (an operand transposed or broadcast, a
  cast between dtypes) are bound by the SMs' clocks, not by the memory;
* :func:`is_host_scalar_read`: the optimizer's step counts are read on the host;
* :func:`is_state_init`: the optimizer's state is created in the first step only, which the
  trace records but a steady-state step does not run.
"""

from __future__ import annotations

import math

from ...trace.records import OpEvent

LAYOUTS = ("nchw", "nhwc")
# convolution dtypes that run on NVIDIA tensor cores in NHWC kernels
TENSOR_CORE_CONV_DTYPES = ("fp16", "bf16", "tf32")
# PyTorch's own NCHW batch-norm kernels against its channels-last ones, training, same tensors:
# measured on an H100 (benchmarks/results/train-kernels-h100-resnet50.json, ResNet-50 bf16 at
# batch 256: forward + backward batch-norm kernels 61.8 ms NCHW, 27.3 ms channels-last)
NATIVE_NCHW_BATCH_NORM_SLOWDOWN = 61.8 / 27.3
# cuDNN's own half-precision batch norm in NCHW runs at a rate of its own, not the memory's:
# "about a factor of 2" slower than NHWC on an H100 (https://github.com/NVIDIA/cudnn-frontend/issues/134).
# The rate an H100 reached: ResNet-50 fp16 inference at batch 256, bn_fw_inf_1C11_kernel_NCHW,
# 11.38 GB in 8.85 ms for its 53 batch norms (benchmarks/results/gpu-profile-h100.txt). A GPU
# whose memory is slower than that streams them at its memory's rate.
CUDNN_NCHW_BATCH_NORM_BPS = 11.38e9 / 8.85e-3
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
    A transpose reads its tensor and writes it again, so every tensor the convolution reads or
    writes (forward: input, weight, output; backward: output gradient, input, weight and the
    two gradients) costs twice its bytes more: twice the convolution's own bytes, in kernels
    of their own that run before and after it. A forward 1x1 stride-1 convolution needs none
    (:func:`_pointwise`). On the H100 this predicts 14.0 ms of transposes in a ResNet-50 bf16
    step at batch 256 where the profile measured 13.1 ms (2.3 ms forward and 11.7 ms backward
    against 4.3 and 8.8).
    TF32 convolutions are transposed too: an H100's ResNet-50 TF32 training step in NCHW runs
    157 ``nchwToNhwcKernel<float>`` and 65 ``nhwcToNchwKernel<float>`` (9 ms of 71 ms,
    benchmarks/results/train-kernels-h100-resnet50.json) and its weight-gradient kernels are
    ``..._nhwckrsc_nhwc``; fp32 convolutions without tensor cores run NCHW kernels (1 ms of
    transposes in 81 ms there). Channels-last (NHWC) tensors need no transposes.
    """
    if layout == "nhwc" or dtype_key not in TENSOR_CORE_CONV_DTYPES or "convolution" not in e.op:
        return 0
    if not e.out_shapes or len(e.out_shapes[0]) != 4:  # 2-d convolutions only
        return 0
    if e.phase != "backward" and _pointwise(e):
        return 0
    return 2 * (e.bytes_read + e.bytes_written)


def _pointwise(e: OpEvent) -> bool:
    """A forward 1x1, stride-1 convolution: a matrix product over NCHW as it lies, which cuDNN
    runs as a GEMM without transposes (an H100's ResNet-50 forward runs 69 transposes for its
    53 convolutions, of which 36 are 1x1: train-kernels-h100-resnet50.txt). Told from the
    bytes: its input holds exactly K (= input channels) values per output position."""
    n, c_out, h, w = e.out_shapes[0]
    positions = n * h * w
    if not positions or not c_out:
        return False
    item = _out_bytes(e) // (positions * c_out) or 2
    k = e.macs // (positions * c_out)  # the reduction length: C_in x kh x kw
    weight = c_out * k * item
    inputs = e.bytes_read - weight
    return k > 0 and abs(inputs - positions * k * item) <= c_out * item  # a bias at most


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


def batch_norm_layout_factor(e: OpEvent, training: bool, layout: str, bandwidth: float) -> float:
    """How much longer a batch norm's kernels take than the roofline's bytes say, by backend.

    PyTorch sends a batch norm to cuDNN unless its input or weight is bf16
    (``_select_batch_norm_backend``, aten/src/ATen/native/Normalization.cpp); bf16 goes to
    PyTorch's own kernels, whose NCHW reductions (``batch_norm_collect_statistics_kernel``,
    ``batch_norm_backward_kernel``: one block per channel striding over N, H and W) are the
    slow ones: "kernel ``at::native::batch_norm_backward_kernel`` is the bottleneck" against
    the channels-last kernels, which run "a few times faster" on large tensors (PyTorch
    issue 60063); cuDNN's own batch norm is "about a factor of 2" slower in NCHW than NHWC on
    an H100 (cudnn-frontend issue 134). The factors: the one measured on an H100 for PyTorch's
    kernels in training (:data:`NATIVE_NCHW_BATCH_NORM_SLOWDOWN`); for cuDNN's fp16 kernels,
    training or not, the memory's ``bandwidth`` (bytes/s) over the rate they reach
    (:data:`CUDNN_NCHW_BATCH_NORM_BPS`), where it is above it; 1 for every other case (fp32,
    whose NCHW kernels are cuDNN's own layout, and channels-last).
    """
    if layout != "nchw" or "batch_norm" not in e.op or not e.out_shapes or len(e.out_shapes[0]) != 4 \
            or not e.out_dtypes:
        return 1.0
    if e.out_dtypes[0] == "bfloat16":
        return NATIVE_NCHW_BATCH_NORM_SLOWDOWN if training else 1.0
    return max(1.0, bandwidth / CUDNN_NCHW_BATCH_NORM_BPS) if e.out_dtypes[0] == "float16" else 1.0


def is_state_init(e: OpEvent) -> bool:
    """An operator that creates optimizer state (zeros for Adam's moments, the step count).

    torch.optim creates its state lazily, in the first ``step()`` (``_init_group``: e.g.
    ``torch.zeros_like(p)`` for Adam's ``exp_avg`` and ``exp_avg_sq``); the trace records that
    first step, whose memory the peak needs, but every later step finds the state made.
    A throughput is the time of those later steps.
    """
    return e.phase == "optimizer" and e.op.startswith(STATE_INIT_OPS)


# operators that only allocate: uninitialised memory, no kernel
ALLOCATION_OPS = ("aten.empty.", "aten.empty_like.", "aten.empty_strided.", "aten.new_empty.",
                  "aten.new_empty_strided.", "aten.empty_permuted.")


def is_allocation(e: OpEvent) -> bool:
    """An operator that hands out uninitialised memory (``torch.empty`` and its kin): on a GPU the
    caching allocator gives it a block without launching a kernel (c10/cuda/CUDACachingAllocator),
    so it moves no bytes however large its output; the trace records those bytes for the memory
    it holds."""
    return e.op.startswith(ALLOCATION_OPS)


def is_host_scalar_read(e: OpEvent) -> bool:
    """An optimizer's read of its step count (``.item()``): torch.optim keeps the counts on the
    CPU unless ``capturable`` or ``fused`` (``_init_group``: ``torch.tensor(0.0)`` without a
    device), and the multi-tensor Adam reads each one for its bias corrections
    (``_get_value(step)``), so on a GPU the read launches nothing: the host's time alone."""
    return e.phase == "optimizer" and e.op == "aten._local_scalar_dense.default"


# PyTorch's row-wise normalisation on NVIDIA GPUs gives each row a thread block of its own:
# layer_norm_kernel.cu, launch_vectorized_layer_norm_kernel (blocks = rows, 128 threads each;
# rms_norm shares the kernel) and the backward's layer_norm_grad_input_kernel. Narrow rows (a
# vision model's 96 to 768 channels) leave each block a few loads and two reductions, so the
# kernel is bound by how many blocks the SMs hold at once and how long each lives, not by bytes.
ROW_THREADS = 128
# Each block's life, fitted to the kernels' own times on an H100 SXM (torch.profiler, ConvNeXt-T
# and Swin-T, inference at batch 256 and training at 128, fp32 under autocast:
# benchmarks/results/gpu-profile-h100.txt): 3.50-3.62 us forward, 2.03-2.19 us for the backward's
# grad-input kernel. One GPU's kernels: other GPUs' published ConvNeXt and Swin rows check it.
ROW_BLOCK_S = {"forward": 3.56e-6, "backward": 2.11e-6}
# resident threads per SM by compute capability (CUDA C Programming Guide, table of technical
# specifications per compute capability)
THREADS_PER_SM = {(7, 5): 1024, (8, 6): 1536, (8, 7): 1536, (8, 9): 1536, (12, 0): 1536}


def norm_rows(e: OpEvent) -> tuple[int, str] | None:
    """Rows and direction of a row-wise normalisation kernel (layer norm, RMS norm), else None."""
    if not e.out_shapes or len(e.out_shapes) < 2 or not e.out_shapes[1]:
        return None
    if e.op in ("aten.native_layer_norm.default", "aten._fused_rms_norm.default"):
        return math.prod(e.out_shapes[1]), "forward"  # mean/rstd: one per row
    if e.op == "aten.native_layer_norm_backward.default" and e.out_shapes[0]:
        return math.prod(e.out_shapes[0]) // max(1, math.prod(e.out_shapes[1])), "backward"
    return None


def norm_rows_s(e: OpEvent, units: int | None, sm: tuple[int, int] | None) -> float:
    """The least time of a row-wise normalisation on an NVIDIA GPU of ``units`` SMs of compute
    capability ``sm``: its rows in waves of the blocks the SMs hold at once (0: not one)."""
    rows = norm_rows(e)
    if rows is None or not units or sm is None:
        return 0.0
    resident = THREADS_PER_SM.get(sm, 2048) // ROW_THREADS
    return rows[0] / (units * resident) * ROW_BLOCK_S[rows[1]]


# PyTorch's CUDA elementwise kernels run one of three loops (ATen's CUDALoops.cuh, gpu_kernel_impl;
# the trace records which, trace.recorder.elementwise_loop). The vectorized one streams at the
# memory's rate. The other two compute each element's operand offsets or casts one at a time, and
# run at a rate per SM clock, whatever the memory: on an H200 they took 0.89-1.00 of an H100's time
# where the vectorized kernels took 0.70-0.75, as the bandwidths say (torch.profiler, the same
# models: benchmarks/results/gpu-profile-h200.txt against gpu-profile-h100.txt). SM clocks per
# element, fitted to one H200 (benchmarks/gpu_kernel_probe.py: 33 calls of 16M to 8.6G elements,
# sections ``loops`` and ``strided``, the kernel floor taken off): a transposed or broadcast operand
# 0.71 (median of 20 calls, 0.42-0.95: copies 0.42-0.80, adds and multiplies 0.65-0.95), a cast
# 1.00 (8 calls, 0.94-1.01); both: the sum (3 calls, 1.50-1.83 measured against 1.71).
LOOP_CLOCKS = {"strided": 0.71, "cast": 1.00}


def loop_s(e: OpEvent, sm_clocks: float) -> float:
    """Seconds an unvectorized elementwise loop (:data:`LOOP_CLOCKS`) takes over its output's
    elements on a GPU whose SMs run ``sm_clocks`` clock cycles a second between them (0: none)."""
    if not e.loop or not e.out_shapes or not sm_clocks:
        return 0.0
    clocks = sum(LOOP_CLOCKS[kind] for kind in e.loop.split())
    return math.prod(e.out_shapes[0]) * clocks / sm_clocks
