"""Roofline latency, worked by hand on small operators."""

from __future__ import annotations

import pytest
from torch import nn

import torch_footprint as tfp
from torch_footprint.estimate.kernels.roofline import estimate_latency as predict
from torch_footprint.hardware.db import Accelerator

# A made-up accelerator with round figures, so every number below can be checked by hand.
CARD = Accelerator(id="card", name="Card", vendor="nvidia", kind="gpu", memory_gb=1, bandwidth_gbs=100,
                   tflops={"fp32": 10.0, "tf32": 20.0, "fp16": 40.0}, source="https://example.com/card")
EXACT = {"matrix": 1.0, "vector": 1.0, "memory": 1.0}
FLAT = {"matrix": 0.7, "vector": 0.5, "memory": 0.85}  # efficiencies given: the flat datasheet roofline
LAUNCH = 10e-6  # seconds per operator on a GPU (module call, dispatch, launch)


def _only(pred, op):
    [o] = [o for o in pred.ops if o.op == op]
    return o


def test_small_matmul_is_memory_bound_by_hand():
    # x[64, 256] @ W.T[256, 512] in fp32:
    #   FLOPs = 2 x 64 x 256 x 512 = 16,777,216 -> 16,777,216 / 10e12 = 1.6777 us
    #   bytes = 4 x (64x256 + 256x512) read + 4 x 64x512 written = 720,896 -> / 100e9 = 7.20896 us
    #   time  = max(1.6777, 7.20896) us + 10 us per operator = 17.20896 us: the per-operator
    #   cost is the largest part ("overhead"-bound); with 1 us per operator it is memory-bound
    pred = predict(tfp.profile(nn.Linear(256, 512, bias=False), "64,256").trace, CARD, efficiency=EXACT)
    mm = _only(pred, "aten.mm.default")
    assert mm.compute_s == pytest.approx(16_777_216 / 10e12)
    assert mm.memory_s == pytest.approx(720_896 / 100e9)
    assert mm.time_s == pytest.approx(17.20896e-6)
    assert mm.bound == "overhead"
    quick = _only(predict(tfp.profile(nn.Linear(256, 512, bias=False), "64,256").trace, CARD, efficiency=EXACT,
                          overhead_s=1e-6), "aten.mm.default")
    assert quick.time_s == pytest.approx(8.20896e-6) and quick.bound == "memory"
    # the transpose is a view: no kernel, no time
    assert _only(pred, "aten.t.default").time_s == 0
    assert pred.time_s == pytest.approx(17.20896e-6)
    # the seed's lower bound: FLOPs / peak = 1.6777 us
    assert pred.lower_bound_s == pytest.approx(16_777_216 / 10e12)


def test_large_matmul_is_compute_bound_by_hand():
    # 2048^3: FLOPs 2 x 2048^3 = 17,179,869,184 -> 1.7180 ms at 10 TFLOPS;
    # bytes 3 x 2048^2 x 4 = 50,331,648 -> 0.5033 ms; time 1.7180 ms + 10 us
    pred = predict(tfp.profile(nn.Linear(2048, 2048, bias=False), "2048,2048").trace, CARD, efficiency=EXACT)
    mm = _only(pred, "aten.mm.default")
    assert mm.bound == "compute"
    assert mm.time_s == pytest.approx(2 * 2048**3 / 10e12 + LAUNCH)


def test_elementwise_by_hand_with_the_flat_efficiencies():
    # relu on 1024 x 1024 fp32: 1,048,576 FLOPs at 10e12 x 0.5 (vector) = 0.2097 us;
    # 8,388,608 bytes at 100e9 x 0.85 = 98.689 us; time = 98.689 + 10 = 108.689 us
    pred = predict(tfp.profile(nn.ReLU(), "1024,1024").trace, CARD, efficiency=FLAT)
    r = _only(pred, "aten.relu.default")
    assert r.compute_s == pytest.approx(1_048_576 / 5e12)
    assert r.time_s == pytest.approx(8_388_608 / 85e9 + LAUNCH)
    assert r.bound == "memory"


