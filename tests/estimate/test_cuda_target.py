"""A step traced for an NVIDIA GPU follows what PyTorch does there, not what it does on the CPU
that traces it: nn.MultiheadAttention's path under autocast, torch.optim's multi-tensor default,
the optimizer's step counts read on the host, and layer norm's block per row."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

import torch_footprint as tfp
from torch_footprint.api import _records
from torch_footprint.estimate.kernels.gpu import norm_rows, norm_rows_s
from torch_footprint.estimate.kernels.roofline import estimate_latency
from torch_footprint.estimate.workload import trace_step
from torch_footprint.trace.records import OpEvent

H100 = (9, 0)


class Attention(nn.Module):
    """A transformer block's attention, as torchvision's ViT calls it (batch first, no weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(64, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mha(x, x, x, need_weights=False)[0]


def _ops(model, inputs, sm, **settings):
    w, t = _records("profile", settings, model, inputs)
    return [e.op for e in trace_step(w, t, cuda_sm=sm)[0].events]


def test_multihead_attention_under_autocast_leaves_the_fast_path_on_a_cuda_target_only():
    # torch/nn/modules/activation.py, MultiheadAttention.forward: the fused
    # _native_multi_head_attention runs in eval without grad unless torch.is_autocast_enabled()
    # (CUDA's flag) is set, "autocast is enabled"; a CPU under CPU autocast keeps it
    cpu = _ops(Attention().eval(), "2,16,64", None, precision="fp16-mixed")
    cuda = _ops(Attention().eval(), "2,16,64", H100, precision="fp16-mixed")
    assert "aten._native_multi_head_attention.default" in cpu
    assert "aten._native_multi_head_attention.default" not in cuda
    assert any("scaled_dot_product" in op for op in cuda)  # multi_head_attention_forward's SDPA
    assert not torch.is_autocast_enabled("cuda")  # the flag is put back


def test_adamw_on_a_cuda_target_is_the_multi_tensor_implementation():
    # torch/optim/optimizer.py, _default_to_fused_or_foreach: foreach when every parameter is on
    # a device with foreach kernels (CUDA), the loop over parameters on the CPU
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    cpu = _ops(model, "4,8", None, train=True, optimizer="adamw")
    cuda = _ops(model, "4,8", H100, train=True, optimizer="adamw")
    assert not any(op.startswith("aten._foreach_") for op in cpu)
    assert cpu.count("aten.addcdiv_.default") == 4  # one per parameter tensor
    assert "aten._foreach_addcdiv_.ScalarList" in cuda
    assert "aten.addcdiv_.default" not in cuda


def test_the_optimizers_step_counts_are_read_on_the_host_without_a_kernel():
    # the multi-tensor AdamW reads each step count with .item() for its bias corrections; the
    # counts live on the CPU (torch.tensor(0.0) in _init_group), so a GPU runs nothing for them
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    pred = tfp.predict(model, "h100-sxm", "4,8", train=True, optimizer="adamw")
    reads = [o for o in pred.ops if o.op == "aten._local_scalar_dense.default"]
    assert len(reads) == 8  # two per parameter tensor (beta1 and beta2 corrections)
    assert all(o.device_s == 0.0 and o.overhead_s > 0 for o in reads)


def _norm(rows_shape: list[int], width: int, op: str = "aten.native_layer_norm.default") -> OpEvent:
    return OpEvent(op=op, module="ln", phase="forward", flops=0, macs=0, kind="vector", bytes_read=0,
                   bytes_written=0, out_shapes=[[*rows_shape, width], [*rows_shape, 1], [*rows_shape, 1]],
                   out_dtypes=["float32"] * 3)


def test_a_layer_norm_over_narrow_rows_waits_on_its_blocks_by_hand():
    # ConvNeXt-T's first stage at batch 256: 256 x 56 x 56 = 802,816 rows of 96 channels.
    # One block of 128 threads per row; an H100 SM holds 2048 threads = 16 blocks, 132 SMs hold
    # 2,112 at once: 802,816 / 2,112 = 380.12 waves x 3.56 us = 1.35324 ms
    e = _norm([256, 56, 56], 96)
    assert norm_rows(e) == (802_816, "forward")
    assert norm_rows_s(e, 132, H100) == pytest.approx(802_816 / 2112 * 3.56e-6)
    # an RTX 4090 (compute capability 8.9) holds 1536 threads = 12 blocks per SM, 128 SMs
    assert norm_rows_s(e, 128, (8, 9)) == pytest.approx(802_816 / (128 * 12) * 3.56e-6)
    assert norm_rows_s(e, 132, None) == 0.0  # not an NVIDIA GPU


def test_the_backwards_rows_are_its_input_over_its_weight():
    # native_layer_norm_backward's outputs: grad_input [rows..., width], grad_weight [width]
    e = OpEvent(op="aten.native_layer_norm_backward.default", module="ln", phase="backward", flops=0, macs=0,
                kind="vector", bytes_read=0, bytes_written=0, out_shapes=[[8, 10, 96], [96], [96]],
                out_dtypes=["float32"] * 3)
    assert norm_rows(e) == (80, "backward")
    assert norm_rows_s(e, 132, H100) == pytest.approx(80 / 2112 * 2.11e-6)


def test_the_block_floor_prices_a_layer_norm_above_its_bytes_on_an_h100():
    # a LayerNorm over 96 channels of 4 x 56 x 56 rows in fp32: 12,544 rows,
    # 1,204,224 elements read and written (8 bytes each with the affine weights' few) -> ~9.6 MB,
    # 3.2 us at the H100's 3.35 TB/s; its blocks take 12,544 / 2,112 x 3.56 us = 21.14 us
    trace = tfp.profile(nn.LayerNorm(96), "4,56,56,96").trace
    [ln] = [o for o in estimate_latency(trace, tfp.hardware.get("h100-sxm")).ops
            if o.op == "aten.native_layer_norm.default"]
    assert ln.memory_s >= 12_544 / 2112 * 3.56e-6
    assert ln.device_s == pytest.approx(max(ln.compute_s, ln.memory_s))


def test_cudnns_half_precision_batch_norm_in_nchw_runs_at_its_own_rate():
    # cuDNN's NCHW fp16 batch norm is "about a factor of 2" slower than NHWC on an H100
    # (cudnn-frontend issue 134); an H100 ran ResNet-50's 53 of them at 11.38 GB / 8.85 ms =
    # 1.2859 TB/s. An fp16 batch norm in eval on 2 x 8 x 4 x 4 = 256 values reads 512 B and
    # writes 512 B, plus its four 8-value fp32 statistics and weights (128 B): 1,152 B
    from tests.estimate.test_training_kernels import CARD, EXACT

    trace = tfp.profile(nn.BatchNorm2d(8).eval().half(), "2,8,4,4:float16").trace

    def bn(card, layout):
        [o] = [o for o in estimate_latency(trace, card, efficiency=EXACT, layout=layout).ops if "batch_norm" in o.op]
        return o

    fast = replace(CARD, bandwidth_gbs=3000)  # HBM above that rate: 1,152 B at 1.2859 TB/s, not 3 TB/s
    assert bn(fast, "nchw").bytes == bn(fast, "nhwc").bytes == 1152
    assert bn(fast, "nchw").memory_s - bn(fast, "nhwc").memory_s == pytest.approx(1152 / (11.38e9 / 8.85e-3)
                                                                                  - 1152 / 3000e9)
    # a card streaming 100 GB/s, slower than that rate: both layouts at its memory's rate
    assert bn(CARD, "nchw").memory_s == pytest.approx(bn(CARD, "nhwc").memory_s)


class _Seen(torch.utils._python_dispatch.TorchDispatchMode):
    """The operators a call reaches, as the dispatcher sends them."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(f"{func.namespace}.{func._overloadpacket.__name__}")
        return func(*args, **(kwargs or {}))


RMS_DTYPES = [(torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32), (torch.float32, None),
              (torch.float16, torch.float16), (torch.float32, torch.bfloat16)]


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
@pytest.mark.parametrize(("x_dtype", "w_dtype"), RMS_DTYPES)
def test_rms_norm_for_a_cuda_target_takes_the_kernel_cudas_dispatcher_takes(x_dtype, w_dtype):
    from torch._subclasses.fake_tensor import FakeTensorMode

    from torch_footprint.trace.cuda_ops import cuda_rms_norm

    with FakeTensorMode(allow_non_fake_inputs=True):  # CUDA tensors without a GPU: torch's own choice
        x = torch.empty(4, 8, device="cuda", dtype=x_dtype)
        w = torch.empty(8, device="cuda", dtype=w_dtype) if w_dtype else None
        with _Seen() as cuda:
            torch.nn.functional.rms_norm(x, (8,), w)
    x = torch.empty(4, 8, device="meta", dtype=x_dtype)
    w = torch.empty(8, device="meta", dtype=w_dtype) if w_dtype else None
    with _Seen() as traced:
        cuda_rms_norm(torch.nn.functional.rms_norm)(x, (8,), w)
    assert ("aten._fused_rms_norm" in cuda.ops) == ("footprint._fused_rms_norm" in traced.ops)
    assert ("aten.rsqrt" in cuda.ops) == ("aten.rsqrt" in traced.ops)


def test_rms_norms_stand_in_computes_what_the_composite_does():
    from torch_footprint.trace.cuda_ops import cuda_rms_norm

    torch.manual_seed(0)
    x = torch.randn(3, 5, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    y = cuda_rms_norm(torch.nn.functional.rms_norm)(x, 16, w, 1e-6)
    y.square().sum().backward()
    gx, gw = x.grad, w.grad
    x.grad = w.grad = None
    ref = torch.nn.functional.rms_norm(x, (16,), w, 1e-6)
    ref.square().sum().backward()
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gw, w.grad)


class Normed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(64, 64, bias=False)
        self.norm = nn.RMSNorm(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.lin(x))


def test_nn_rmsnorm_on_a_cuda_target_is_one_kernel_each_way():
    w, t = _records("profile", {"train": True, "optimizer": "sgd", "precision": "bf16"},
                    Normed().to(torch.bfloat16), "4,16,64:bfloat16")
    cuda = trace_step(w, t, cuda_sm=H100)[0].events
    cpu = [e.op for e in trace_step(w, t)[0].events]
    assert "aten.rsqrt.default" in cpu and "aten._fused_rms_norm.default" not in cpu
    ops = [e.op for e in cuda]
    assert ops.count("aten._fused_rms_norm.default") == 1
    assert ops.count("aten._fused_rms_norm_backward.default") == 1
    assert not {"aten.rsqrt.default", "aten.pow.Tensor_Scalar", "aten.mean.dim"} & set(ops)
    # by hand: the kernel writes the output (4 x 16 x 64 bf16) and one fp32 reciprocal root mean
    # square per row (4 x 16), which it keeps for the backward
    fused = next(e for e in cuda if e.op == "aten._fused_rms_norm.default")
    assert sum(n for _, n in fused.allocs) == 4 * 16 * 64 * 2 + 4 * 16 * 4


def _loop(func, *tensors):
    from torch_footprint.trace.recorder import elementwise_loop

    out = func(*tensors)
    return elementwise_loop(func, [t for t in tensors if isinstance(t, torch.Tensor)], [out])


def test_each_elementwise_call_is_classed_by_the_loop_cudas_kernels_run():
    # ATen's CUDALoops.cuh, gpu_kernel_impl: vectorized when the iteration is contiguous and needs no
    # casts; unrolled with casts when contiguous; the legacy offset-computing loop otherwise (the
    # kernels our H100 and H200 profiles name: vectorized_elementwise_kernel, unrolled_elementwise_kernel,
    # elementwise_kernel<128, 4>)
    aten = torch.ops.aten
    x = torch.empty(4, 8, 16, 32, device="meta", dtype=torch.bfloat16)
    xt = torch.empty(4, 16, 8, 32, device="meta", dtype=torch.bfloat16).transpose(1, 2)
    x32 = torch.empty(4, 8, 16, 32, device="meta")
    scale = torch.empty(4, 8, 1, 1, device="meta", dtype=torch.bfloat16)
    last = x.contiguous(memory_format=torch.channels_last)
    assert _loop(aten.add.Tensor, x, x) == ""
    assert _loop(aten.add.Tensor, last, last) == ""  # the same dense layout on every operand
    assert _loop(aten.add.Tensor, x, xt) == "strided"
    assert _loop(aten.mul.Tensor, x, scale) == "strided"  # broadcast
    assert _loop(aten.mul.Tensor, x, torch.empty((), device="meta", dtype=torch.bfloat16)) == ""  # a scalar
    assert _loop(aten.add.Tensor, x, x32) == "cast"
    assert _loop(aten.add.Tensor, xt, x32) == "strided cast"
    assert _loop(aten.clone.default, xt) == "strided"
    to_half = torch.ops.aten._to_copy.default
    assert elementwise_loop_of_copy(to_half, x32) == ""  # a dense conversion: copy_kernel_cuda's vectorized path
    assert _loop(aten.mm.default, x.flatten(0, 2), x[0, 0].t()) == ""  # not an elementwise kernel


def elementwise_loop_of_copy(func, t):
    from torch_footprint.trace.recorder import elementwise_loop

    return elementwise_loop(func, [t], [func(t, dtype=torch.bfloat16)])


class StridedAdd(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + x.transpose(1, 2)


def test_a_strided_add_runs_at_its_loops_rate_per_sm_clock():
    from torch_footprint.estimate.kernels import constants

    w, t = _records("profile", {"precision": "bf16"}, StridedAdd(), "64,512,512:bfloat16")
    trace = trace_step(w, t, cuda_sm=H100)[0]
    pred = estimate_latency(trace, tfp.hardware.get("h100-sxm"))
    add = next(o for o in pred.ops if o.op == "aten.add.Tensor")
    # by hand: 64 x 512 x 512 elements at 0.71 SM clocks each over 132 SMs x 1.98 GHz (the H100 SXM's
    # 67 TFLOP/s of fp32 over 2 FLOPs x 128 lanes): 45 us, after the kernel's least time; the memory
    # alone (32 MiB of bf16 read twice and written once, at 87% of 3.35 TB/s) would take 34 us
    elements = 64 * 512 * 512
    assert add.memory_s == pytest.approx(elements * 0.71 / (67e12 / 256) + constants.current().kernel_floor_s)
