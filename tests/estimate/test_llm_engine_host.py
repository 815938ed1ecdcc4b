"""An engine's own time per iteration in the serving simulation (serving_sim.EngineHost, the
[host] rules of hardware/engines/transformers.toml), against schedules worked by hand: a step
cost of 1 s per decode step at batch 1, 0.1 s more per extra request, 1 ms per prefilled
token; requests of 100 prompt + 10 output tokens."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from torch_footprint.cli import main
from torch_footprint.errors import FootprintError
from torch_footprint.estimate.llm.serving_sim import EngineHost
from torch_footprint.estimate.llm.simulate import Sent, StepCost, Tricks, simulate
from torch_footprint.hardware.catalog import get
from torch_footprint.hardware.engines import _profile, profile

COST = StepCost(lambda b, ctx: 1.0 + 0.1 * (b - 1), 0.001, [100, 110], 8)


def run(host: EngineHost, **kw: int) -> dict:
    args = {"prompt": 100, "output": 10, "concurrency": 1, "requests": 1, "kv_blocks": 1000, "block": 16,
            "max_num_seqs": 256, "budget": 8192, **kw}
    return simulate(COST, tricks=Tricks(host=host), **args)


def test_host_time_per_step_request_and_admission() -> None:
    # 10 + 2 per scheduled request + 5 per admitted one, 10 ms an operator:
    # the prefill step (one request, admitted in it): 0.1 s + (10 + 2 + 5) x 10 ms = 0.27 s, its first token;
    # then 9 decode steps of 1 s + (10 + 2) x 10 ms = 1.12 s: end to end 0.27 + 9 x 1.12 = 10.35 s
    m = run(EngineHost(step_ops=10, sequence_ops=2, request_ops=5, op_s=0.01, pair_s=0.0))
    assert m["ttft_s"]["p50"] == pytest.approx(0.27)
    assert m["tpot_s"]["p50"] == pytest.approx(1.12)
    assert m["e2e_s"]["p50"] == pytest.approx(10.35)
    assert m["iterations"] == 10


def test_packed_attention_prices_the_pairs_beyond_each_requests_own() -> None:
    # two clients, 0.1 ms a pair, no host ops. The first step prefills both prompts: 200 queries against
    # 200 keys, of which each request's own are 100 x 100: 40,000 - 20,000 = 20,000 pairs more, 2 s, so
    # both first tokens at 0.2 + 2 = 2.2 s. Decode step g (g = 1..9): 2 queries against 2 x (100 + g)
    # keys, each its own 100 + g: 2 x (100 + g) pairs more; over the 9 steps 2 x (900 + 45) = 1,890
    # pairs, 0.189 s, beside 9 x 1.1 s: the run takes 2.2 + 9.9 + 0.189 = 12.289 s
    m = run(EngineHost(step_ops=0, sequence_ops=0, request_ops=0, op_s=0.0, pair_s=1e-4), concurrency=2, requests=2)
    assert m["ttft_s"]["p50"] == pytest.approx(2.2)
    assert m["duration_s"] == pytest.approx(12.289)
    assert m["tpot_s"]["p50"] == pytest.approx((9.9 + 0.189) / 9)


def test_the_rules_on_a_calibrated_cpu() -> None:
    # a CPU whose calibration measured 10 us a PyTorch call
    p = replace(profile("transformers"), host={"step_ops": 38.0, "sequence_ops": 1.5, "request_ops": 8.0})
    cpu = replace(get("h100-sxm"), kind="cpu", calibrated={"op_overhead_us": 10.0, "matmul_tflops": {"fp32": 0.05}})
    h = EngineHost.of(p, cpu, None)
    assert h is not None
    assert h.op_s == pytest.approx(10e-6) and h.step_ops == 38.0
    assert h.pair_s == 0.0 and h.key_s == 0.0  # no attention shape: the packed attention is not priced
    # a step of 3 requests, one admitted: 38 + 4.5 + 8 operators
    assert h(3, 1, 3, 300, 300) == pytest.approx(50.5 * 10e-6)
    # a packed step's keys and pairs at the prices given: 300 keys at 2 us, 600 pairs beyond the own at 0.1 us
    h = replace(h, key_s=2e-6, pair_s=1e-7)
    assert h(3, 1, 3, 300, 300) == pytest.approx(50.5 * 10e-6 + 300 * 2e-6 + 600 * 1e-7)
    # vLLM states no host rules: nothing added
    assert EngineHost.of(profile("vllm"), cpu, None) is None


def test_the_simulation_names_the_engines_host_time(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    tiny = str(Path(__file__).parents[1] / "configs" / "llama-tiny")
    code = main(["llm", tiny, "--gpu", "h100-sxm", "--engine", "transformers", "--simulate", "--prompt", "32",
                 "--output", "8", "--concurrency", "4", "--num-prompts", "8"])
    out = capsys.readouterr().out
    assert code == 0
    assert "transformers (continuous batching)'s own time per step" in out


@pytest.mark.parametrize("engine", ["transformer", "hf"])
def test_an_unknown_engine_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], engine: str) -> None:
    tiny = str(Path(__file__).parents[1] / "configs" / "llama-tiny")
    code = main(["llm", tiny, "--gpu", "h100-sxm", "--engine", engine, "--simulate"])
    err = capsys.readouterr().err
    assert code == 2
    assert engine in err and "transformers" in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_profile_with_an_unknown_attention_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "odd.toml"
    bad.write_text('name = "odd"\ntitle = "Odd"\nsource = "https://example.org/odd.py"\nbudget = "context"\n'
                   'attention = "sideways"\n')
    with pytest.raises(FootprintError, match="attention must be per_request or packed"):
        _profile(bad)


def test_a_step_of_prompt_chunks_alone_runs_the_whole_step() -> None:
    # whole_step: the prefill-only step costs a batch-1 decode step (1 s) for its first token and 1 ms for
    # each of the other 99: the first token at 1.099 s, then 9 decode steps of 1 s
    cost = StepCost(lambda b, ctx: 1.0 + 0.1 * (b - 1), 0.001, [100, 110], 8, whole_step=True)
    m = simulate(cost, prompt=100, output=10, concurrency=1, requests=1, kv_blocks=1000, block=16,
                 max_num_seqs=256, budget=8192)
    assert m["ttft_s"]["p50"] == pytest.approx(1.099)
    assert m["e2e_s"]["p50"] == pytest.approx(10.099)


@pytest.mark.parametrize("lag, ttft, duration", [(0, 1.1, 10.1), (1, 2.1, 11.0)])
def test_a_closed_loops_next_request_misses_a_busy_step(lag: int, ttft: float, duration: float) -> None:
    # two clients: requests of 5, 10 and 5 output tokens (100-token prompts). Both prompts in the first step
    # (0.2 s), then steps at batch 2 of 1.1 s: the first request ends with the 5th step, at 4.6 s. Without a
    # lag its successor joins the next step (its prefill 0.1 s beside the other's decode 1 s): first token at
    # 5.7 s, TTFT 1.1 s; the second ends at 10.1 s with the third. With a lag of one step the next step runs
    # the second alone (1 s), the successor joins the one after: first token at 6.7 s, TTFT 2.1 s, and it
    # ends alone a step after the second, at 11.0 s
    stream = [Sent(0.0, 100, 5), Sent(0.0, 100, 10), Sent(0.0, 100, 5)]
    m = simulate(COST, stream=stream, concurrency=2, kv_blocks=1000, block=16, max_num_seqs=256, budget=8192,
                 tricks=Tricks(admission_lag=lag))
    assert m["ttft_s"]["p99"] == pytest.approx(ttft)
    assert m["duration_s"] == pytest.approx(duration)


def test_the_packed_attention_is_priced_from_its_operators() -> None:
    from torch_footprint.estimate.llm.packed import KEYS, QUERIES, AttentionShape, packed_prices

    # a CPU so fast at arithmetic that every operator here is bound by its bytes, at 20 GB/s. A layer of
    # 4 query heads over 2 key-value heads of 64: each key read is repeated to the 4 heads (K and V: the 2
    # heads read, the 4 written, 8 (2 + 4) 64 bytes) and read so by the attention (8 x 4 x 64 bytes), where
    # the traced step's own attention reads it once per key-value head (8 x 2 x 64); the mask adds 4 bytes a
    # pair, and more queries their own rows, outputs (2 x 4 x 64 x 4 bytes each) and the kernel's log-sum-exp
    # (4 x 4 bytes), over 2 x KEYS keys. By hand, per layer, a pair (4 x 4 x 64 / KEYS + 4 + 2 x 4 / KEYS)
    # bytes, and a key 16 x 4 x 64 bytes less QUERIES pairs' worth of the queries' own bytes
    # (QUERIES x (4 x 4 x 64 + 2 x 4) / KEYS); 3 layers
    cal = {"matmul_tflops": {"fp32": 1000.0}, "conv_tflops": {"fp32": 1000.0}, "copy_gbs": 20.0,
           "op_overhead_us": 5.0}
    cpu = replace(get("h100-sxm"), kind="cpu", vendor="local", calibrated=cal, tflops={"fp32": 1000.0})
    key_s, pair_s = packed_prices(AttentionShape(4, 2, 64, 3), cpu)
    assert key_s == pytest.approx(3 * (16 * 4 * 64 - QUERIES * (4 * 4 * 64 + 2 * 4) / KEYS) / 20e9, rel=1e-6)
    assert pair_s == pytest.approx(3 * (4 * 4 * 64 / KEYS + 4 + 2 * 4 / KEYS) / 20e9, rel=1e-6)
    # as many key-value heads as query heads: nothing repeated, nothing read beyond the traced step's own
    key_s, _ = packed_prices(AttentionShape(4, 4, 64, 3), cpu)
    assert key_s == 0.0
