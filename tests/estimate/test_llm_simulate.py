"""Continuous batching simulated (estimate/llm/simulate.py), against schedules worked by hand:
a step cost of 1 s per decode step at batch 1, 0.1 s more per extra request, and 1 ms per
prefilled token; requests of 100 prompt + 10 output tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from torch_footprint.estimate.llm.simulate import StepCost, simulate

COST = StepCost(lambda b, ctx: 1.0 + 0.1 * (b - 1), 0.001, [100, 110], 8)


def run(**kw: int) -> dict:
    args = {"prompt": 100, "output": 10, "concurrency": 1, "requests": 3, "kv_blocks": 1000, "block": 16,
            "max_num_seqs": 256, "budget": 8192, **kw}
    return simulate(COST, **args)


def test_one_client_one_request_at_a_time() -> None:
    m = run()
    # each request: a 100-token prefill (0.1 s, its first token), then 9 decode steps of 1 s
    assert m["ttft_s"]["p50"] == pytest.approx(0.1)
    assert m["tpot_s"]["p50"] == pytest.approx(1.0)
    assert m["duration_s"] == pytest.approx(3 * 9.1)
    assert m["output_tokens_per_s"] == pytest.approx(30 / 27.3)
    assert m["iterations"] == 3 * 10


def test_chunked_prefill_under_the_token_budget() -> None:
    m = run(budget=40)
    # the prompt in chunks of 40, 40, 20 tokens: the same 0.1 s, in three iterations
    assert m["ttft_s"]["p50"] == pytest.approx(0.1)
    assert m["iterations"] == 3 * (3 + 9)


def test_two_clients_batch_together() -> None:
    m = run(concurrency=2, requests=2)
    # both prompts in the first iteration (0.2 s), then 9 steps at batch 2 of 1.1 s
    assert m["ttft_s"]["p50"] == pytest.approx(0.2)
    assert m["tpot_s"]["p50"] == pytest.approx(1.1)
    assert m["duration_s"] == pytest.approx(0.2 + 9 * 1.1)


@pytest.mark.parametrize("limit", [{"kv_blocks": 7}, {"max_num_seqs": 1}])
def test_admission_waits_for_blocks_and_sequences(limit: dict) -> None:
    # 7 blocks of 16 hold one request's 110 tokens; one sequence at a time: the second waits
    m = run(concurrency=2, requests=2, **limit)
    assert m["duration_s"] == pytest.approx(2 * 9.1)
    # the first's first token at 0.1 s; the second's prefill starts when the first ends, at 9.1 s
    assert m["ttft_s"]["mean"] == pytest.approx((0.1 + 9.2) / 2) and m["ttft_s"]["p99"] == pytest.approx(9.2)
    assert m["preemptions"] == 0


def test_preemption_when_the_cache_runs_out() -> None:
    # blocks of 10 tokens: each prompt fills 10 of the 20 blocks, and the first decode step needs an
    # 11th for each: the newer request is preempted (its blocks freed), redone once the first ends
    m = run(concurrency=2, requests=2, kv_blocks=20, block=10)
    assert m["requests"] == 2 and m["preemptions"] == 1
    # both prompts (0.2 s), the first's 9 steps alone (1 s each), then the second again from its prompt
    assert m["duration_s"] == pytest.approx(0.2 + 9 * 1.0 + 0.1 + 9 * 1.0)


def test_the_command_prints_the_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    from torch_footprint.cli import main

    tiny = str(Path(__file__).parents[1] / "configs" / "llama-tiny")
    assert main(["llm", tiny, "--gpu", "h100-sxm", "--simulate", "--concurrency", "4", "--num-prompts", "20",
                 "--prompt", "64", "--output", "16"]) == 0
    out = capsys.readouterr().out
    assert "simulated serving" in out and "20 requests from 4 clients" in out and "TPOT p50/p90/p99" in out


def test_a_large_batch_is_priced_past_the_compute_crossover() -> None:
    # a step bound by the weights' read (1 s) up to batch 50, then by the matrix rate (20 ms a request):
    # max(1, 0.02 b). From batches 1 and 8 alone the line is flat at 1 s; the step at batch 200 takes 4 s,
    # at 100 2 s, each exact on the doublings of 8 around it (128 and 256; 64 and 128)
    cost = StepCost(lambda b, ctx: max(1.0, 0.02 * b), 0.001, [100, 110], 8)
    assert cost.decode_s(200, 105) == pytest.approx(4.0)
    assert cost.decode_s(100, 105) == pytest.approx(2.0)
    assert cost.decode_s(8, 105) == pytest.approx(1.0) and cost.decode_s(4, 105) == pytest.approx(1.0)
