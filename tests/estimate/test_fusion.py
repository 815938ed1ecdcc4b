"""torch.compile pricing: TorchInductor's fused elementwise chains, worked by hand, and a
compiled model's throughput against its published figure."""

from __future__ import annotations

import pytest
from torch import nn

import torch_footprint as tfp
from torch_footprint.estimate.kernels.fusion import fused_chains
from torch_footprint.trace.records import OpEvent


def _op(kind: str, read: int, written: int, phase: str = "forward") -> OpEvent:
    return OpEvent(op=f"aten.{kind}", module="m", phase=phase, flops=read, macs=0, kind=kind, bytes_read=read,
                   bytes_written=written, out_shapes=[[written]], out_dtypes=["float16"])


def test_a_chain_reads_once_at_entry_and_writes_once_at_exit() -> None:
    events = [_op("matrix", 500, 100),   # a matmul: a library call, not fused
              _op("vector", 100, 100),   # bias + activation: reads the matmul's output
              _op("view", 0, 0),         # a reshape: no kernel, the chain runs on
              _op("vector", 200, 100),   # + a residual: 100 bytes beyond the last output
              _op("vector", 100, 100),   # a scale
              _op("matrix", 100, 100),   # the next matmul ends the chain
              _op("vector", 100, 100),   # alone: nothing to fuse with
              _op("vector", 100, 50, phase="backward")]  # another phase: a chain of its own
    heads, folded = fused_chains(events)
    # the chain 1, 3, 4: 100 read at entry, 100 of the residual, 100 written at exit = 300
    # (eager: 200 + 300 + 200 = 700); 6 and 7 stay single kernels
    assert heads == {1: 300}
    assert folded == {3, 4}


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.act = nn.Linear(256, 1024), nn.LayerNorm(1024), nn.GELU()
        self.fc2 = nn.Linear(1024, 256)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return x + self.fc2(self.act(self.norm(self.fc1(x))))


def test_compiled_prediction_moves_fewer_bytes_and_says_so() -> None:
    prof = tfp.profile(_Block(), "4096,256", precision="fp16")
    eager = tfp.predict(prof, "h100-sxm")
    compiled = tfp.predict(prof, "h100-sxm", compile=True)
    # layer norm then GELU: one kernel instead of two, the 4096 x 1024 fp16 activation
    # (8 MiB) written and read once less
    assert sum(o.bytes for o in compiled.ops) <= sum(o.bytes for o in eager.ops) - 2 * 4096 * 1024 * 2
    assert compiled.time_s < eager.time_s
    assert any(n.startswith("torch.compile: ") for n in compiled.notes)


def test_compiled_resnet50_against_timms_published_figure() -> None:
    # timm's benchmark tables (pytorch-image-models at aa4b585, results/benchmark-infer-amp-nchw-
    # pt291-cu128-4090.csv, and -4090-dynamo.csv for torch.compile; benchmarks/published/models.toml):
    # resnet50 inference, batch 1024, AMP fp16, RTX 4090: 4303 images/s eager, 8039 compiled. Priced
    # as eager the compiled row was 95% too slow; with the fused chains and channels-last
    # convolutions, within 25%
    prof = tfp.profile("timm:resnet50", "1024,3,224,224", precision="fp16-mixed")
    eager = 1024 / tfp.predict(prof, "rtx-4090").time_s
    compiled = 1024 / tfp.predict(prof, "rtx-4090", compile=True).time_s
    assert eager == pytest.approx(4303, rel=0.10)
    assert compiled == pytest.approx(8039, rel=0.25)


class _Tiny(nn.Module):
    """Twenty small elementwise operators: at batch 1, the host's time is what counts."""

    def forward(self, x):  # type: ignore[no-untyped-def]
        for _ in range(10):
            x = (x * 2.0).sin()
        return x


def test_the_hosts_time_by_how_the_model_runs() -> None:
    from torch_footprint.estimate.kernels import constants
    from torch_footprint.estimate.kernels.fusion import CUDA_LAUNCH_S, host_s
    from torch_footprint.estimate.kernels.roofline import HOST_OP_S

    assert host_s("eager", 18e-6, True, False) == 18e-6
    assert host_s("compiled", 18e-6, True, False) == CUDA_LAUNCH_S and host_s("compiled", 18e-6, False, False) == 0
    assert host_s("cuda-graphs", 18e-6, True, True) == CUDA_LAUNCH_S and host_s("cuda-graphs", 18e-6, True, False) == 0
    prof = tfp.profile(_Tiny(), "1,64", precision="fp16")
    floor = constants.current().kernel_floor_s
    # 1 x 64 fp16 values: every kernel is its least time (10.8 us), the bytes nothing
    # eager: 20 dispatches of 18 us, each kernel (10.8 us) hidden behind the next dispatch
    # but the last: 20 x 18 + 10.8 us
    eager = tfp.predict(prof, "h100-sxm")
    assert eager.time_s == pytest.approx(20 * HOST_OP_S + floor, rel=0.01)
    # compiled: one fused kernel, one launch (5 us) then its 10.8 us
    compiled = tfp.predict(prof, "h100-sxm", compile=True)
    assert compiled.time_s == pytest.approx(CUDA_LAUNCH_S + floor, rel=0.01)
    # a CUDA graph of the eager kernels: one launch, then the 20 kernels back to back
    graphs = tfp.predict(prof, "h100-sxm", cuda_graphs=True)
    assert graphs.time_s == pytest.approx(CUDA_LAUNCH_S + 20 * floor, rel=0.01)
