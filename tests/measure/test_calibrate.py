"""footprint calibrate: measured ceilings saved per device and used by the roofline."""

from __future__ import annotations

import json

import pytest

import torch_footprint as tfp
from torch_footprint.cli import main
from torch_footprint.hardware.local import calibration_path


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_FOOTPRINT_HOME", str(tmp_path))  # an empty home of this test's own
    return tmp_path


def test_uncalibrated_cpu_has_no_bandwidth_and_says_so(home, capsys):
    cpu = tfp.hardware.get("cpu")
    assert cpu.calibrated is None and cpu.bandwidth is None and cpu.tflops["fp32"] > 0
    with pytest.raises(tfp.FootprintError, match="footprint calibrate"):
        tfp.predict("resnet18", "cpu")
    assert main(["predict", "resnet18", "--gpu", "cpu"]) == 2
    assert "footprint calibrate" in capsys.readouterr().err


@pytest.mark.slow
def test_calibrate_saves_and_the_roofline_uses_it(home, capsys):
    assert main(["calibrate", "--quick", "--force"]) == 0  # saved even on this shared, busy machine
    out = capsys.readouterr().out
    assert "matmul fp32" in out and "GB/s" in out
    saved = json.loads(calibration_path().read_text())
    [(key, res)] = saved["devices"].items()
    assert key.startswith("cpu:")
    # a 2-core VM to a 100-core server: the measured figures must be physical
    assert 1 < res["matmul_tflops"]["fp32"] * 1e3 < 20_000  # GFLOP/s
    assert 0.5 < res["copy_gbs"] < 2_000
    assert 0 < res["op_overhead_us"] < 1_000
    # stride-2 1x1 convolutions, five shapes at each of the two batch sizes
    assert {b: len(t) for b, t in res["conv_fp32_strided_by_batch_k"].items()} == {"1": 5, "4": 5}
    cpu = tfp.hardware.get("cpu")
    assert cpu.calibrated is not None and cpu.bandwidth_gbs == round(res["copy_gbs"], 1)  # the row keeps 0.1 GB/s
    pred = tfp.predict("resnet18", "cpu")
    assert pred.ceilings.source.startswith("calibrated")
    assert pred.ceilings.bandwidth == pytest.approx(res["copy_gbs"] * 1e9)
    # the roofline can be no faster than all FLOPs at the best measured rate
    best = max(r for _, r in res["matmul_fp32_by_k"] + [x for t in res["conv_fp32_by_batch_k"].values() for x in t])
    assert pred.time_s >= pred.flops / (best * 1e12) * 0.99
    # and fit now ranks this machine too
    fitted = tfp.fit("resnet18", gpu=["cpu", "t4"])
    assert {r.accelerator.id for r in fitted.rows if r.latency_s} == {"cpu", "t4"}
    # and bench shows the prediction and the share of the peak beside its measurement
    from torch import nn

    r = tfp.bench(nn.Sequential(nn.Linear(512, 512), nn.ReLU()), "64,512", device="cpu", min_reps=5,
                  min_time=0.1)
    pt = r.points[0]
    assert pt.predicted_s and pt.predicted_s > 0
    # the theoretical peak uses /proc/cpuinfo's clock, which turbo can exceed: a loose upper bound
    assert pt.utilisation and 0 < pt.utilisation < 2


def test_cli_predict_and_fit(home, capsys, tmp_path):
    assert main(["predict", "resnet18", "--gpu", "h100-sxm", "--batch", "4", "--dtype", "bf16",
                 "--json", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "roofline latency" in out and "layer1" in out and "lower bound" in out
    d = json.loads((tmp_path / "p.json").read_text())
    assert d["accelerator"] == "h100-sxm" and d["ops"] and d["main_dtype"] == "bf16"
    assert main(["fit", "resnet18", "--batch", "8", "--gpu", "t4", "--gpu", "h100-sxm", "--latency", "50ms"]) == 0
    out = capsys.readouterr().out
    assert "pick: " in out and "meets" in out
    assert main(["predict", "resnet18", "--gpu", "h100-sxn"]) == 2
    assert "Did you mean" in capsys.readouterr().err
    assert main(["fit", "resnet18", "--efficiency", "matrix"]) == 2
    assert "KIND=FRACTION" in capsys.readouterr().err


def test_streaming_is_sized_by_the_last_level_cache():
    from torch_footprint.measure.streaming import stream_bytes

    mib = 2**20
    # this server's L3 lists 266240K = 260 MiB: 4 x 260 = 1040 MiB streamed, not the 64 MiB floor
    assert stream_bytes(64 * mib, 260 * mib) == 1040 * mib
    assert stream_bytes(64 * mib, 0) == 64 * mib  # no cache listed: the floor
    assert stream_bytes(256 * mib, 32 * mib) == 256 * mib  # a small cache: the floor still
    assert stream_bytes(64 * mib, 1024 * mib) == 2048 * mib  # 4 GiB asked, 2 GiB at most


@pytest.mark.slow
def test_the_streamed_matrices_go_back_to_the_system():
    """The few-row products stream 256 MiB of 8 MiB matrices (32 of them); afterwards an allocation of 200 MiB
    must raise the resident set by 200 MiB: matrices freed into the C library's heap would stay
    resident and be reused, and the peak-memory measurement would not see the new allocation."""
    import torch

    from torch_footprint.measure.runner import RssSampler
    from torch_footprint.measure.streaming import _matvec_by_k

    rates = _matvec_by_k("cpu", 256 * 2**20, 1)
    # 5 reduction lengths x 3 row counts per layout, each a positive rate
    assert [len(rates[lay][r]) for lay in ("n", "t") for r in ("1", "2", "4")] == [5] * 6
    assert all(gbs > 0 for lay in rates.values() for table in lay.values() for _, gbs in table)
    with RssSampler() as s:
        x = torch.ones(50 * 2**20)  # 200 MiB, touched, then freed inside the block
        del x
    assert s.peak - s.base >= 190 * 2**20

