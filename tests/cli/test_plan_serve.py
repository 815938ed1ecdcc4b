"""``footprint plan --serve``: the cheapest serving fleet for a request rate under latency targets
(tiny Llama: tests/configs/llama-tiny; a slow made-up GPU so that a rate needs several replicas)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cli_errors import bad_input_line
from torch_footprint.cli import main
from torch_footprint.estimate.llm.fleet import fewest
from torch_footprint.results.record import validate

LLAMA = str(Path(__file__).resolve().parents[1] / "configs" / "llama-tiny")
SLOW_GPU = """
[[accelerator]]
id = "slow-gpu"
name = "slow-gpu"
vendor = "nvidia"
kind = "gpu"
memory_gb = 4
bandwidth_gbs = 0.05
tdp_w = 50
tflops = { fp32 = 0.002, bf16 = 0.004, fp16 = 0.004 }
link_gbs = 10
link = "a test link"
source = "https://example.com/slow-gpu"
"""
LENGTHS = ["--prompt", "128", "--output", "32", "--num-prompts", "100", "--slo-ttft", "2s", "--slo-tpot", "200ms"]


class _Fake:
    """A replica that meets the targets from 13 replicas on, recording what was simulated."""

    def __init__(self) -> None:
        self.points: dict[int, dict[str, Any]] = {}
        self.calls: list[list[int]] = []

    def at(self, ns: list[int]) -> None:
        self.calls.append([n for n in ns if n not in self.points])
        self.points.update({n: {} for n in ns})

    def met(self, n: int, target: float) -> bool:
        return n >= 13


def test_the_fewest_replicas_by_halving_then_bisection() -> None:
    # 1, 2, 4, ... 1024 in one sweep: 16 is the first that meets, 8 the last that misses; bisection then tries
    # 12 (misses), 14 (meets), 13 (meets): 13 replicas, found with 3 more points rather than 7
    fake = _Fake()
    assert fewest(fake, 0.9, None) == (13, None)  # type: ignore[arg-type]
    assert fake.calls == [[2**k for k in range(11)], [12], [14], [13]]
    # at most 10 replicas: the sweep stops there and none meets
    fake = _Fake()
    assert fewest(fake, 0.9, 10) == (None, None)  # type: ignore[arg-type]
    assert fake.calls == [[1, 2, 4, 8, 10]]


def _simulated(tmp_path: Path, hw: Path, rate: float) -> float:
    """The fraction of requests meeting both targets as ``footprint llm`` simulates one replica at ``rate``."""
    out = tmp_path / "llm.json"
    assert main(["llm", LLAMA, "--hardware", str(hw), "--gpu", "slow-gpu", "--engine", "vllm", "--request-rate",
                 repr(rate), *LENGTHS, "--json", str(out)]) == 0
    return float(json.loads(out.read_text())["accelerators"][0]["simulation"]["slo"]["fraction"])


def test_the_fleet_is_the_fewest_replicas_the_simulation_says_meet(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    hw = tmp_path / "slow.toml"
    hw.write_text(SLOW_GPU)
    out = tmp_path / "fleet.json"
    assert main(["plan", LLAMA, "--serve", "--hardware", str(hw), "--gpu", "slow-gpu", "--engine", "vllm", "--tp",
                 "1", "--request-rate", "4", "--price", "slow-gpu=1.5", *LENGTHS, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    d = json.loads(out.read_text())
    validate(d)
    best = d["rows"][0]
    n = best["replicas"]
    assert n > 1 and best["rate_per_replica"] == pytest.approx(4 / n)
    # the fleet's price by hand: n replicas x 1 GPU x $1.5
    assert best["usd_per_hour"] == pytest.approx(n * 1.5) and best["gpus"] == n
    # what `footprint llm` simulates for one replica at its share of the traffic: n meet the 90% target, n - 1 not
    assert _simulated(tmp_path, hw, 4 / n) >= 0.9 > _simulated(tmp_path, hw, 4 / (n - 1))
    assert f"vllm serve {LLAMA} --tensor-parallel-size 1" in text


def test_the_cheaper_gpu_wins_and_engines_run_where_they_build(tmp_path: Path) -> None:
    # the tiny model at 5 requests/s with loose targets: one GPU of either kind serves it, so the fleet's price
    # is the GPU's hourly price; the A100 given at $1/h beats the H100 at $3/h
    out = tmp_path / "fleet.json"
    assert main(["plan", LLAMA, "--serve", "--gpu", "h100-sxm", "--gpu", "a100-sxm-80gb", "--engine", "vllm",
                 "--tp", "1", "--request-rate", "5", "--slo-ttft", "1s", "--slo-tpot", "1s", "--num-prompts", "50",
                 "--price", "h100-sxm=3", "--price", "a100-sxm-80gb=1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["accelerator"], r["replicas"], r["usd_per_hour"]) for r in rows] == [
        ("a100-sxm-80gb", 1, 1.0), ("h100-sxm", 1, 3.0)]


def test_targets_nothing_meets_are_an_answer_with_the_closest(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # a time per output token of 1 microsecond: no replica count meets it (a decode step alone is longer)
    out = tmp_path / "fleet.json"
    assert main(["plan", LLAMA, "--serve", "--gpu", "h100-sxm", "--engine", "vllm", "--tp", "1", "--request-rate",
                 "1", "--slo-tpot", "1us", "--num-prompts", "20", "--json", str(out)]) == 0
    assert "nothing meets the targets; the closest: h100-sxm x 1, vllm" in capsys.readouterr().out
    d = json.loads(out.read_text())
    assert d["rows"] == [] and "TPOT p90" in d["closest"]


@pytest.mark.parametrize(("flags", "words"), [
    (["--slo-tpot", "50ms"], "give --request-rate R"),
    (["--request-rate", "4"], "needs a latency target"),
    (["--request-rate", "1,2", "--slo-tpot", "50ms"], "takes one finite --request-rate"),
    (["--request-rate", "4", "--slo-tpot", "50ms", "--attainment", "1.5"], "--attainment is a fraction"),
    (["--request-rate", "4", "--slo-tpot", "50ms", "--gpu", "mi300x", "--engine", "trtllm"], "run(s) on none"),
])
def test_bad_fleet_requests_are_one_line(flags: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert words in bad_input_line(["plan", LLAMA, "--serve", *flags], capsys)
