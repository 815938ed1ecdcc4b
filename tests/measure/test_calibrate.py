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
