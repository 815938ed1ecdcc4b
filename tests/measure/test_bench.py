"""footprint bench on the CPU: a real run on a small model, bad input, the CPU memory budget."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torch_footprint import bench
from torch_footprint.cli import main
from torch_footprint.errors import FootprintError
from torch_footprint.measure.runner import parse_batches, pick_device


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_bench_small_model_inference_and_training() -> None:
    res = bench(Small(), "8,64", device="cpu", batches="1,8", min_reps=10, min_time=0.05)
    assert [p.batch for p in res.points] == [1, 8]
    for p in res.points:
        st = p.stats
        assert st.reps >= 10 and st.warmup_reps >= 10
        assert st.min <= st.median <= st.max and st.p90 <= st.p99 <= st.max
        assert p.samples_per_second == pytest.approx(p.batch / st.median)
        # the traced FLOPs of one call: 2 matmuls, bias adds and the ReLU
        assert p.flops == 2 * p.batch * (64 * 256 + 256 * 10) + p.batch * (256 + 10) + p.batch * 256
        assert "cpu_peak_rss_delta" in p.memory
    train = bench(Small(), "8,64", device="cpu", train=True, optimizer="adamw", min_reps=5, min_time=0.05)
    assert train.mode == "train" and train.points[0].flops > res.points[1].flops


def test_batch_auto_stops_at_the_cpu_memory_budget() -> None:
    # the budget is checked against the predicted peak before running: nothing is allocated over it
    res = bench(Small(), "1,64", device="cpu", batches="auto", max_memory="2MiB", min_reps=3,
                min_time=0.01)
    from torch_footprint import memory

    b = res.search.batch
    assert b >= 1
    assert memory(Small(), f"{b},64").peak.peak_bytes <= 2 * 2**20 < memory(Small(), f"{b + 1},64").peak.peak_bytes
    assert [p.batch for p in res.points] == [b]


def test_bad_input() -> None:
    with pytest.raises(FootprintError, match="at least 1"):
        parse_batches("0")
    with pytest.raises(FootprintError, match="whole numbers or 'auto'"):
        parse_batches("1,many")
    with pytest.raises(FootprintError, match="unknown device|not supported"):
        pick_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(FootprintError, match="CUDA is not available"):
            pick_device("cuda")


def test_bench_command_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "resnet18", "--batch", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err
    assert main(["bench", "resnet18", "--device", "quantum"]) == 2
    assert "device" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["bench", "resnet18", "--device", "cuda"]) == 2
        assert "CUDA is not available" in capsys.readouterr().err


def test_bench_times_a_copy_of_the_callers_module() -> None:
    # a training step changes the weights it steps; the caller's module keeps its own, its flags and its device
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    bench(model, "4,8", train=True, optimizer="sgd", device="cpu", min_reps=2, min_time=0.0)
    assert not model.training
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) and p.grad is None