def test_fp32_convolution_runs_as_tf32_and_matmul_does_not():
    # torch.backends.cudnn.allow_tf32 is True by default, torch.backends.cuda.matmul.allow_tf32 False.
    # conv 16->32, 3x3, 2x16x8x8: MACs 2x32x8x8 x 16x9 = 589,824 -> 1,179,648 FLOPs at 20 TFLOPS (tf32)
    conv = tfp.profile(nn.Conv2d(16, 32, 3, padding=1, bias=False), "2,16,8,8").trace
    c = _only(predict(conv, CARD, efficiency=EXACT), "aten.convolution.default")
    assert c.compute_s == pytest.approx(1_179_648 / 20e12)
    c32 = _only(predict(conv, CARD, efficiency=EXACT, tf32=False), "aten.convolution.default")
    assert c32.compute_s == pytest.approx(1_179_648 / 10e12)
    # ROCm does not use TF32 (xf32) for fp32 unless asked
    from dataclasses import replace

    amd = _only(predict(conv, replace(CARD, vendor="amd"), efficiency=EXACT), "aten.convolution.default")
    assert amd.compute_s == pytest.approx(1_179_648 / 10e12)
    lin = tfp.profile(nn.Linear(256, 512, bias=False), "64,256").trace
    assert _only(predict(lin, CARD, efficiency=EXACT, tf32=True), "aten.mm.default").compute_s == \
        pytest.approx(16_777_216 / 20e12)


def test_dtype_rate_and_missing_dtype_fallback():
    lin = tfp.profile(nn.Linear(2048, 2048, bias=False), "2048,2048", precision="fp16").trace
    mm = _only(predict(lin, CARD, efficiency=EXACT), "aten.mm.default")
    assert mm.dtype == "fp16" and mm.compute_s == pytest.approx(2 * 2048**3 / 40e12)
    bf = tfp.profile(nn.Linear(64, 64, bias=False), "64,64", precision="bf16").trace
    pred = predict(bf, CARD, efficiency=EXACT)  # the card publishes no bf16 rate
    assert any("no published bf16 rate" in n for n in pred.notes)
    assert _only(pred, "aten.mm.default").compute_s == pytest.approx(2 * 64**3 / 10e12)


def test_module_totals_add_up_and_phases():
    model = nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    pred = tfp.predict(tfp.profile(model, "32,128", train=True), CARD, efficiency=EXACT)
    rows = {m.module: m for m in pred.by_module(1)}
    assert rows[""].time_s == pytest.approx(pred.time_s)
    assert sum(rows[k].time_s for k in ("0", "1", "2")) <= pred.time_s
    assert set(pred.by_phase()) >= {"forward", "backward"}


def test_predict_by_name_on_a_database_accelerator():
    pred = tfp.predict("resnet18", "a100-sxm-80gb", batch=8)
    # 8 x 1.814 GMACs (torchvision's published _ops) at 19.5 TFLOPS: the lower bound uses the main dtype's peak
    assert pred.flops > 2 * 8 * 1.81e9
    assert 0 < pred.lower_bound_s < pred.time_s
    # the seed's lower bound: all FLOPs at the datasheet's peak for the main dtype (TF32 for
    # the convolutions on NVIDIA: 156 TFLOPS dense on an A100 SXM)
    assert pred.main_dtype == "tf32" and pred.lower_bound_s == pytest.approx(pred.flops / 156e12)


def test_matmul_rate_by_rows_interpolates_in_log_rows() -> None:
    # a CPU's few-row matmuls (a decode step's) run far below its square rate: tables at 1 and 512 rows
    from torch_footprint.estimate.kernels.prediction import Ceilings

    c = Ceilings(matrix={"fp32": 1e10}, conv={}, vector=1e9, bandwidth=1e10, overhead=1e-6, source="calibrated",
                 matmul_by_rows={"fp32": {1: [[64, 1e9], [4096, 2e9]], 512: [[64, 4e9], [4096, 8e9]]}})
    assert c.matmul_rate(64, 1) == 1e9 and c.matmul_rate(64, 512) == 4e9 and c.matmul_rate(64, 4096) == 4e9
    # halfway in log rows (sqrt(512) rows) and in log K (K = 512): the means of the four corners
    assert abs(c.matmul_rate(512, round(512 ** 0.5)) - 3.75e9) < 0.02e9


