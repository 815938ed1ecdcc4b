"""A calibrated CPU's operators, worked by hand: each kind of operator pays its tiny call's
cost beyond the generic per-operator figure, a depthwise convolution runs at its own table's
rate, a bf16 decode product streams at the bf16 table's bytes per second, and no utilisation
printed goes over 100%."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

import torch_footprint as tfp
from torch_footprint.estimate.kernels.cpu import extra_costs, op_kind
from torch_footprint.estimate.kernels.roofline import estimate_latency as predict
from torch_footprint.hardware.db import Accelerator

TINY = str(Path(__file__).parents[1] / "configs" / "llama-tiny")
CPU = Accelerator(id="cpu", name="CPU", vendor="local", kind="cpu", memory_gb=16, bandwidth_gbs=20,
                  tflops={"fp32": 0.2}, source="https://example.com/cpu")
BASE = {"matmul_tflops": {"fp32": 0.1}, "conv_tflops": {"fp32": 0.1}, "copy_gbs": 20.0, "op_overhead_us": 5.0,
        "matmul_fp32_by_k": [[64, 0.1], [4096, 0.1]]}


def _cpu(**cal: object) -> Accelerator:
    return replace(CPU, calibrated={**BASE, **cal})


@pytest.mark.parametrize("op, problem, kind", [
    ("aten.convolution.default", ("conv", 1, 64, 64, 3, 3, 1), "convolution"),
    ("aten.convolution.default", ("conv", 1, 96, 96, 3, 3, 96), "depthwise"),
    ("aten.convolution.default", ("conv", 1, 64, 64, 3, 9, 8, "forward"), "grouped"),
    ("aten.convolution_backward.default", ("conv", 1, 64, 64, 3, 9, 8, "backward"), "grouped"),
    ("aten.native_batch_norm.default", (), "batch_norm"),
    ("aten._native_batch_norm_legit_no_training.default", (), "batch_norm"),
    ("aten.native_layer_norm.default", (), "norm"),
    ("aten.max_pool2d_with_indices.default", (), "pool"),
    ("aten._softmax.default", (), "softmax"),
    ("aten.mean.dim", (), "reduction"),
    ("aten.addmm.default", (), "matmul"),
    ("aten.mm.default", (), "matmul"),
    ("aten.gelu.default", (), "activation"),
    ("aten.cat.default", (), "copy"),
    ("aten.relu_.default", (), "elementwise"),
    ("aten.add.Tensor", (), "elementwise"),
])
def test_operators_fall_in_their_kind(op: str, problem: tuple, kind: str) -> None:
    assert op_kind(op, problem) == kind


def test_extra_cost_is_beyond_the_generic_calls() -> None:
    # the generic figure comes from tiny linears and ReLUs: 6 and 2 us, mean 4 us
    assert extra_costs({"matmul": 6.0, "elementwise": 2.0, "convolution": 30.0, "copy": 1.0}) == {
        "matmul": 2.0, "elementwise": 0.0, "convolution": 26.0, "copy": 0.0}


def test_a_convolution_pays_its_kinds_cost_and_a_relu_does_not() -> None:
    cpu = _cpu(tiny_call_us={"matmul": 6.0, "elementwise": 2.0, "convolution": 30.0, "batch_norm": 12.0})
    model = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).eval()
    ops = {o.op: o for o in predict(tfp.profile(model, "1,8,8,8").trace, cpu).ops if o.kind != "view"}
    assert ops["aten.convolution.default"].overhead_s == pytest.approx((5.0 + 26.0) * 1e-6)
    assert ops["aten.relu.default"].overhead_s == pytest.approx(5.0e-6)
    [bn] = [o for name, o in ops.items() if "batch_norm" in name]
    assert bn.overhead_s == pytest.approx((5.0 + 8.0) * 1e-6)


def test_a_grouped_convolution_pays_its_own_call() -> None:
    # generic figure 5 us; the tiny calls: linear 6 and ReLU 2 (mean 4), dense convolution 30,
    # grouped 94: a grouped convolution pays 5 + 90 us, a dense one 5 + 26 us
    tiny = {"matmul": 6.0, "elementwise": 2.0, "convolution": 30.0, "grouped": 94.0}
    grouped, dense = nn.Conv2d(64, 64, 3, padding=1, groups=8), nn.Conv2d(64, 64, 3, padding=1)
    for conv, extra in ((grouped, 90.0), (dense, 26.0)):
        [o] = [o for o in predict(tfp.profile(conv, "1,64,14,14").trace, _cpu(tiny_call_us=tiny)).ops
               if o.kind != "view"]
        assert o.overhead_s == pytest.approx((5.0 + extra) * 1e-6)
    # a calibration made before the grouped call was timed: the dense convolution's call, as before
    old = {k: v for k, v in tiny.items() if k != "grouped"}
    [o] = [o for o in predict(tfp.profile(grouped, "1,64,14,14").trace, _cpu(tiny_call_us=old)).ops
           if o.kind != "view"]
    assert o.overhead_s == pytest.approx((5.0 + 26.0) * 1e-6)


def test_calibrate_times_a_grouped_call() -> None:
    from torch_footprint.estimate.kernels.cpu import tiny_kinds

    calls = tiny_kinds()
    assert "grouped" in calls
    seen: list[int] = []
    real = torch.nn.functional.conv2d

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(int(kwargs.get("groups", 1)))  # type: ignore[call-overload]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    torch.nn.functional.conv2d = spy  # type: ignore[assignment]
    try:
        out = calls["grouped"]()
    finally:
        torch.nn.functional.conv2d = real
    # 16 channels in 2 groups of 8: neither depthwise nor dense
    assert seen == [2] and tuple(out.shape) == (1, 16, 8, 8)  # type: ignore[attr-defined]


def test_a_depthwise_convolution_runs_at_its_own_tables_rate() -> None:
    # 96 channels, 3x3 depthwise at 56x56, batch 1: 2 x 96 x 9 x 56^2 FLOPs at 5 GFLOP/s (K = 9),
    # not the dense table's 100 GFLOP/s
    cpu = _cpu(conv_fp32_by_batch_k={"1": [[9, 0.1], [576, 0.1]]},
               depthwise_fp32_by_batch_k={"1": [[9, 0.005], [49, 0.01]]})
    conv = nn.Conv2d(96, 96, 3, padding=1, groups=96, bias=False)
    [o] = [o for o in predict(tfp.profile(conv, "1,96,56,56").trace, cpu).ops if o.kind == "matrix"]
    assert o.compute_s == pytest.approx(2 * 96 * 9 * 56 * 56 / 5e9)
    dense = nn.Conv2d(96, 96, 3, padding=1, bias=False)
    [o] = [o for o in predict(tfp.profile(dense, "1,96,56,56").trace, cpu).ops if o.kind == "matrix"]
    assert o.compute_s == pytest.approx(2 * 96 * 96 * 9 * 56 * 56 / 1e11)


def test_a_strided_1x1_convolution_runs_at_the_strided_tables_rate() -> None:
    # ResNet's shortcut: 1x1, 64 -> 128 channels, stride 2 on 1x64x56x56, batch 1: 28 x 28
    # outputs, 2 x 128 x 64 x 784 FLOPs at the strided table's 25 GFLOP/s (K = 64), not the
    # stride-1 table's 100 GFLOP/s
    cpu = _cpu(conv_fp32_by_batch_k={"1": [[9, 0.1], [576, 0.1]]},
               conv_fp32_strided_by_batch_k={"1": [[64, 0.025], [1024, 0.05]]})
    flops = 2 * 128 * 64 * 28 * 28
    for stride, spatial, rate in ((2, 56, 25e9), (1, 28, 1e11)):  # the same work at stride 1 on 28x28
        conv = nn.Conv2d(64, 128, 1, stride=stride, bias=False)
        [o] = [o for o in predict(tfp.profile(conv, f"1,64,{spatial},{spatial}").trace, cpu).ops
               if o.kind == "matrix"]
        assert o.compute_s == pytest.approx(flops / rate)
    # a 3x3 convolution of stride 2 stays on the stride-1 table: 2 x 128 x 576 x 784 FLOPs at 100 GFLOP/s
    conv = nn.Conv2d(64, 128, 3, stride=2, padding=1, bias=False)
    [o] = [o for o in predict(tfp.profile(conv, "1,64,56,56").trace, cpu).ops if o.kind == "matrix"]
    assert o.compute_s == pytest.approx(2 * 128 * 576 * 784 / 1e11)


def test_downsampling_is_read_from_the_bytes_a_convolution_reads() -> None:
    from torch_footprint.estimate.kernels.cpu import downsamples

    # 1x1, 64 -> 128, no bias: reads 64 x 56 x 56 inputs and 128 x 64 weights, writes 28 x 28
    # positions: 3136 input positions per channel over 784 output ones, 4 per output
    problem = ("conv", 1, 64, 128, 0, 1, 1, "forward")
    assert downsamples(problem, 4 * (64 * 56 * 56 + 128 * 64), (1, 128, 28, 28))
    assert not downsamples(problem, 4 * (64 * 28 * 28 + 128 * 64), (1, 128, 28, 28))  # stride 1
    assert not downsamples(("conv", 1, 64, 128, 0, 9, 1, "forward"), 4 * (64 * 56 * 56 + 128 * 64 * 9),
                           (1, 128, 28, 28))  # 3x3: the stride-1 table holds
    assert not downsamples(("gemm", 1, 64, 128, 64), 4 * 64 * 64, (64, 128))


def test_a_pool_walks_its_window_at_the_calibrated_pooling_rate() -> None:
    # max pool 3x3 stride 2 on 1x24x112x112: 24 x 56 x 56 outputs of 9 window elements each =
    # 677,376 compares, at 2e8 window elements/s (calibrated) = 3.387 ms, not at the 1e11 vector rate
    # (0.007 ms); the average pool at its own 5e8/s; a ReLU stays at the vector rate
    cpu = _cpu(pooling_per_s={"max": 2e8, "avg": 5e8})
    model = nn.Sequential(nn.MaxPool2d(3, 2, 1), nn.AvgPool2d(3, 1, 1), nn.ReLU()).eval()
    ops = {o.op: o for o in predict(tfp.profile(model, "1,24,112,112").trace, cpu).ops if o.kind != "view"}
    [mx] = [o for name, o in ops.items() if "max_pool" in name]
    assert mx.compute_s == pytest.approx(9 * 24 * 56 * 56 / 2e8)
    assert ops["aten.avg_pool2d.default"].compute_s == pytest.approx(9 * 24 * 56 * 56 / 5e8)
    assert ops["aten.relu.default"].compute_s == pytest.approx(24 * 56 * 56 / 1e11)
    # an older calibration without pooling rates: the vector rate, as before
    [mx] = [o for o in predict(tfp.profile(model, "1,24,112,112").trace, _cpu()).ops if "max_pool" in o.op]
    assert mx.compute_s == pytest.approx(9 * 24 * 56 * 56 / 1e11)


def test_a_bf16_decode_product_streams_at_the_bf16_tables_bytes_per_second() -> None:
    # Linear(4096 -> 1024) in bf16 at one row: 8 MiB of weights at 6 GB/s (the bf16 table), where the
    # fp32 table says 12 GB/s: a CPU's bf16 product is not twice as fast as its fp32 one
    cpu = _cpu(matvec_gbs_by_k={"t": {"1": [[512, 12.0], [8192, 12.0]]}},
               matvec_bf16_gbs_by_k={"t": {"1": [[512, 6.0], [8192, 6.0]]}},
               matmul_tflops={"fp32": 0.1, "bf16": 0.2})
    trace = tfp.profile(nn.Linear(4096, 1024, bias=False), "1,4096", precision="bf16").trace
    [mm] = [o for o in predict(trace, cpu).ops if o.kind == "matrix"]
    assert mm.bytes == 2 * (4096 * 1024 + 4096 + 1024)
    assert mm.memory_s == pytest.approx(mm.bytes / 6e9)
    # without a bf16 table (an older calibration), fp32's bytes per second, not the copy's
    cpu = _cpu(matvec_gbs_by_k={"t": {"1": [[512, 12.0], [8192, 12.0]]}}, matmul_tflops={"fp32": 0.1, "bf16": 0.2})
    [mm] = [o for o in predict(trace, cpu).ops if o.kind == "matrix"]
    assert mm.memory_s == pytest.approx(mm.bytes / 12e9)


def test_model_flops_utilisation_is_never_above_100_percent() -> None:
    # a calibrated bf16 rate five times the CPU's theoretical fp32 peak: the prefill is timed at it,
    # and its MFU is taken against it, not against the fp32 peak
    from torch_footprint.estimate.llm.pricing import Priced, serve
    from torch_footprint.estimate.llm.quantization import weight_scheme
    from torch_footprint.estimate.llm.trace import trace_serving

    cpu = _cpu(matmul_tflops={"fp32": 0.1, "bf16": 1.0}, matmul_bf16_by_rows_k={"16": [[64, 1.0], [3072, 1.0]]},
               op_overhead_us=0.0, copy_gbs=1000.0)  # no per-operator cost: the prefill is compute-bound
    st = trace_serving(TINY, batch=1, prompt=256, dtype="bf16")
    res = serve(st, Priced(batch=1, prompt=256, output=8, weights=weight_scheme("bf16")), [cpu], max_context=None)
    [row] = res.rows
    assert res.prefill_flops / row.ttft_s > 4 * 0.2e12  # four times the theoretical fp32 peak
    assert 0.5 < row.mfu <= 1.0 and 0 < row.mbu <= 1.0


def test_a_linear_layer_runs_at_the_linear_tables_rate() -> None:
    # nn.Linear(256 -> 512) over 512 rows: 2 x 512 x 256 x 512 FLOPs at the F.linear table's 50 GFLOP/s
    # (K = 256, 512 rows), not the plain matmul table's 100; at 2,048 rows, halfway in log rows between
    # the 512- and 4,096-row tables (50 and 20 GFLOP/s: 1/3 of the way, 40 GFLOP/s)
    cpu = _cpu(matmul_fp32_by_rows_k={"64": [[64, 0.1], [4096, 0.1]]},
               linear_fp32_by_rows_k={"64": [[64, 0.05], [4096, 0.05]], "512": [[64, 0.05], [4096, 0.05]],
                                      "4096": [[64, 0.02], [4096, 0.02]]})
    lin = nn.Linear(256, 512)
    for rows, rate in ((512, 5e10), (4096, 2e10)):
        [o] = [o for o in predict(tfp.profile(lin, f"{rows},256").trace, cpu).ops if o.kind == "matrix"]
        assert o.compute_s == pytest.approx(2 * rows * 256 * 512 / rate + rows * 512 / 1e11)  # and the bias add
    [o] = [o for o in predict(tfp.profile(lin, "2048,256").trace, cpu).ops if o.kind == "matrix"]
    third = 5e10 + (2e10 - 5e10) * (11 - 9) / (12 - 9)  # log2 rows: 9, 11, 12
    assert o.compute_s == pytest.approx(2 * 2048 * 256 * 512 / third + 2048 * 512 / 1e11)
    # an activation times a weight it did not transpose stays on the plain table
    w = torch.randn(256, 512)
    [o] = [o for o in predict(tfp.profile(_Matmul(w), "512,256").trace, cpu).ops if o.kind == "matrix"]
    assert o.compute_s == pytest.approx(2 * 512 * 256 * 512 / 1e11)


class _Matmul(nn.Module):
    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


def test_a_grouped_convolution_runs_at_the_grouped_tables_rate() -> None:
    # RegNet's 3x3 of 8 channels a group: 128 channels, 16 groups, 1x128x56x56: 2 x 128 x 72 x 56^2
    # FLOPs at the grouped table's 20 GFLOP/s (K = 72), not the dense table's 100
    cpu = _cpu(conv_fp32_by_batch_k={"1": [[9, 0.1], [576, 0.1]]},
               conv_fp32_grouped_by_batch_k={"1": [[72, 0.02], [432, 0.04]]})
    conv = nn.Conv2d(128, 128, 3, padding=1, groups=16, bias=False)
    [o] = [o for o in predict(tfp.profile(conv, "1,128,56,56").trace, cpu).ops if o.kind == "matrix"]
    assert o.compute_s == pytest.approx(2 * 128 * 72 * 56 * 56 / 2e10)
