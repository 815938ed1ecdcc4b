"""FP8 training's matmuls and the casts around them, by recipe and by the library that runs them.

The recipes (``--fp8``), as torchao's float8 and MX training and Transformer Engine name them:

* ``tensorwise``: one scale per tensor, computed from the tensor itself (dynamic, or "current"
  scaling in Transformer Engine): a pass that reads the tensor for its amax before the cast.
* ``rowwise``: one scale per row along the reduction (torchao's float8 rowwise).
* ``rowwise_with_gw_hp``: row-wise for the forward, the input gradient's GEMM with a tensor-wise scale
  for the weight, and the weight gradient's GEMM left in high precision (torchao's recipe of that name:
  ``cast_config_input_for_grad_weight`` and ``cast_config_grad_output_for_grad_weight`` disabled).
* ``delayed``: one scale per tensor from an amax history (Transformer Engine's DelayedScaling):
  no pass of its own, the cast records the amax as it goes.
* ``mxfp8``: one power-of-two (E8M0) scale per 32 consecutive values along the reduction (the
  OCP Microscaling format, MX v1.0; Transformer Engine's MXFP8BlockScaling, torchao's MX
  training), each block's scale found inside the cast kernel: no pass of its own. The matmuls
  run on block-scaled tensor cores at the fp8 rate, which NVIDIA's GPUs have from Blackwell
  (compute capability 10.0: ``tcgen05.mma`` with block scaling; 12.0: ``mma.sync`` with block
  scaling; PTX ISA 8.7). Because the blocks run along the reduction, a tensor read across its
  rows by the backward is cast again along its columns, from the high-precision copy.
"""

from __future__ import annotations

import math

from ...hardware.db import Accelerator
from ...trace.records import Trace
from .sdpa import sm_of

FP8_HEADS = ("lm_head", "output", "head", "classifier")  # left in high precision (torchtitan's filter_fqns)
MX_BLOCK = 32  # values sharing one E8M0 (1-byte) scale (OCP Microscaling Formats v1.0, section 5)
BLOCK_SCALED_SM = (10, 0)  # the first compute capability with block-scaled (MX) matmuls

# bytes a cast moves per byte of its 2-byte operand, by recipe: (one cast a GEMM, torchao) and (Transformer
# Engine's, which writes the fp8 tensor and its transpose, or for MX its column-wise copy, in one kernel)
_SCALE = 1 / MX_BLOCK  # an E8M0 byte per block
CAST_BYTES = {
    "tensorwise": ((2 + 2 + 1) / 2, (2 + 2 + 1 + 1) / 2),  # read for the amax, read again, write fp8 (and transpose)
    "rowwise": ((2 + 2 + 1) / 2, (2 + 2 + 1 + 1) / 2),
    "rowwise_with_gw_hp": ((2 + 2 + 1) / 2, (2 + 2 + 1 + 1) / 2),
    "delayed": ((2 + 1) / 2, (2 + 1 + 1) / 2),  # the amax history: no pass of its own
    "mxfp8": ((2 + 1 + _SCALE) / 2, (2 + 2 * (1 + _SCALE)) / 2),  # one read, fp8 and its scales (row- and column-wise)
}


def block_scaled(acc: Accelerator) -> bool:
    """Whether ``acc`` has block-scaled (MX) matmul units: an NVIDIA GPU of compute capability 10.0 or later."""
    sm = sm_of(acc)
    return sm is not None and sm >= BLOCK_SCALED_SM


def weight_gradients(trace: Trace) -> set[int]:
    """The events that are a linear layer's weight-gradient GEMM: in the backward, with the weight's shape, not
    reading the parameter (the input gradient's GEMM does, or under autocast reads its copy column-major). Where
    neither tells them apart (as many tokens as output features, a square weight) the first of the two is the
    weight's: PyTorch's MmBackward0 computes ``mat2``'s gradient (``weight.t()``) before ``self``'s, as traced."""
    shapes = {q.module: q.shape for q in trace.params if q.name.endswith("weight")}
    out, seen = set(), dict[str, int]()
    for i, e in enumerate(trace.events):
        if e.kind != "matrix" or e.phase != "backward" or e.transposed or e.weights or not e.out_shapes:
            continue
        shape = shapes.get(e.module)
        if shape is None or list(e.out_shapes[0]) != list(shape):
            continue
        if e.problem and len(e.problem) >= 5 and e.problem[2] == e.problem[4]:  # tokens = output features
            seen[e.module] = seen.get(e.module, 0) + 1
            if not seen[e.module] % 2:  # the second: the input's gradient, whose shape is the weight's too
                continue
        out.add(i)
    return out