def test_a_one_row_matmul_streams_its_matrix_at_the_calibrated_matvec_bandwidth() -> None:
    # Linear(4096 -> 1024) at one row: the 16 MiB weight read at 5 GB/s, not the 20 GB/s copy
    from dataclasses import replace

    cal = {"matmul_tflops": {"fp32": 0.1}, "conv_tflops": {"fp32": 0.1}, "copy_gbs": 20.0, "matvec_gbs": 5.0,
           "op_overhead_us": 0.0, "matmul_fp32_by_k": [[64, 0.1], [4096, 0.1]]}
    cpu = replace(CARD, id="cpu", kind="cpu", calibrated=cal)
    trace = tfp.profile(nn.Linear(4096, 1024, bias=False), "1,4096").trace
    [mm] = [o for o in predict(trace, cpu).ops if o.kind == "matrix"]
    weight, x, y = 4096 * 1024 * 4, 4096 * 4, 1024 * 4
    assert mm.bytes == weight + x + y
    assert abs(mm.memory_s - (weight + x + y) / 5e9) < 1e-12
    # eight rows: the copy bandwidth again
    trace8 = tfp.profile(nn.Linear(4096, 1024, bias=False), "8,4096").trace
    [mm8] = [o for o in predict(trace8, cpu).ops if o.kind == "matrix"]
    assert abs(mm8.memory_s - mm8.bytes / 20e9) < 1e-12


def test_a_calibrated_gpu_overlaps_the_hosts_dispatch_with_the_devices_kernels() -> None:
    # Three operators whose dispatch takes 10 us each on the host: a 50 us kernel first, then
    # two empty ones (or the other way round). Worked by hand with the two clocks: the host
    # is at 10, 20, 30 us; the device starts each kernel once launched and free.
    #   long first: device 10 + 50 = 60, then 60, 60    -> 60 us, the dispatch hidden
    #   long last:  device 10, 20, then 30 + 50 = 80    -> 80 us, nothing to hide it behind
    # A CPU runs them in line: 3 x 10 + 50 = 80 us in either order.
    from dataclasses import replace

    from torch_footprint.estimate.kernels.prediction import Ceilings, OpTime, Prediction

    def run(kernels: list[float], overlap: bool) -> Prediction:
        c = Ceilings(matrix={"fp32": 1e12}, conv={}, vector=1e12, bandwidth=1e12, overhead=10e-6,
                     source="calibrated", overlap=overlap)
        ops = [OpTime(i, "aten.mm", "", "forward", "matrix", "fp32", 0, 0, k, 0.0, 10e-6)
               for i, k in enumerate(kernels)]
        return Prediction(accelerator=CARD, ceilings=c, ops=ops, flops=0, main_dtype="fp32")

    first, last = run([50e-6, 0, 0], True), run([0, 0, 50e-6], True)
    assert first.time_s == pytest.approx(60e-6) and first.effective == pytest.approx([60e-6, 0, 0])
    assert last.time_s == pytest.approx(80e-6) and last.effective == pytest.approx([10e-6, 10e-6, 60e-6])
    assert run([50e-6, 0, 0], False).time_s == pytest.approx(80e-6) == run([0, 0, 50e-6], False).time_s
    assert sum(first.by_phase().values()) == pytest.approx(first.time_s)
    # calibrated GPUs and datasheet GPUs priced per kernel get the two clocks; the flat
    # datasheet roofline (efficiencies given) and CPUs keep the sum
    cal = {"matmul_tflops": {"fp32": 1.0}, "conv_tflops": {"fp32": 1.0}, "copy_gbs": 100.0, "op_overhead_us": 10.0}
    trace = tfp.profile(nn.Linear(8, 8), "1,8").trace
    assert predict(trace, replace(CARD, calibrated=cal)).ceilings.overlap
    assert predict(trace, CARD).ceilings.overlap and not predict(trace, CARD, efficiency=FLAT).ceilings.overlap
    assert not predict(trace, replace(CARD, kind="cpu", calibrated=cal)).ceilings.overlap


def test_few_row_products_stream_at_their_layouts_and_rows_calibrated_rate() -> None:
    # Linear(4096 -> 1024): nn.Linear hands addmm/mm its weight transposed ("t"); a calibration
    # that read 5 GB/s for one row and 2 GB/s for four in that layout prices one row at 5, four
    # at 2, two halfway in log rows (3.5); a plain x @ W ("n", no table here) at the one-row
    # figure of 8 GB/s
    from dataclasses import replace

    import torch

    cal = {"matmul_tflops": {"fp32": 0.1}, "conv_tflops": {"fp32": 0.1}, "copy_gbs": 20.0, "matvec_gbs": 8.0,
           "op_overhead_us": 0.0, "matmul_fp32_by_k": [[64, 0.1], [4096, 0.1]],
           "matvec_gbs_by_k": {"t": {"1": [[64, 5.0], [8192, 5.0]], "4": [[64, 2.0], [8192, 2.0]]}}}
    cpu = replace(CARD, id="cpu", kind="cpu", calibrated=cal)
    for rows, gbs in ((1, 5.0), (2, 3.5), (4, 2.0)):
        trace = tfp.profile(nn.Linear(4096, 1024, bias=False), f"{rows},4096").trace
        [mm] = [o for o in predict(trace, cpu).ops if o.kind == "matrix"]
        assert [e.transposed for e in trace.events if e.kind == "matrix"] == [True]
        assert mm.memory_s == pytest.approx(mm.bytes / (gbs * 1e9), rel=1e-9)

    class XW(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(4096, 1024))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.w

    trace = tfp.profile(XW(), "1,4096").trace
    [mm] = [o for o in predict(trace, cpu).ops if o.kind == "matrix"]
    assert [e.transposed for e in trace.events if e.kind == "matrix"] == [False]
    assert mm.memory_s == pytest.approx(mm.bytes / 8e9, rel=1e-9)


