"""The smaller points of the first hour: what a new user meets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from torch import nn

import torch_footprint as tfp
from torch_footprint.cli import main

GPT2_TINY = Path(__file__).parents[1] / "configs" / "gpt2-tiny"


def test_repr_of_a_profile_is_a_summary() -> None:
    p = tfp.profile(nn.Linear(8, 4), "2,8")
    # 2 x 8 x 4 = 64 MACs = 128 matrix FLOPs, + 2 x 4 bias adds; the trace: the weight's transpose and addmm
    assert repr(p) == "Profile(model='Linear', params=36, flops=136, macs=64, trace.events=<2>)"


def test_the_verbs_are_listed_for_tab_completion() -> None:
    names = dir(tfp)
    for verb in ("profile", "memory", "bench", "fit", "predict", "gpus", "calibrate", "hardware", "Profile"):
        assert verb in names
    assert "Any" not in names and "annotations" not in names


def test_token_ids_given_as_a_float_shape_point_to_input_ids(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    assert main(["profile", str(GPT2_TINY), "--input", "1,16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(Embedding)" in err and "--input-ids B,T" in err


def test_dtype_and_precision_are_accepted_by_profile_and_memory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "resnet18", "--precision", "bf16", "--depth", "0"]) == 0
    assert "1x3x224x224:bfloat16" in capsys.readouterr().out
    assert main(["memory", "resnet18", "--dtype", "bf16"]) == 0
    assert "inference (bf16)" in capsys.readouterr().out


def test_show_help_describes_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["show", "--help"])
    out = capsys.readouterr().out
    assert "module tree depth" in out and "table to show" in out and "--json FILE" in out


def test_bench_profile_has_no_stray_profiler_lines(capfd: pytest.CaptureFixture[str]) -> None:
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU())
    res = tfp.bench(model, "4,64", device="cpu", profile=True, min_reps=3, min_time=0.01, threads=1)
    out, err = capfd.readouterr()
    assert "USDT" not in out + err and "profiler_start" not in out + err
    ops = {r["op"] for r in res.profiler_ops}
    assert "aten::addmm" in ops and all(r["calls"] >= 5 for r in res.profiler_ops if r["op"] == "aten::addmm")
    from torch_footprint.report.terminal import render_bench

    out = render_bench(res)
    assert "·  1 thread\n" in out and not re.search(r"\b1 threads", out) and "torch.profiler, 5 calls" in out


def test_fit_footer_names_the_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "resnet18", "--gpu", "t4"]) == 0
    out = capsys.readouterr().out
    assert "seed documents" not in out and "lower bound = FLOPs / peak FLOP/s" in out
