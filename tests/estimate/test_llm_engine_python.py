"""A GPU engine's own Python per step ([host] ``step_us`` and ``sequence_us`` of an engine release,
hardware/engines/*.toml), worked by hand from the published figures the rules quote: vLLM V0 up to
0.5 spends 1.2 ms + 100 us a running request per step (Vidur's profile of a vLLM-style scheduler),
0.6's asynchronous output processing leaves 1.04 ms + 38 us of it, SGLang before its overlap
scheduler 2.3 ms (WukLab's bars); the newest releases overlap it with the GPU (nothing added)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from torch_footprint.estimate.llm.pricing import Priced, serve  # noqa: E402
from torch_footprint.estimate.llm.serving_sim import Asked  # noqa: E402
from torch_footprint.estimate.llm.trace import trace_serving  # noqa: E402
from torch_footprint.hardware.catalog import get  # noqa: E402

TINY = str(Path(__file__).parents[2] / "tests" / "configs" / "gpt2-tiny")


@pytest.fixture(scope="module")
def tiny() -> object:
    return trace_serving(TINY, batch=1, prompt=8)


def _row(st, engine: str, version: str | None, batch: int = 32, sim: Asked | None = None, **knobs: float):
    s = Priced(batch=batch, prompt=64, output=32, engine=engine, knobs=knobs, engine_version=version,
               simulate=(1, 1) if sim else None, sim=sim)
    return serve(st, s, [get("a100-sxm-80gb")], max_context=256).rows[0]


def test_static_batch_steps_carry_the_releases_python(tiny) -> None:
    # batch 32: 0.5.4 adds 1.2 ms + 32 x 100 us = 4.4 ms a decode step, 0.6.0 adds 1.04 ms + 32 x 38 us =
    # 2.256 ms; both V0 eras size the cache alike, so their steps differ by 2.144 ms
    old, new = _row(tiny, "vllm", "0.5.4"), _row(tiny, "vllm", "0.6.0")
    assert old.tpot_s - new.tpot_s == pytest.approx(4.4e-3 - 2.256e-3)
    # the prefill step admits the 32 requests: the same per-request figures (no admission cost stated)
    assert old.ttft_s - new.ttft_s == pytest.approx(4.4e-3 - 2.256e-3)
    # --num-scheduler-steps 10: the scheduler runs once every 10 decode steps, 0.2256 ms a step
    steps = _row(tiny, "vllm", "0.6.0", num_scheduler_steps=10)
    assert new.tpot_s - steps.tpot_s == pytest.approx(2.256e-3 * 0.9)
    assert any("own Python per step" in n and "once every 10 decode steps" in n for n in steps.notes)


def test_the_newest_releases_add_nothing(tiny) -> None:
    # SGLang after its overlap scheduler, vLLM V1: the newest profile states no Python per step
    assert _row(tiny, "sglang", "0.3.0").tpot_s - _row(tiny, "sglang", None).tpot_s == pytest.approx(2.3e-3)
    assert not any("own Python" in n for n in _row(tiny, "vllm", None).notes)


def test_the_simulation_charges_each_scheduling_point(tiny) -> None:
    # one request at a time of 64 + 33 tokens: 32 decode steps. SGLang 0.3.0 adds 2.3 ms to each, so its
    # time per output token is 2.3 ms above the newest release's (whose decode steps are otherwise alike)
    one = Asked(64, 33, 1, 1)
    old = _row(tiny, "sglang", "0.3.0", batch=1, sim=one).simulation
    new = _row(tiny, "sglang", None, batch=1, sim=one).simulation
    assert old["tpot_s"]["p50"] - new["tpot_s"]["p50"] == pytest.approx(2.3e-3)
    # vLLM 0.6.0 with --num-scheduler-steps 10: the 32 decode steps hold 4 scheduling points (steps 1, 11,
    # 21, 31), each 1.04 ms + 38 us for its one request
    ms = _row(tiny, "vllm", "0.6.0", batch=1, sim=one, num_scheduler_steps=10).simulation
    plain = _row(tiny, "vllm", "0.6.0", batch=1, sim=one, num_scheduler_steps=1).simulation
    assert plain["tpot_s"]["p50"] - ms["tpot_s"]["p50"] == pytest.approx((32 - 4) * 1.078e-3 / 32)