def fp8_casts(trace: Trace, recipe: str, micro_batches: int = 1) -> dict[int, int]:
    """The matmuls FP8 training runs in fp8 (torchao's convert_to_float8_training, Transformer
    Engine's Linear): those of ``nn.Linear`` modules but the head, traced in bf16 or fp16, both
    dimensions multiples of 16 (torchao's requirement); each with the bytes of its operands'
    casts (:data:`CAST_BYTES`). Event index -> bytes.

    Under Transformer Engine (``fp8_engine``: Megatron-core's FP8, or ``--fp8-engine``) the casts are TE's: each
    linear's input cast once in the forward and its output's gradient once in the backward, each
    by a cast-transpose kernel that writes the fp8 tensor and its transpose (MX: its column-wise
    copy; the weight gradient's GEMM reads those: no cast of its own), and the weight cast in the
    step's first micro-batch only where the caller passes TE's ``is_first_microbatch`` (Megatron-core:
    ``fp8_weight_cached``; cached for the other ``micro_batches``), every micro-batch otherwise.

    Under tensor parallelism with tensorwise scaling (torchao's float8 styles), a column-parallel
    linear's forward carries its share of one cast of its module's input (``fp8_colwise_inputs``,
    :func:`..workload.colwise_input_shares`), the weight's cast whole. Row-wise scaling first transposes in bf16 (2 B
    read and written an element; torchao's float8 roofline: ``x_bf16_dim0 -> x_bf16_dim1``) the operands the
    backward reads across their rows: the data gradient's weight, both of the weight gradient's (with GW-HP the
    data gradient's weight is scaled per tensor, no transpose first, and the weight gradient's GEMM is not in the
    result: bf16). torchao's MX casts along either dimension from the bf16 tensor in one kernel (``to_mx`` along
    dim0, its dim1 cast): each GEMM's operands cast once, as tensorwise's but with no amax pass."""
    types = {m.path: m.type for m in trace.modules}
    te = trace.settings.get("fp8_engine") == "transformer-engine"
    wgrads = weight_gradients(trace) if te or recipe in ("rowwise", "rowwise_with_gw_hp") else set()
    once = max(1, micro_batches) if trace.settings.get("fp8_weight_cached") else 1
    shared = trace.settings.get("fp8_colwise_inputs", {}) if recipe == "tensorwise" else {}
    per_byte = CAST_BYTES[recipe][te]
    out = {}
    for i, e in enumerate(trace.events):
        if e.kind != "matrix" or types.get(e.module) != "Linear" or e.module.rsplit(".", 1)[-1] in FP8_HEADS:
            continue
        if not (e.problem and e.problem[0] == "gemm" and len(e.problem) >= 5):
            continue
        if any(int(d) % 16 for d in e.problem[2:5]) or not e.out_shapes:
            continue
        if not any(d in ("bfloat16", "float16") for d in (e.out_dtypes or [])):
            continue
        weight = sum(trace.params[k].nbytes for k in e.weights)
        w = weight or math.prod(e.problem[3:5]) * 2  # the weight operand: the parameter, or autocast's bf16 copy
        if not te:  # a forward (or its recompute) reads the weight transposed: [n, k]
            split = shared.get(e.module) if e.transposed else None
            wgrad = i in wgrads
            if wgrad and recipe == "rowwise_with_gw_hp":  # the weight gradient's GEMM stays in bf16: no cast
                continue
            out[i] = int(((e.bytes_read - w) / split + w if split else e.bytes_read) * per_byte)
            if recipe == "rowwise" and not e.transposed:
                out[i] += 2 * (e.bytes_read if wgrad else w)
            continue
        if e.phase == "forward":  # the input each micro-batch, the weight once a step where TE caches it
            out[i] = int((e.bytes_read - w) * per_byte + w * per_byte / once)
        elif i in wgrads:  # the weight gradient's GEMM: both operands' fp8 transposes made already
            out[i] = 0
        else:  # the data gradient's GEMM: the output's gradient cast (its transpose kept for the weight's)
            out[i] = int((e.bytes_read - w) * per_byte)
    return out