def test_a_calibrated_gpu_keeps_the_per_kernel_mechanisms_over_its_measured_plateaus() -> None:
    # An H100 row calibrated with made-up round figures. The measured plateaus replace the
    # datasheet's (bf16 matmuls at 500 TFLOP/s, copies at 2,000 GB/s); the mechanisms stay, so
    # a small GEMM is slower than the plateau, by the same factor either way. The host's probe
    # (12 us an operator) and tiny calls are not priced on a GPU: every operator keeps the
    # datasheet's host figure; on a CPU the probe is the figure.
    from dataclasses import replace

    import torch

    from torch_footprint.estimate.kernels import constants
    from torch_footprint.estimate.kernels.roofline import HOST_OP_S
    from torch_footprint.hardware.catalog import get

    h100 = get("h100-sxm")
    cal = {"matmul_tflops": {"bf16": 500.0, "fp32": 0.05}, "copy_gbs": 2000.0, "op_overhead_us": 12.0,
           "view_overhead_us": 2.0, "tiny_call_us": {"convolution": 30.0, "matmul": 10.0, "elementwise": 8.0}}
    gemm = tfp.profile(nn.Linear(256, 256, bias=False).to(torch.bfloat16), torch.ones(256, 256, dtype=torch.bfloat16))
    measured, datasheet = predict(gemm.trace, replace(h100, calibrated=cal)), predict(gemm.trace, h100)
    assert measured.ceilings.model == "kernels" and measured.ceilings.matrix["bf16"] == 500e12
    assert measured.ceilings.bandwidth == 2000e9
    floor = constants.current().kernel_floor_s
    mm_c, mm_d = _only(measured, "aten.mm.default"), _only(datasheet, "aten.mm.default")
    plateau = 2 * 256**3 / 500e12
    assert mm_c.compute_s - floor > 1.5 * plateau  # 4 tiles of 128 x 128 on 132 SMs: one thin wave
    assert (mm_c.compute_s - floor) / (mm_d.compute_s - floor) == pytest.approx(
        datasheet.ceilings.matrix["bf16"] / 500e12)
    conv = tfp.profile(nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()), "1,3,16,16").trace
    pred = predict(conv, replace(h100, calibrated=cal))
    assert _only(pred, "aten.convolution.default").overhead_s == HOST_OP_S
    assert _only(pred, "aten.relu.default").overhead_s == HOST_OP_S
    on_cpu = predict(conv, replace(h100, kind="cpu", calibrated=cal))
    assert _only(on_cpu, "aten.relu.default").overhead_s == pytest.approx(12e-6)


class _Scratch(nn.Module):
    """A forward that allocates a 64 MiB buffer it never fills."""

    def forward(self, x):
        buf = x.new_empty((16, 1024, 1024))
        return x * 2 + buf.sum() * 0


def test_an_allocation_launches_no_kernel_on_a_gpu():
    pred = tfp.predict(tfp.profile(_Scratch(), "8,8"), CARD, efficiency=EXACT)
    empty = _only(pred, "aten.new_empty.default")
    # the caching allocator hands out the block: no bytes moved, the host's dispatch alone
    assert empty.bytes == 64 * 2**20 + 8 * 8 * 4  # what it holds (and the shape's source it was given)
    assert empty.memory_s == empty.compute_s == empty.kernels_s == 0
    # the sum that reads the block does stream it: 64 MiB at 100 GB/s
    assert _only(pred, "aten.sum.default").memory_s == pytest.approx(64 * 2**20 / 100e9, rel=0.01)
