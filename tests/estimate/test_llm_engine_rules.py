"""Engines' cache-sizing rules by release (hardware/engines/vllm.toml ``[[eras]]``), worked by hand
on the tiny GPT-2 config (2 layers, 4 heads of 32, fp32: 2,048 bytes a token, a 1,000-token
vocabulary), and published engine log lines as expected values where the engine's arithmetic is
deterministic (the cache's bytes to tokens in blocks; the whole rule on a log that prints every
term)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from torch_footprint.cli import main  # noqa: E402
from torch_footprint.estimate.llm.engines import longest_profile  # noqa: E402
from torch_footprint.estimate.llm.pricing import Priced, kv_per_rank, serve  # noqa: E402
from torch_footprint.estimate.llm.trace import trace_serving  # noqa: E402
from torch_footprint.estimate.memory import CUDA_OVERHEADS  # noqa: E402
from torch_footprint.hardware.catalog import get  # noqa: E402
from torch_footprint.hardware.engines import profile, release  # noqa: E402

ROOT = Path(__file__).parents[2]
TINY = str(ROOT / "tests" / "configs" / "gpt2-tiny")
GIB = 2**30
VOCAB = 1000


@pytest.fixture(scope="module")
def tiny() -> object:
    return trace_serving(TINY, batch=1, prompt=8)


def _cache(st, gpu: str = "h100-sxm", version: str | None = None, tp: int = 1, **knobs: float):
    s = Priced(batch=1, prompt=128, output=32, engine="vllm", knobs=knobs, gpus=tp, tp=tp, engine_version=version)
    return serve(st, s, [get(gpu)], max_context=256).rows[0].vllm


def test_a_release_picks_its_era() -> None:
    v = profile("vllm")
    assert release("main 2023-12 (~0.2.4), with PR #2031") == (0, 2, 4) and release("V1") is None
    assert release("0.19.0 (V1)") == (0, 19, 0) and release("~0.7.2 (V0") == (0, 7, 2)
    # PR #2031 to #9352: total - free after the profile run, so the CUDA context is held back too
    old = v.at("0.4.3")
    assert old.context_held and old.profile_tokens == "longest" and old.non_torch_gib == 0.0
    # 0.6.4 prints non_torch_memory 0.35 GiB (issue #10517); 0.6.5 1.79 GiB (PR #10511)
    assert v.at("~0.6.4 (V0)").non_torch_gib == 0.35 and v.at("0.6.5").non_torch_tp_gib == 3.58
    # V0 eras: 256 requests, no sampler run; the newest rule (V1) after the last era
    assert v.at("0.7.2").knob("max_num_seqs", None, 1, 80 * GIB, "h100-sxm") == 256
    assert v.at("0.7.2").sampler_bytes_per_logit == 0.0
    assert v.at("0.19.0").profile_tokens == "budget" and v.at(None) is v


def test_v0_profiles_the_longest_request() -> None:
    # vllm/config.py SchedulerConfig: max(max_model_len, 2048) tokens without chunked prefill, which
    # arg_utils.py turns on (512 tokens) from a max_model_len of 32K
    v0 = profile("vllm").at("0.6.4")
    assert longest_profile(v0, 1000) == 2048
    assert longest_profile(v0, 20000) == 20000
    assert longest_profile(v0, 32768) == 512
    # chunked prefill given off: the longest request again, however long the context
    assert longest_profile(v0, 32768, 0.0) == 32768 and longest_profile(v0, 1000, 1.0) == 512


def test_v0_prefills_apart_below_32k_and_v1_mixes(tiny) -> None:
    # V0 (arg_utils.py): chunked prefill off unless max_model_len reaches 32K (the tiny model's 256 does not);
    # given on, on; V1 always chunks; SGLang mixes only with --enable-mixed-chunk
    assert _cache(tiny, version="0.6.0").knobs["enable_chunked_prefill"] == 0
    assert _cache(tiny, version="0.6.0", enable_chunked_prefill=1).knobs["enable_chunked_prefill"] == 1
    assert _cache(tiny).knobs["enable_chunked_prefill"] == 1
    assert profile("sglang").knobs["enable_mixed_chunk"] == 0


def test_v0_rule_on_the_tiny_model(tiny) -> None:
    forward = _cache(tiny, max_num_seqs=1).held_back["activations"]  # V1: a forward pass of 8,192 tokens
    old = _cache(tiny, version="0.4.3")
    # the profile run: max(256 positions, 2048) = 2,048 tokens at the same activations a token, no sampler run
    assert old.knobs["max_num_batched_tokens"] == 2048
    assert 4 * old.held_back["activations"] == forward
    # held back: the CUDA context and cuBLAS workspace (measured as total - free), no constant
    assert old.held_back["CUDA context"] == sum(CUDA_OVERHEADS.values())
    assert "outside PyTorch" not in old.held_back
    total = get("h100-sxm").usable_bytes
    assert old.capacity_bytes == int(total * 0.9) - sum(old.held_back.values())


def test_v1_sampler_run_worked_by_hand(tiny) -> None:
    v = profile("vllm")
    # vllm/engine/arg_utils.py: 1,024 requests and 8,192 tokens on an H100; an A100 80GB gets 256 and 2,048
    h100 = _cache(tiny)
    a100 = _cache(tiny, gpu="a100-sxm-80gb")
    assert h100.knobs["max_num_seqs"] == 1024 and h100.knobs["max_num_batched_tokens"] == 8192
    assert a100.knobs["max_num_seqs"] == 256 and a100.knobs["max_num_batched_tokens"] == 2048
    # the sampler run: 15.45 bytes per logit of max_num_seqs x vocabulary, +2 in float32 (the tiny
    # model is fp32): 17.45 x 1024 x 1000 = 17,868,800 bytes; with a 64-token budget the forward pass
    # (64 tokens of a 128-wide, 2-layer model) is far smaller, so the sampler sets the peak
    assert v.sampler_bytes_per_logit == 15.45
    assert _cache(tiny, max_num_batched_tokens=64).held_back["activations"] == int(17.45 * 1024 * VOCAB)
    assert _cache(tiny, gpu="a100-sxm-80gb", max_num_batched_tokens=64).held_back["activations"] == int(
        17.45 * 256 * VOCAB)
    # fewer requests: the forward pass sets the peak again (it scales with the token budget)
    few = _cache(tiny, max_num_seqs=1)
    forward = few.held_back["activations"]
    assert forward > int(17.45 * VOCAB)
    assert _cache(tiny, max_num_seqs=1, max_num_batched_tokens=4096).held_back["activations"] == forward // 2


def _per_block(model: str, tp: int = 1, kv_bytes: int | None = None, dtype: str = "bfloat16") -> int:
    st = trace_serving(model, batch=1, prompt=8, dtype=dtype)
    return kv_per_rank(st, 16, tp, kv_bytes) - kv_per_rank(st, 0, tp, kv_bytes)


def _tokens_within_rounding(gib: float, per_block: int) -> range:
    """The tokens 16-token blocks of ``per_block`` bytes give for a figure printed to 0.01 GiB."""
    low = int((gib - 0.005) * GIB) // per_block * 16
    high = int((gib + 0.005) * GIB) // per_block * 16
    return range(low, high + 1)


@pytest.mark.parametrize("model, tp, kv, gib, tokens, address", [
    # "Available KV cache memory: 6.51 GiB / GPU KV cache size: 42,656 tokens" (vLLM V1, Qwen3-14B)
    ("benchmarks/configs/Qwen--Qwen3-14B", 1, None, 6.51, 42656, "https://github.com/LMCache/LMCache/issues/1739"),
    # vLLM 0.19 on H100s, Llama-3.1-8B-Instruct: tp 1, tp 4 (2 KV heads a rank), an fp8 cache
    ("hf:meta-llama/Llama-3.1-8B", 1, None, 58.11, 476016, "llm-d-planner ...tp1pp1dp1--8192.log"),
    ("hf:meta-llama/Llama-3.1-8B", 4, None, 67.44, 2209792, "llm-d-planner ...tp4pp1dp1--8192.log"),
    ("hf:meta-llama/Llama-3.1-8B", 1, 1, 58.11, 952032, "llm-d-planner ...8192-dtbf16-kvfp8.log"),
])
def test_published_cache_bytes_to_tokens(model: str, tp: int, kv: int | None, gib: float, tokens: int,
                                         address: str) -> None:
    # vllm/v1/core/kv_cache_utils.py: blocks = available // (16 x bytes a token on this rank); tokens = 16 x blocks
    path = str(ROOT / model) if model.startswith("benchmarks/") else model
    assert tokens in _tokens_within_rounding(gib, _per_block(path, tp, kv)), address


def test_whole_v1_rule_against_a_published_log() -> None:
    # vLLM 0.19 on an H100 (total_memory=79.19GiB), Llama-3.1-8B-Instruct, --gpu-memory-utilization 0.95:
    # "Total non KV cache memory: 17.12GiB; torch peak memory increase: 1.89GiB; non-torch forward
    # increase memory: 0.25GiB; weights memory: 14.99GiB" / "Available KV cache memory: 58.11 GiB" /
    # "GPU KV cache size: 476,016 tokens" (llm-d-incubation/llm-d-planner, accuracy/results/v0.19.0/logs/
    # meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log at d3121e05). From the config alone:
    st = trace_serving("hf:meta-llama/Llama-3.1-8B", batch=1, prompt=8)
    h100 = replace(get("h100-sxm"), cuda_memory_mib=79.19 * 1024)
    s = Priced(batch=1, prompt=8, output=8, engine="vllm", knobs={"gpu_memory_utilization": 0.95},
               max_model_len=8192)
    cache = serve(st, s, [h100], max_context=None).rows[0].vllm
    # the sampler run sets the profile's peak: 15.45 x 1024 x 128,256 bytes = 1.89 GiB, as printed
    assert cache.held_back["activations"] / GIB == pytest.approx(1.89, abs=0.01)
    assert cache.held_back["outside PyTorch"] / GIB == pytest.approx(0.25, abs=0.005)
    assert cache.tokens == pytest.approx(476016, rel=0.01)


def _bad(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(["llm", TINY, "--gpu", "rtx-3090", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_a_cache_shorter_than_one_request_is_refused_as_vllm_says(tiny, capsys: pytest.CaptureFixture[str]) -> None:
    # room for about 100 tokens beside what vLLM holds back, fewer than max_model_len 256
    held = sum(_cache(tiny, gpu="rtx-3090").held_back.values())
    total = get("rtx-3090").usable_bytes
    util = (held + 100 * 2048) / total
    err = _bad(capsys, ["--engine", "vllm", "--gpu-memory-utilization", repr(util)])
    assert "is larger than the maximum number of tokens the KV cache can store" in err


def test_engine_version_needs_an_engine_and_a_release(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--engine-version goes with --engine" in _bad(capsys, ["--engine-version", "0.6.4"])
    assert "must name a release such as 0.6.4" in _bad(capsys, ["--engine", "vllm", "--engine-version", "latest"])


@pytest.mark.parametrize("max_len, util_blocks, printed_peak", [
    # vLLM ~0.6.4 on an RTX 3090 (total_gpu_memory=23.58GiB), Llama-3.1-8B-Instruct, util 0.90
    # (https://github.com/vllm-project/vllm/issues/10517): "Loading model weights took 14.9888 GB /
    # ... peak_torch_memory=17.06GiB ... non_torch_memory=0.35GiB kv_cache_size=3.81GiB / # GPU blocks:
    # 1952" at max_model_len 20000; "peak_torch_memory=17.98GiB ... kv_cache_size=2.89GiB / # GPU
    # blocks: 1478" at 29000
    (20000, 1952, 17.06 - 14.9888),
    (29000, 1478, 17.98 - 14.9888),
])
def test_v0_profile_run_against_the_rtx_3090_logs(max_len: int, util_blocks: int, printed_peak: float) -> None:
    st = trace_serving("hf:meta-llama/Llama-3.1-8B", batch=1, prompt=8)
    rtx = replace(get("rtx-3090"), cuda_memory_mib=23.58 * 1024)
    s = Priced(batch=1, prompt=8, output=8, engine="vllm", knobs={"gpu_memory_utilization": 0.9},
               max_model_len=max_len, engine_version="0.6.4")
    cache = serve(st, s, [rtx], max_context=None).rows[0].vllm
    # weights: 8,030,261,248 parameters x 2 B = 14.958 GiB, and the rotary table 131,072 positions x 128
    # x 2 B = 0.031 GiB: 14.989 GiB, as "took 14.9888 GB" (GiB) prints
    assert cache.held_back["weights"] / GIB == pytest.approx(14.9888, abs=0.001)
    # the profile run: max_model_len tokens of (3 x 4,096 + 3 x 14,336) x 2 B = 110,592 B a token
    # (fused_add_rms_norm in place) and the traced forward's small per-token tensors (rotary cos and
    # sin, positions): 2.060 GiB at 20,000 tokens, 2.987 at 29,000; printed to 0.01 GiB as
    # peak_torch_memory less the weights
    assert cache.held_back["activations"] / max_len == pytest.approx(110_592, rel=0.01)
    assert cache.held_back["activations"] / GIB == pytest.approx(printed_peak, abs=0.015)
    # blocks of 16 tokens x 128 KiB = 2 MiB: within 1% of the log's
    assert cache.blocks == pytest.approx(util_blocks, rel=0.01)
