"""An engine's fused element-wise kernels (estimate/llm/steps.fused): within a run of element-wise
operators between two matrix operators, a result the next operator reads in full stays on chip.
Expected bytes worked by hand from the operators' shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from torch_footprint.estimate.llm.steps import fused
from torch_footprint.trace.records import OpEvent, TensorInfo, Trace

pytest.importorskip("transformers")

TINY = Path(__file__).parents[1] / "configs" / "llama-tiny"


def _op(op: str, kind: str, read: int, written: int, weights: list[int] | None = None) -> OpEvent:
    return OpEvent(op, "m", "forward", 1, 0, kind, read, written, [[1]], ["bfloat16"], weights=weights or [])


def test_a_chain_between_two_matmuls_reads_its_input_and_writes_its_output_once() -> None:
    # SiLU-and-multiply on T tokens of an intermediate size I in bf16 (2 bytes): silu reads the gate
    # (2TI bytes) and writes 2TI; mul reads silu's output and the up projection (4TI) and writes 2TI.
    # Fused: the gate and the up projection read (4TI), the product written (2TI): 6TI in all,
    # where the two kernels apart move 10TI.
    t, i = 16, 344
    b = 2 * t * i
    trace = Trace("m", [], events=[_op("mm", "matrix", 10, b), _op("silu", "vector", b, b), _op("view", "view", 0, 0),
                          _op("mul", "vector", 2 * b, b), _op("mm", "matrix", b + 10, 10)])
    out = fused(trace).events
    assert [(e.bytes_read, e.bytes_written) for e in out] == [(10, b), (b, 0), (0, 0), (b, b), (b + 10, 10)]
    assert sum(e.bytes_read + e.bytes_written for e in out[1:4]) == 3 * b  # 6TI, against 5b = 10TI apart
    assert [e.flops for e in out] == [e.flops for e in trace.events]  # the work and the operators as traced


def test_an_operator_that_does_not_read_the_whole_result_before_it_reads_its_own_inputs() -> None:
    # rotary embedding of q (8,192 bytes written by its last add), then of k (a 6,144-byte read: k and
    # the cosines): k's multiply cannot take q's result, so q is written and k read in full
    trace = Trace("m", [], events=[_op("add", "vector", 16384, 8192), _op("mul", "vector", 6144, 4096)])
    out = fused(trace).events
    assert [(e.bytes_read, e.bytes_written) for e in out] == [(16384, 8192), (6144, 4096)]


def test_a_norms_scale_is_read_and_not_taken_for_the_previous_result() -> None:
    # RMSNorm's last multiply by its scale (weight 0: 256 bytes) after x * rsqrt (8,192 bytes written):
    # it reads 8,192 + 256; fused, only the scale is read from memory
    scale = TensorInfo("norm.weight", "norm", [128], "bfloat16", 128, 256)
    trace = Trace("m", [], events=[_op("mul", "vector", 8256, 8192), _op("mul", "vector", 8448, 8192, weights=[0])],
                  params=[scale])
    out = fused(trace).events
    assert [(e.bytes_read, e.bytes_written) for e in out] == [(8256, 0), (256, 8192)]


def test_a_traced_prefill_keeps_its_flops_and_operators_and_moves_fewer_bytes() -> None:
    from torch_footprint.estimate.llm.trace import trace_serving

    st = trace_serving(str(TINY), batch=1, prompt=16)
    before, after = st.prefill.events, fused(st.prefill).events
    assert len(after) == len(before)
    assert [e.flops for e in after] == [e.flops for e in before]
    matrix = [(e.bytes_read, e.bytes_written) for e in before if e.kind == "matrix"]
    assert [(e.bytes_read, e.bytes_written) for e in after if e.kind == "matrix"] == matrix
    # the tiny Llama's second norm (16 tokens, hidden 128, float32: 4 bytes, T x H x 4 = 8,192 bytes):
    # the residual add, x^2, its mean, + eps, rsqrt, x * rsqrt, x scaled. Fused: the residual and the
    # attention's output read (2 x 8,192), x read again to normalise it (8,192: vLLM's rms_norm kernel
    # reads its input twice, once for the variance), the scale (128 x 4) and the output (8,192) written
    mms = [i for i, e in enumerate(after) if e.kind == "matrix"]
    o_proj = mms[4]  # q, k, v, attention, o
    chain = [e for e in after[o_proj + 1:mms[5]] if e.kind != "view"]
    assert [e.op.split(".")[1] for e in chain] == ["add", "pow", "mean", "add", "rsqrt", "mul", "mul"]
    assert sum(e.bytes_read + e.bytes_written for e in chain) == 2 * 8192 + 8192 + 128 * 4 + 8192
    # its gated MLP (intermediate 344): the gate's matrix, SiLU, the up projection's matrix (which reads
    # the norm's output, not SiLU's), the multiply. Fused as engines run silu_and_mul: the gate and the
    # up projection read, the product written, 3 x 16 x 344 x 4 bytes
    k = next(i for i, e in enumerate(after) if e.op == "aten.silu.default")
    up, mul = [e for e in after[k + 1:] if e.kind != "view"][:2]
    assert up.kind == "matrix" and mul.op == "aten.mul.Tensor"
    assert after[k].bytes_read + after[k].bytes_written + mul.bytes_read + mul.bytes_written == 3 * 16 * 344 * 4
    moved = sum(e.bytes_read + e.bytes_written for e in after if e.kind in ("vector", "data"))
    assert moved < sum(e.bytes_read + e.bytes_written for e in before if e.kind in ("vector", "data"))
