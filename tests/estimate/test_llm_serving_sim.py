"""The serving simulation's requests, objectives and features, against schedules worked by
hand: a decode step of 1 s at batch 1 and 0.1 s more per extra request, 1 ms per prefilled
token (as tests/estimate/test_llm_simulate.py), requests of 100 prompt + 10 output tokens."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
from cli_errors import bad_input_line

from torch_footprint.estimate.llm.requests import drawn, parse_rates, poisson_times, read_trace, stream
from torch_footprint.estimate.llm.result import EngineCache
from torch_footprint.estimate.llm.serving_sim import Asked, Setup, simulate_serving, tokens_per_step
from torch_footprint.estimate.llm.simulate import Sent, StepCost, Tricks, simulate
from torch_footprint.hardware import get

COST = StepCost(lambda b, ctx: 1.0 + 0.1 * (b - 1), 0.001, [100, 110], 8)
ENGINE = {"kv_blocks": 1000, "block": 16, "max_num_seqs": 256, "budget": 8192}


def sim(stream: list[Sent], concurrency: int | None = None, **kw) -> dict:
    return simulate(COST, stream=stream, concurrency=concurrency, **{**ENGINE, **kw})


def test_a_lone_request_ttft_is_its_prefill() -> None:
    # sent at 5 s to an idle server: first token after its 100-token prefill (0.1 s), then 9 steps of 1 s
    m = sim([Sent(5.0, 100, 10)])
    assert m["ttft_s"]["p50"] == pytest.approx(0.1)
    assert m["e2e_s"]["p50"] == pytest.approx(9.1)
    assert m["itl_s"]["p50"] == pytest.approx(1.0) and m["tpot_s"]["p50"] == pytest.approx(1.0)
    assert m["duration_s"] == pytest.approx(14.1)
    assert m["input_tokens_per_s"] == pytest.approx(100 / 14.1)


def test_goodput_counts_requests_meeting_both_objectives() -> None:
    one_client = [Sent(0.0, 100, 10)] * 3  # 3 x 9.1 s, each TTFT 0.1 s and TPOT 1 s
    met = sim(one_client, concurrency=1, slo_ttft=0.2, slo_tpot=1.0)
    assert met["slo"]["met"] == 3 and met["goodput_requests_per_s"] == pytest.approx(3 / 27.3)
    missed = sim(one_client, concurrency=1, slo_ttft=0.2, slo_tpot=0.5)
    assert missed["slo"]["met"] == 0 and missed["goodput_requests_per_s"] == 0.0


def test_open_loop_requests_queue_behind_each_other() -> None:
    # two at t=0 with a budget of 101 tokens a step: the first's 100 and the second's first token in the first
    # step (0.101 s: the first's first token), the second's other 99 in the next beside the first's decode
    # (1 s + 0.099 s), so its first token at 1.2 s
    m = sim([Sent(0.0, 100, 10), Sent(0.0, 100, 10)], budget=101)
    assert m["ttft_s"]["mean"] == pytest.approx((0.101 + 1.2) / 2) and m["ttft_s"]["p99"] == pytest.approx(1.2)


def test_prefix_caching_skips_the_cached_tokens_and_their_blocks() -> None:
    # half of the prompt cached: 50 tokens prefilled (0.05 s); the request holds blocks for 50 + 10 tokens only:
    # 4 blocks of 16, where without the cache it would need 7 and nothing could run
    assert sim([Sent(0.0, 100, 10)], kv_blocks=4)["requests"] == 0
    m = sim([Sent(0.0, 100, 10)], kv_blocks=4, tricks=Tricks(prefix_hit=0.5))
    assert m["requests"] == 1 and m["ttft_s"]["p50"] == pytest.approx(0.05)


def test_multi_step_scheduling_holds_a_new_request_until_the_window_ends() -> None:
    # one request decoding from t = 0 (prefill 0.1 s, then steps of 1 s); a second sent at 1.5 s. One step
    # at a time: admitted at the step starting at 2.1 s, its 100 tokens beside the first's decode
    # (1 s + 0.1 s): first token at 3.2 s, TTFT 1.7 s
    first, second = Sent(0.0, 100, 10), Sent(1.5, 100, 10)
    assert sim([first, second])["ttft_s"]["mean"] == pytest.approx((0.1 + 1.7) / 2)
    # four steps a window: the window the decode step at 0.1 s opens runs to 4.1 s, where the second is
    # admitted: first token at 4.1 + 1.1 = 5.2 s, TTFT 3.7 s; the first request's own stays 0.1 s
    four = sim([first, second], tricks=Tricks(scheduler_steps=4))
    assert four["ttft_s"]["mean"] == pytest.approx((0.1 + 3.7) / 2)
    # the first's tokens 2-5 in the window's steps, 6 beside the second's prefill (4.1-5.2 s), 7-10 in steps of
    # 1.1 s at batch 2: done at 9.6 s; the second's 2-5 in those, 6-10 alone: done at 14.6 s, e2e 13.1 s
    assert four["e2e_s"]["mean"] == pytest.approx((9.6 + 13.1) / 2)


def test_unmixed_steps_prefill_first_and_pause_the_decodes() -> None:
    # the same two requests, prompts in steps of their own (vLLM V0 without chunked prefill, SGLang): the
    # step at 2.1 s prefills the second alone (0.1 s): its first token at 2.2 s, TTFT 0.7 s; the first's
    # decode waits for it, then both decode in steps of 1.1 s: the first's tenth token at 2.1 + 0.1 + 7 x 1.1
    # = 9.9 s; the second's eighth then too, its last two alone at 10.9 and 11.9 s (e2e 10.4 s)
    m = sim([Sent(0.0, 100, 10), Sent(1.5, 100, 10)], tricks=Tricks(mixed=False))
    assert m["ttft_s"]["mean"] == pytest.approx((0.1 + 0.7) / 2)
    assert m["e2e_s"]["mean"] == pytest.approx((9.9 + 10.4) / 2)


def test_speculative_tokens_per_step() -> None:
    # (1 - a^(K+1)) / (1 - a): K = 3, a = 0.5 -> (1 - 1/16) / (1/2) = 1.875; nothing accepted: 1 token
    assert tokens_per_step(3, 0.5) == pytest.approx(1.875)
    assert tokens_per_step(4, 0.0) == pytest.approx(1.0)
    # 2 tokens a step and 0.5 s of draft per step: after the first token, 9 more in 5 steps of 1.5 s
    m = sim([Sent(0.0, 100, 10)], tricks=Tricks(tokens_per_step=2.0, draft_s=lambda b, c: 0.5))
    assert m["e2e_s"]["p50"] == pytest.approx(0.1 + 5 * 1.5)
    assert m["tpot_s"]["p50"] == pytest.approx(7.5 / 9)


def _setup(**kw) -> Setup:
    cache = EngineCache(capacity_bytes=1000 * 16 * 1000, blocks=1000, tokens=16000, concurrency=1.0, block=16,
                        knobs={"max_num_seqs": 256, "max_num_batched_tokens": 8192})
    args = {"decode_s": lambda b, ctx: 1.0 + 0.1 * (b - 1), "prefill_per_token": 0.001, "cache": cache, "layers": 10,
            "weights_per_rank": 10**6, "kv_per_token_rank": 1000.0, "link_bytes_per_s": 1e6, "gpus": 1,
            "acc": get("h100-sxm"), **kw}
    return Setup(**args)


def test_disaggregated_prefill_then_the_cache_over_the_link() -> None:
    # prefill pool: first token at 0.1 s; 100 tokens x 1,000 bytes over 1 MB/s: 0.1 s; the decode pool takes it at
    # 0.2 s and runs 9 steps of 1 s: ends at 9.2 s
    m = simulate_serving(_setup(), Asked(100, 10, 1, 1, rates=[math.inf], pools=(1, 1)))
    assert m["ttft_s"]["p50"] == pytest.approx(0.1)
    assert m["e2e_s"]["p50"] == pytest.approx(9.2)
    assert m["tpot_s"]["p50"] == pytest.approx(9.1 / 9)
    assert m["gpus"] == 2
    # a one-token request ends with its prefill: it never reaches the decode pool
    one = simulate_serving(_setup(), Asked(100, 1, 1, 1, rates=[math.inf], pools=(1, 1)))
    assert one["e2e_s"]["p50"] == pytest.approx(0.1) and one["iterations"] == 1


def test_cost_and_energy_per_token() -> None:
    # one client, 3 requests: 27.3 s, of which 0.3 s prefill and 27 s decode; $3.6 an hour is $0.001 a second:
    # input 0.3 s x $0.001 / 300 tokens = $1 per million, output 27 s x $0.001 / 30 tokens = $900 per million;
    # an H100 SXM's board power, 700 W: 700 x 0.3 / 300 = 0.7 J per input token, 700 x 27 / 30 = 630 J per output
    m = simulate_serving(_setup(prices=("h100-sxm=3.6",)), Asked(100, 10, 1, 3))
    assert m["duration_s"] == pytest.approx(27.3)
    assert m["usd_per_m_input_tokens"] == pytest.approx(1.0)
    assert m["usd_per_m_output_tokens"] == pytest.approx(900.0)
    assert m["joules_per_input_token"] == pytest.approx(0.7)
    assert m["joules_per_output_token"] == pytest.approx(630.0)
    assert "estimate" in m["energy_note"]


def test_a_sweep_of_rates() -> None:
    # 3 requests 100 s apart never meet: each alone, 9.1 s; at any rate low enough the figures are the lone request's
    m = simulate_serving(_setup(), Asked(100, 10, 1, 20, rates=[0.01, 0.02]))
    assert [r["request_rate"] for r in m["sweep"]] == [0.01, 0.02]
    assert all(r["ttft_s"]["p50"] == pytest.approx(0.1) for r in m["sweep"])


def test_speculation_priced_with_a_draft_head() -> None:
    # K = 1 at a = 0: one token a step (nothing accepted); each step adds the head's step (1/10 of the model's: 0.1 s)
    # and the verification of 1 more token (1 ms): a lone request's 9 decode steps take 1.101 s each
    m = simulate_serving(_setup(), Asked(100, 10, 1, 1, spec_k=1, acceptance=0.0))
    assert m["e2e_s"]["p50"] == pytest.approx(0.1 + 9 * 1.101)
    # the head's weights (10^6 / 10 layers = 10^5 bytes) take 100000 / 16000 = 6.25 blocks, one layer more of cache
    # leaves (1000 - 6.25) / 1.1 = 903 blocks
    assert "903 of 1,000 blocks" in " ".join(m["notes"])


def test_poisson_arrivals_are_seeded_and_at_the_rate() -> None:
    times = poisson_times(10_000, 4.0, seed=0)
    # 10,000 exponential gaps of mean 1/4 s: their sum is 2,500 s within 3% (its standard deviation is 1%)
    assert 10_000 / times[-1] == pytest.approx(4.0, rel=0.03)
    assert times == poisson_times(10_000, 4.0, seed=0) and times != poisson_times(10_000, 4.0, seed=1)
    assert poisson_times(3, math.inf, seed=0) == [0.0, 0.0, 0.0]
    assert parse_rates("1,2,inf") == [1.0, 2.0, math.inf]


def test_drawn_lengths_follow_the_shipped_histogram() -> None:
    # the Splitwise paper's medians of Azure's conversation trace: 1,020 prompt and 129 output tokens
    pairs = drawn("azure-conv", 20_000, seed=0)
    assert statistics.median(p for p, _ in pairs) == pytest.approx(1020, rel=0.1)
    assert statistics.median(o for _, o in pairs) == pytest.approx(129, rel=0.15)
    assert all(p + o <= 2048 for p, o in drawn("azure-conv", 1000, seed=0, most=2048))


def test_drawn_mlperf_openorca_lengths_keep_the_published_means() -> None:
    # MLPerf's Llama-2-70B samples: 5,463,976 input tokens over 24,576 (HBFSim's extraction from the official
    # file, 48 to 1,021 a sample); Llama-2-70B generates 294.45 tokens a sample (MLCommons' README), at most 1,024
    pairs = drawn("mlperf-openorca", 50_000, seed=0)
    assert statistics.fmean(p for p, _ in pairs) == pytest.approx(5_463_976 / 24_576, rel=0.01)
    assert statistics.fmean(o for _, o in pairs) == pytest.approx(294.45, rel=0.01)
    assert min(p for p, _ in pairs) >= 48 and max(p for p, _ in pairs) <= 1021
    assert max(o for _, o in pairs) <= 1024


def test_drawn_sharegpt_lengths_keep_the_benchmarks_published_totals() -> None:
    # vLLM's benchmark_serving at its defaults (1,000 ShareGPT prompts, seed 0, Llama-3.1-8B's tokenizer)
    # prints "Total input tokens: 215196" and about 197,000 generated (vllm-project/vllm pull requests 15720
    # and 17004); its filters keep prompts of 4 to 1,024 tokens and outputs of 4 or more
    pairs = drawn("sharegpt", 50_000, seed=0)
    assert statistics.fmean(p for p, _ in pairs) == pytest.approx(215.196, rel=0.05)
    assert statistics.fmean(o for _, o in pairs) == pytest.approx(197.3, rel=0.05)
    assert min(p for p, _ in pairs) >= 4 and max(p for p, _ in pairs) <= 1024
    assert min(o for _, o in pairs) >= 4


def test_trace_files(tmp_path: Path) -> None:
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"timestamp": 10.5, "input_tokens": 100, "output_tokens": 10}\n'
                     '{"timestamp": 11.0, "input_tokens": 50, "output_tokens": 5}\n')
    assert read_trace(str(jsonl)) == [(10.5, 100, 10), (11.0, 50, 5)]
    # sent at the trace's times, from its first
    assert stream(0, prompt=1, output=1, trace=str(jsonl)) == [Sent(0.0, 100, 10), Sent(0.5, 50, 5)]
    csv = tmp_path / "t.csv"
    csv.write_text("input_tokens,output_tokens\n100,10\n" + "100,10\n" * 99)
    assert read_trace(str(csv))[0] == (None, 100, 10)
    # no send times: one client sends them one after another, every row of the trace (100 x 9.1 s)
    m = simulate_serving(_setup(), Asked(1, 1, 1, None, trace=str(csv)))
    assert m["requests"] == 100 and m["duration_s"] == pytest.approx(910.0)


@pytest.mark.parametrize("text", ['{"input_tokens": 100}\n', "not json\n",
                                  '{"input_tokens": 1.5, "output_tokens": 2}\n'])
def test_a_malformed_trace_is_one_line(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(text)
    tiny = str(Path(__file__).parents[1] / "configs" / "llama-tiny")
    err = bad_input_line(["llm", tiny, "--gpu", "h100-sxm", "--request-trace", str(bad)], capsys)
    assert "bad.jsonl" in err


def test_the_command_simulates_a_rate_sweep(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    import json

    from torch_footprint.cli import main

    tiny = str(Path(__file__).parents[1] / "configs" / "llama-tiny")
    out_json = tmp_path / "sim.json"
    assert main(["llm", tiny, "--gpu", "h100-sxm", "--request-rate", "100,1000", "--lengths", "azure-conv",
                 "--num-prompts", "50", "--slo-ttft", "1s", "--slo-tpot", "1s", "--price", "h100-sxm=2",
                 "--json", str(out_json)]) == 0
    assert "at 1000 req/s" in capsys.readouterr().out
    m = json.loads(out_json.read_text())["accelerators"][0]["simulation"]
    assert m["requests"] == 50 and m["slo"]["fraction"] == 1.0 and len(m["sweep"]) == 2
    assert m["kv_over_time"] and m["usd_per_m_output_tokens"] > 0


def test_speculation_priced_with_a_draft_model() -> None:
    # a draft of 2 x 10^5 bytes of weights and 200 bytes of cache a token beside the model's 10^6 and 1,000: each of
    # its steps reads a fifth of the model's bytes at any batch and context, so takes 0.2 x 1 s; with the
    # verification of 1 more token (1 ms), a lone request's 9 decode steps take 1.201 s each
    m = simulate_serving(_setup(), Asked(100, 10, 1, 1, spec_k=1, acceptance=0.0, draft=(200_000, 200.0, "d")))
    assert m["e2e_s"]["p50"] == pytest.approx(0.1 + 9 * 1.201)
    # its weights take 200000 / 16000 = 12.5 blocks, its cache 0.2 of each token's: (1000 - 12.5) / 1.2 = 822
    assert "822 of 1,000 blocks" in " ".join(m["notes"])


def test_the_command_prices_a_draft_model(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    from torch_footprint.cli import main

    tiny = str(Path(__file__).parents[1] / "configs" / "llama-tiny")
    assert main(["llm", tiny, "--gpu", "h100-sxm", "--simulate", "--num-prompts", "20", "--num-speculative-tokens",
                 "3", "--acceptance-rate", "0.8", "--speculative-model", tiny]) == 0
    # the note's lines as one text: the table's borders out (where it wraps depends on the path's length)
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    # (1 - 0.8^4) / (1 - 0.8) = 2.952 tokens per step
    assert "speculative decoding: 3 tokens proposed by the draft model" in out and "2.95 tokens per step" in out


@pytest.mark.parametrize("flags, says", [
    (["--request-rate", "fast"], "--request-rate takes requests per second"),
    (["--request-rate", "0"], "more than 0"),
    (["--lengths", "sharegpt-ish"], "no length distribution 'sharegpt-ish'"),
    (["--prefix-hit-rate", "1"], "--prefix-hit-rate must be in [0, 1)"),
    (["--disaggregate", "2x3"], "--disaggregate takes P:D"),
    (["--disaggregate", "1:1"], "give --request-rate"),
    (["--slo-ttft", "5"], "has no unit"),
    (["--speculative-model", "x"], "give that too"),
])
def test_bad_simulation_flags_are_one_line(flags: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    tiny = str(Path(__file__).parents[1] / "configs" / "llama-tiny")
    assert says in bad_input_line(["llm", tiny, "--gpu", "h100-sxm", *flags], capsys)
