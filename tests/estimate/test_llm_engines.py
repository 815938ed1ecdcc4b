"""Serving engines' cache sizing as data (hardware/engines/*.toml): each engine's rule worked by
hand from the engine's source (cited in its profile) on the tiny GPT-2 config (2 layers, 4
heads of 32, fp32: 2,048 bytes per token), and the knobs' bad input as one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from torch_footprint.cli import main  # noqa: E402
from torch_footprint.estimate.llm.pricing import Priced, serve  # noqa: E402
from torch_footprint.estimate.llm.trace import trace_serving  # noqa: E402
from torch_footprint.hardware.catalog import get  # noqa: E402
from torch_footprint.hardware.engines import FOLDER, profile, profiles  # noqa: E402
from torch_footprint.settings import Serving, field_types, literal_choices  # noqa: E402

TINY = str(Path(__file__).parents[1] / "configs" / "gpt2-tiny")
PER_TOKEN = 2 * 2 * 128 * 4
GIB = 2**30
RTX3090 = 24268 * 2**20  # what CUDA reports (hardware/accelerators.toml)


@pytest.fixture(scope="module")
def tiny() -> object:
    return trace_serving(TINY, batch=1, prompt=8)


def _cache(st, engine: str, gpu: str = "rtx-3090", tp: int = 1, **knobs: float):
    s = Priced(batch=1, prompt=128, output=32, engine=engine, knobs=knobs, gpus=tp, tp=tp)
    return serve(st, s, [get(gpu)], max_context=256).rows[0].vllm


def test_one_profile_per_engine_the_flag_names() -> None:
    assert set(profiles()) == set(literal_choices(field_types(Serving)["engine"])) == {
        "vllm", "sglang", "trtllm", "llamacpp", "transformers"}
    for path in FOLDER.glob("*.toml"):  # every profile names the engine's source files its rules come from
        text = path.read_text()
        assert profile(path.stem).source.startswith("https://")
        assert any(ext in text for ext in (".py ", ".py\n", ".cpp", ".h "))


def test_vllm_rule(tiny) -> None:
    v = _cache(tiny, "vllm")
    # gpu_worker.py: 0.9 x total - weights - profile run - outside PyTorch; a 23.7 GiB device is under
    # 70 GiB, so the profile run is 2,048 tokens (arg_utils.py); 0.25 GiB outside PyTorch at tp 1
    assert v.knobs["max_num_batched_tokens"] == 2048 and v.knobs["gpu_memory_utilization"] == 0.9
    assert set(v.held_back) == {"weights", "activations", "outside PyTorch"}
    assert v.held_back["outside PyTorch"] == GIB // 4
    assert v.capacity_bytes == int(RTX3090 * 0.9) - sum(v.held_back.values())
    assert v.blocks == v.capacity_bytes // (16 * PER_TOKEN) and v.tokens == 16 * v.blocks
    # the knobs move it as the rule says: a larger token budget holds back more activations
    big = _cache(tiny, "vllm", max_num_batched_tokens=8192, gpu_memory_utilization=0.5)
    assert big.held_back["activations"] == 4 * v.held_back["activations"]
    assert big.capacity_bytes == int(RTX3090 * 0.5) - sum(big.held_back.values())
    # tensor parallel over NVLink: NCCL and custom all-reduce buffers outside PyTorch on every rank (2.07-2.21
    # GiB printed by vLLM 0.19 at tp 2 and 4 on H100s, benchmarks/published/serving.toml);
    # between PCIe cards vLLM leaves the custom all-reduce out (custom_all_reduce.py)
    assert _cache(tiny, "vllm", gpu="h100-sxm", tp=2).held_back["outside PyTorch"] == int(2.1 * GIB)
    assert _cache(tiny, "vllm", tp=2).held_back["outside PyTorch"] == GIB // 4


def test_sglang_rule(tiny) -> None:
    s = _cache(tiny, "sglang")
    # model_runner.py: total x mem_fraction_static - what is in use after loading; pages of 1 token
    assert s.knobs["mem_fraction_static"] == 0.88 and s.block == 1
    assert s.capacity_bytes == int(RTX3090 * 0.88) - sum(s.held_back.values())
    assert s.tokens == s.capacity_bytes // PER_TOKEN
    assert profile("sglang").knob("mem_fraction_static", None, tp=4) == 0.85  # server_args.py, by tp
    assert profile("sglang").knob("mem_fraction_static", 0.7, tp=4) == 0.7


def test_trtllm_rule(tiny) -> None:
    t = _cache(tiny, "trtllm")
    # _util.py: 0.9 of what is free after the weights, the profile run and the context; 32-token blocks
    assert t.capacity_bytes == int((RTX3090 - sum(t.held_back.values())) * 0.9)
    assert t.block == 32 and t.tokens == 32 * (t.capacity_bytes // (32 * PER_TOKEN))


def test_llamacpp_rule(tiny) -> None:
    c = _cache(tiny, "llamacpp")
    assert c.tokens == 4096 and c.capacity_bytes == 4096 * PER_TOKEN  # n_ctx cells, allocated whole
    assert _cache(tiny, "llamacpp", ctx_size=1000).tokens == 1000


@pytest.mark.parametrize("argv, message", [
    (["--engine", "tgi"], "unknown engine 'tgi'"),
    (["--engine", "vllm", "--max-model-len", "1000"], "greater than the model's maximum of 256"),
    (["--engine", "vllm", "--mem-fraction-static", "0.8"], "vLLM has no --mem-fraction-static"),
    (["--gpu-memory-utilization", "0.8"], "add --engine transformers or --engine vllm"),
    (["--engine", "vllm", "--gpu-memory-utilization", "1.5"], "must be in (0, 1]"),
    (["--engine", "vllm", "--gpu-memory-utilization", "0.01"], "no available memory for the cache blocks"),
    (["--engine", "sglang", "--mem-fraction-static", "0.01"], "increase --mem-fraction-static"),
    (["--engine", "sglang", "--num-scheduler-steps", "8"], "SGLang has no --num-scheduler-steps"),
    (["--engine", "vllm", "--num-scheduler-steps", "0"], "--num-scheduler-steps must be at least 1"),
    (["--engine", "vllm", "--enable-chunked-prefill", "2"], "--enable-chunked-prefill takes 0 or 1, got 2"),
    (["--engine", "vllm", "--enable-mixed-chunk", "1"], "vLLM has no --enable-mixed-chunk"),
])
def test_bad_knobs_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                           message: str) -> None:
    code = main(["llm", TINY, "--gpu", "rtx-3090", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_an_engine_prefills_within_its_token_budget(tiny) -> None:
    # the whole batch's prompts at once (64 x 128 tokens) without an engine; at most
    # max_num_batched_tokens a step with one (chunked prefill), so the activations shrink by that ratio
    h100 = [get("h100-sxm")]
    eager = serve(tiny, Priced(batch=64, prompt=128, output=32), h100, max_context=256).rows[0]
    chunked = serve(tiny, Priced(batch=64, prompt=128, output=32, engine="vllm",
                                 knobs={"max_num_batched_tokens": 256}), h100, max_context=256).rows[0]
    assert chunked.activation_bytes * 64 * 128 == eager.activation_bytes * 256
    assert chunked.max_context >= eager.max_context


def test_the_largest_batch_is_what_the_engine_admits(tiny) -> None:
    # 128 + 32 tokens a request: 10 blocks of 16; the engine admits blocks // 10 requests, at most max_num_seqs
    gpu = [get("rtx-3090")]
    for knobs in ({"max_num_seqs": 5}, {"gpu_memory_utilization": 0.05, "max_num_seqs": 100000}):
        row = serve(tiny, Priced(batch=1, prompt=128, output=32, engine="vllm", knobs=knobs), gpu,
                    max_context=256).rows[0]
        assert row.max_batch == min(row.vllm.blocks // 10, knobs["max_num_seqs"])


def test_vllm_serves_a_bf16_checkpoint_in_fp16_on_a_gpu_without_bf16() -> None:
    # vllm/platforms/cuda.py: a T4 (compute capability 7.5) supports fp16 and fp32, not bf16, and
    # _resolve_auto_dtype loads the bf16 checkpoint in fp16: priced exactly as the fp16 checkpoint
    llama = str(Path(__file__).parents[1] / "configs" / "llama-tiny")
    s = Priced(batch=2, prompt=64, output=16, engine="vllm")
    as_bf16, as_fp16 = (serve(trace_serving(llama, batch=2, prompt=64, dtype=d), s, [get("t4")], max_context=256)
                        for d in ("bfloat16", "float16"))
    [bf16], [fp16] = as_bf16.rows, as_fp16.rows
    assert (bf16.ttft_s, bf16.tpot_s, bf16.kv_bytes, bf16.weights_bytes) == (
        fp16.ttft_s, fp16.tpot_s, fp16.kv_bytes, fp16.weights_bytes)
    assert any("loads the bf16 checkpoint in fp16" in n for n in bf16.notes)
    # eager PyTorch (no engine) runs bf16 on a T4 as emulated bf16, off the tensor cores: slower
    plain = serve(trace_serving(llama, batch=2, prompt=64, dtype="bfloat16"), Priced(batch=2, prompt=64, output=16),
                  [get("t4")], max_context=256).rows[0]
    assert plain.ttft_s > bf16.ttft_s and not any("bf16" in n for n in plain.notes)
    # an A100 has bf16 units: vLLM keeps the checkpoint's dtype
    [a100] = serve(trace_serving(llama, batch=2, prompt=64, dtype="bfloat16"), s, [get("a100-sxm-80gb")],
                   max_context=256).rows
    assert not any("bf16" in n for n in a100.notes)


def test_vllm_loads_a_model_fp16_is_unstable_for_in_fp32_on_a_gpu_without_bf16() -> None:
    # vllm/config/model.py _FLOAT16_NOT_SUPPORTED_MODELS (gemma3_text among them): on a T4, vLLM loads the
    # bf16 Gemma-3 checkpoint in fp32, so the T4 row is the model traced in fp32 (4 bytes a parameter and a
    # cached value, the A100 row's 2); --quant bf16 is vLLM's --dtype given: as given
    from torch_footprint import api

    res = api.llm("hf:google/gemma-3-1b-pt", gpu=["t4", "a100-sxm-80gb"], engine="vllm", prompt=128, output=16)
    t4, a100 = res.rows
    assert any("loads gemma3_text in fp32" in n for n in t4.notes) and not any("fp32" in n for n in a100.notes)
    assert t4.kv_bytes == 2 * a100.kv_bytes
    assert t4.weights_bytes == pytest.approx(2 * a100.weights_bytes, rel=1e-3)
    given = api.llm("hf:google/gemma-3-1b-pt", gpu=["t4"], engine="vllm", prompt=128, output=16, quant="bf16").rows[0]
    assert given.weights_bytes == a100.weights_bytes and not any("fp32" in n for n in given.notes)
