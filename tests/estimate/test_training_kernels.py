"""The kernels a GPU runs beyond the traced operators (estimate/gpu_kernels.py), worked by hand."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from torch import nn

import torch_footprint as tfp
from torch_footprint.cli import main
from torch_footprint.errors import FootprintError
from torch_footprint.estimate.kernels.roofline import estimate_latency as predict
from torch_footprint.estimate.workload import trace_step
from torch_footprint.hardware.db import Accelerator
from torch_footprint.settings import Training, Workload

# round figures so that every number can be checked by hand
CARD = Accelerator(id="card", name="Card", vendor="nvidia", kind="gpu", memory_gb=1, bandwidth_gbs=100,
                   tflops={"fp32": 10.0, "tf32": 20.0, "fp16": 40.0, "bf16": 40.0},
                   source="https://example.com/card")
EXACT = {"matrix": 1.0, "vector": 1.0, "memory": 1.0}


def _ops(pred, op):
    return [o for o in pred.ops if o.op == op]


def _conv(module: nn.Module, shape: str, dtype: str = "fp16"):
    [c] = _ops(predict(tfp.profile(module, shape, precision=dtype).trace, CARD, efficiency=EXACT),
               "aten.convolution.default")
    return c


def test_a_3x3_half_convolution_in_nchw_pays_its_transposes_by_hand():
    # conv 16->32, 3x3, input 2x16x8x8 in fp16 (2 bytes):
    #   input 2x16x8x8x2 = 4,096 B, weight 32x16x3x3x2 = 9,216 B, output 2x32x8x8x2 = 8,192 B
    #   -> the convolution moves 21,504 B; each transpose reads and writes its tensor:
    #   2 x 21,504 = 43,008 B more, at 100 GB/s = 0.43008 us, in kernels of their own
    conv = nn.Conv2d(16, 32, 3, padding=1, bias=False)
    trace = tfp.profile(conv, "2,16,8,8", precision="fp16").trace
    [c] = _ops(predict(trace, CARD, efficiency=EXACT), "aten.convolution.default")
    assert c.bytes == 4_096 + 9_216 + 8_192
    assert c.kernels_s == pytest.approx(43_008 / 100e9)
    assert c.time_s == pytest.approx(max(c.compute_s, c.memory_s) + 43_008 / 100e9 + c.overhead_s)
    for layout in ("nhwc", "channels_last", "NHWC"):  # channels-last tensors need none
        [n] = _ops(predict(trace, CARD, efficiency=EXACT, layout=layout), "aten.convolution.default")
        assert n.kernels_s == 0 and n.time_s == pytest.approx(c.time_s - 43_008 / 100e9)


def test_which_convolutions_are_transposed():
    # a 1x1 stride-1 convolution is a matrix product over NCHW as it lies: no transposes,
    # with or without a bias; a strided 1x1 one is transposed
    assert _conv(nn.Conv2d(16, 32, 1, bias=False), "2,16,8,8").kernels_s == 0
    assert _conv(nn.Conv2d(16, 32, 1), "2,16,8,8").kernels_s == 0
    # stride 2: input 2x16x8x8x2 = 4,096 B, weight 32x16x2 = 1,024 B, output 2x32x4x4x2 = 2,048 B
    assert _conv(nn.Conv2d(16, 32, 1, stride=2, bias=False), "2,16,8,8").kernels_s == \
        pytest.approx(2 * (4_096 + 1_024 + 2_048) / 100e9)
    # fp32 runs as TF32 on tensor cores (cudnn.allow_tf32) and is transposed: 4-byte tensors,
    # 2 x (8,192 + 18,432 + 16,384) = 86,016 B; without TF32, NCHW kernels: none
    conv = nn.Conv2d(16, 32, 3, padding=1, bias=False)
    assert _conv(conv, "2,16,8,8", "fp32").kernels_s == pytest.approx(86_016 / 100e9)
    trace = tfp.profile(conv, "2,16,8,8").trace
    [plain] = _ops(predict(trace, CARD, efficiency=EXACT, tf32=False), "aten.convolution.default")
    assert plain.kernels_s == 0
    # not on other vendors' GPUs, nor on CPUs
    for other in (replace(CARD, vendor="amd"), replace(CARD, kind="cpu")):
        [c] = _ops(predict(tfp.profile(conv, "2,16,8,8", precision="fp16").trace, other, efficiency=EXACT),
                   "aten.convolution.default")
        assert c.kernels_s == 0


def test_a_convolution_backward_transposes_every_tensor():
    # backward of the 3x3 conv above in fp16, the input needing no gradient: the weight
    # gradient reads the output gradient (8,192 B) and the input (4,096 B) and writes the
    # weight gradient (9,216 B): at least 21,504 B; every tensor is transposed: twice its
    # bytes more, in kernels of their own
    trace = tfp.profile(nn.Conv2d(16, 32, 3, padding=1, bias=False), "2,16,8,8", precision="fp16",
                        train=True).trace
    [b] = _ops(predict(trace, CARD, efficiency=EXACT), "aten.convolution_backward.default")
    assert b.bytes >= 8_192 + 4_096 + 9_216
    assert b.kernels_s == pytest.approx(2 * b.bytes / 100e9)


def test_batch_norm_in_training_passes_twice_over_its_tensors():
    # BatchNorm2d(8) on 4x8x16x16 fp32: the activation is 4x8x16x16x4 = 32,768 B. Training: the
    # forward reads it once more (statistics, then normalisation): +32,768 B; the backward reads
    # the input and the output gradient once more: +65,536 B. Inference: one pass, as traced.
    bn = nn.BatchNorm2d(8)
    train = predict(tfp.profile(bn, "4,8,16,16", train=True).trace, CARD, efficiency=EXACT)
    [fwd] = _ops(train, "aten.native_batch_norm.default")
    [bwd] = _ops(train, "aten.native_batch_norm_backward.default")
    assert fwd.memory_s == pytest.approx((fwd.bytes + 32_768) / 100e9)
    assert bwd.memory_s == pytest.approx((bwd.bytes + 65_536) / 100e9)
    infer = predict(tfp.profile(bn, "4,8,16,16").trace, CARD, efficiency=EXACT)
    for o in infer.ops:
        if "batch_norm" in o.op:
            assert o.memory_s == pytest.approx(o.bytes / 100e9)


def test_bf16_batch_norm_in_nchw_runs_pytorchs_slower_kernels():
    # bf16 batch norms go to PyTorch's own kernels (cuDNN is not used for bf16); in NCHW they
    # took 61.8 ms where the channels-last ones took 27.3 ms on an H100 (ResNet-50, batch 256)
    trace = tfp.profile(nn.BatchNorm2d(8), "4,8,16,16", precision="bf16", train=True).trace
    nchw = predict(trace, CARD, efficiency=EXACT)
    nhwc = predict(trace, CARD, efficiency=EXACT, layout="nhwc")
    for op in ("aten.native_batch_norm.default", "aten.native_batch_norm_backward.default"):
        [a], [b] = _ops(nchw, op), _ops(nhwc, op)
        assert a.memory_s == pytest.approx(b.memory_s * 61.8 / 27.3)


def test_optimizer_state_made_in_the_first_step_is_not_a_steps_time():
    # AdamW's first step makes exp_avg and exp_avg_sq with zeros_like for each parameter
    # (weight and bias of one Linear: 4); a steady-state step does not
    trace, _ = trace_step(Workload(nn.Linear(64, 64), "8,64"), Training(train=True, optimizer="adamw"))
    pred = predict(trace, CARD, efficiency=EXACT)
    made = [o for o in pred.ops if o.phase == "optimizer" and o.op.startswith("aten.zeros_like")]
    assert len(made) == 4 and all(o.time_s == 0 for o in made)
    assert any(o.time_s > 0 for o in pred.ops if o.phase == "optimizer")


def test_an_unknown_layout_is_refused():
    trace = tfp.profile(nn.Conv2d(3, 4, 3), "1,3,8,8").trace
    with pytest.raises(FootprintError, match="layout"):
        predict(trace, CARD, layout="nhcw")


def test_channels_last_from_the_api_and_the_command_line(tmp_path, capsys):
    # a half-precision ResNet-18 in NCHW pays its transposes; channels-last does not
    nchw = tfp.predict("resnet18", "a100-sxm-80gb", batch=2, precision="fp16")
    nhwc = tfp.predict("resnet18", "a100-sxm-80gb", batch=2, precision="fp16", channels_last=True)
    paid = sum(o.kernels_s for o in nchw.ops)
    assert paid > 0 and sum(o.kernels_s for o in nhwc.ops) == 0
    def device(pred):  # the device's time, kernel after kernel (the host's overlaps it)
        return sum(max(o.compute_s, o.memory_s) + o.kernels_s for o in pred.ops if o.kind != "view")

    # and cuDNN's fp16 batch norm in NCHW its own rate, below an A100's memory's
    # (gpu.CUDNN_NCHW_BATCH_NORM_BPS)
    bns = [(a, b) for a, b in zip(nchw.ops, nhwc.ops, strict=True) if "batch_norm" in a.op]
    slower = sum(a.memory_s - b.memory_s for a, b in bns)
    assert len(bns) == 20 and all(a.memory_s > b.memory_s for a, b in bns)
    # at batch 2 the host dispatches slower than the device runs: the transposes hide behind it
    assert device(nchw) == pytest.approx(device(nhwc) + paid + slower) and nchw.time_s >= nhwc.time_s
    out = tmp_path / "p.json"
    assert main(["predict", "resnet18", "--gpu", "a100-sxm-80gb", "--batch", "2", "--dtype", "fp16",
                 "--channels-last", "--json", str(out)]) == 0
    capsys.readouterr()
    doc = json.loads(out.read_text())
    assert doc["time_s"] == pytest.approx(nhwc.time_s)
