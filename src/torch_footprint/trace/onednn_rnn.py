"""The memory oneDNN's LSTM allocates on a CPU, which the dispatcher never sees.

On a CPU PyTorch runs a float32 ``nn.LSTM`` layer as ``aten::mkldnn_rnn_layer`` (oneDNN,
through ideep), and its backward as ``aten::mkldnn_rnn_layer_backward``. Their meta kernels
give the right outputs but for one: the training workspace, the tensor the forward saves for
the backward, is empty on meta (``(0,)`` bytes) while the real kernel's is
oneDNN's workspace size, 8 MiB for one 256-wide layer over 64 steps at batch 8. Inside both
calls oneDNN also allocates, through the CPU allocator and for the length of the call:

* the weights reordered into the layout the primitive wants (PyTorch's ``(4H, D)`` weights
  are oneDNN's ``ldgoi``): ``ldigo`` with padded rows for the reference forward used in
  training; blocked by the kernel's N block for the brgemm forward used in inference;
  ``ldgoi`` with a padded leading dimension for the backward, where padding changes it;
* the weight gradients in ``ldigo`` (backward), and the bias gradient;
* the two biases summed into one (``b_ih + b_hh``);
* zeros for the gradients of the last hidden and cell state when autograd has none;
* the primitive's scratchpad.

Sizes follow oneDNN 3.x (the version PyTorch 2.x bundles) as written in
``src/cpu/rnn/rnn_utils.{hpp,cpp}`` (``get_good_ld``, ``set_workspace_sizes``,
``set_offsets``: every buffer starts on a 4 KiB page), ``src/cpu/rnn/ref_rnn.cpp``
(``init_scratchpad``: the space booked with 4 KiB alignment plus the weight and bias
pointer arrays, each booking padded by its alignment, at least 128 bytes, as
``src/common/memory_tracking.hpp`` books) and ``src/cpu/x64/rnn/rnn_brgemm_utils.cpp``
(the brgemm N block, the merged-layer case at batch 1, the batch-element array per thread).
The training forward and the backward take oneDNN's reference implementation; the inference
forward takes brgemm on an x86 CPU with AVX2 or AVX-512 (the reference one elsewhere, not
measured). Checked to the byte against the allocator on this machine (AVX2) for shapes from
``(B, T, D, H) = (1, 10, 64, 32)`` to ``(4, 33, 256, 256)`` (batch, steps, input width, hidden) in
tests/test_recurrent.py, and up to ``(16, 5, 300, 512)`` by hand.

The trace reaches these calls because a model with recurrent layers is traced on a CPU with
fake CPU tensors (tracer.py): ATen picks oneDNN, or for the other recurrent layers the input
projection of the whole sequence at once, by the tensors' device, which meta tensors are not.
Only float32 is modelled: a bfloat16 LSTM on a CPU without AVX-512 BF16 does not take oneDNN
(PyTorch runs it cell by cell, which the trace sees), and elsewhere its scratch is not
counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from .formulas import named_args

_LAYER = torch.ops.aten.mkldnn_rnn_layer.default
_LAYER_BACKWARD = torch.ops.aten.mkldnn_rnn_layer_backward.default
PAGE = 4096
GATES = 4  # LSTM: the only mode PyTorch sends to mkldnn_rnn_layer
F32 = 4
POINTER = 8
BATCH_ELEMENT = 40  # sizeof(brgemm_batch_element_t): two pointers, two dim_t, one dim_t
MIN_ALIGN = 128  # memory_tracking's default alignment


def good_ld(dim: int, itemsize: int = F32) -> int:
    """oneDNN's leading dimension: rounded up to 64 bytes, plus 64 bytes when a multiple of
    256 elements (to avoid 4K aliasing)."""
    step = 64 // itemsize
    ld = -(-dim // step) * step
    return ld + step if ld % 256 == 0 else ld


def _pages(sizes: Iterable[int], start: int = 0) -> int:
    """``set_offsets``' register_space: each buffer at the next page boundary; the end offset."""
    cur = start
    for size in sizes:
        cur = -(-cur // PAGE) * PAGE + size
    return cur


def _booked(space: int, batch_elements: int = 0) -> int:
    """The scratchpad registry's size: the RNN space booked at 4 KiB alignment, the three
    weight-pointer arrays and the bias-pointer array (one layer, one direction) at 128 bytes,
    and brgemm's batch elements where there are any."""
    total = space + PAGE if space else 0
    total += 3 * (POINTER + MIN_ALIGN) + (F32 * POINTER + MIN_ALIGN)
    if batch_elements:
        total += batch_elements * BATCH_ELEMENT + MIN_ALIGN
    return total


def _states(B: int, T: int, D: int, H: int) -> tuple[int, int]:
    """(ws_states_layer, ws_states_iter_c) bytes: two layers' worth (input and output) of
    T + 1 states."""
    return 2 * (T + 1) * B * good_ld(max(D, H)) * F32, 2 * (T + 1) * B * H * F32


def workspace_bytes(B: int, T: int, D: int, H: int) -> int:
    """The training forward's workspace (the tensor saved for the backward)."""
    states, cells = _states(B, T, D, H)
    return _pages([T * B * good_ld(GATES * H) * F32, T * B * good_ld(H) * F32, states, cells,
                   states, states, cells, 0])


def _train_scratchpad(B: int, T: int, D: int, H: int, merged: bool) -> int:
    gates = (T if merged else 1) * B * good_ld(max(H, GATES * H)) * F32
    ht = B * good_ld(H) * F32
    return _booked(_pages([gates, ht, ht, 0]))


def _inference_scratchpad(B: int, T: int, D: int, H: int, brgemm: bool, threads: int) -> int:
    states, cells = _states(B, T, D, H)
    merged = (B == 1 and T >= 2) if brgemm else B < 128
    gates = (T if merged else 1) * B * good_ld(max(H, GATES * H)) * F32
    space = _pages([0, 0, states, cells, 0, 0, 0, 0, gates, B * good_ld(H) * F32, 0, 0])
    if not brgemm:
        return _booked(space)
    # k blocks = K for an LSTM outside AMX: (1 + 1) blocks, twice when layer and iteration fuse
    fuse = D == H and not merged
    return _booked(space, 2 * (2 if fuse else 1) * threads)


def _brgemm_isa() -> int | None:
    """The float32 vector width in floats of oneDNN's brgemm RNN on this CPU, or None where
    it does not run (no AVX2)."""
    cap = torch.backends.cpu.get_cpu_capability()
    return 16 if cap.startswith("AVX512") else 8 if cap == "AVX2" else None


def _shape(x: torch.Tensor) -> tuple[int, int, int]:
    """(B, T, D) of a layer's input, which is time-major whatever ``batch_first`` says (ATen's
    ``mkldnn_rnn`` transposes a batch-first input before the layers)."""
    return x.shape[1], x.shape[0], x.shape[2]


def _applies(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype == torch.float32


def forward_scratch(args: tuple[Any, ...]) -> int:
    """Bytes ``mkldnn_rnn_layer`` allocates and frees inside itself (weights reordered, the
    biases summed, the scratchpad), all alive together with its outputs."""
    a = named_args(_LAYER, args, {})
    if not _applies(a["input"]):
        return 0
    B, T, D = _shape(a["input"])
    H = int(a["hidden_size"])
    bias = GATES * H * F32  # b_ih + b_hh, zeros when the layer has none
    if a["train"]:
        weights = (D + H) * good_ld(GATES * H) * F32
        return bias + weights + _train_scratchpad(B, T, D, H, merged=B < 128)
    simd = _brgemm_isa()
    if simd is None:
        weights = (D + H) * good_ld(GATES * H) * F32
        return bias + weights + _inference_scratchpad(B, T, D, H, False, torch.get_num_threads())
    block = (4 if simd == 8 and B == 1 else 2) * simd  # brgemm_calc_n_block: 4 vectors at M = 1 on AVX2
    weights = (D + H) * GATES * (-(-H // block) * block) * F32
    return bias + weights + _inference_scratchpad(B, T, D, H, True, torch.get_num_threads())


def backward_scratch(args: tuple[Any, ...]) -> int:
    """Bytes ``mkldnn_rnn_layer_backward`` allocates inside itself beyond its outputs, alive at
    its high point: zeros for missing state gradients, contiguous copies of strided ones (a
    batch-first LSTM's output gradient arrives transposed), the summed bias, the weights in
    ``ldgoi`` where the padded leading dimension differs, the weight and bias gradients in
    oneDNN's layout, the scratchpad."""
    a = named_args(_LAYER_BACKWARD, args, {})
    if not _applies(a["input"]):
        return 0
    B, T, D = _shape(a["input"])
    H = int(a["hidden_size"])
    zeros = sum(B * H * F32 for g in ("grad_hy", "grad_cy") if a.get(g) is None)
    copies = sum(g.numel() * g.element_size() for g in (a.get(n) for n in ("grad_output", "grad_hy", "grad_cy"))
                 if isinstance(g, torch.Tensor) and not g.is_contiguous())
    bias = GATES * H * F32  # b_ih + b_hh, zeros when the layer has none
    reordered = sum(GATES * H * good_ld(k) * F32 for k in (D, H) if good_ld(k) != k)
    # the weight gradients in ldigo. (oneDNN's bias gradient has a buffer of its own too, as large
    # as the op's second bias-gradient output, a clone the CPU kernel makes after its scratch is
    # freed; the trace holds that output from the start of the call (:func:`layer_backward_outputs`),
    # which stands in for the buffer.)
    grads = (D + H) * good_ld(GATES * H) * F32
    return zeros + copies + bias + reordered + grads + _train_scratchpad(B, T, D, H, merged=True)


def layer_outputs(*args: Any, **kwargs: Any) -> Any:
    """``mkldnn_rnn_layer``'s outputs on meta or fake tensors with the training workspace at
    its real size (the meta kernel returns it empty)."""
    out = _LAYER(*args, **kwargs)
    a = named_args(_LAYER, args, kwargs)
    if not (a["train"] and _applies(a["input"])):
        return out
    B, T, D = _shape(a["input"])
    ws = out[3].new_empty((workspace_bytes(B, T, D, int(a["hidden_size"])),), dtype=torch.uint8)
    return (*out[:3], ws)


def layer_backward_outputs(*args: Any, **kwargs: Any) -> Any:
    """``mkldnn_rnn_layer_backward``'s outputs on meta or fake tensors with the second bias
    gradient in a storage of its own, as the CPU kernel returns it (a clone of the first). The
    meta kernel returns the first one twice, and fake tensors' dispatch cache may or may not
    keep that aliasing from one call to the next."""
    out = _LAYER_BACKWARD(*args, **kwargs)
    return (*out[:4], torch.empty_like(out[3]), *out[5:])
