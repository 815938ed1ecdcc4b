"""`footprint llm`: parameters, KV cache and quantized weights against closed forms worked by
hand from the published architectures and storage formats; the decode line against a
direct trace; bad input as one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from torch_footprint.cli import main  # noqa: E402
from torch_footprint.estimate.llm.pricing import Priced, active_params, serve, weight_bytes  # noqa: E402
from torch_footprint.estimate.llm.quantization import weight_scheme  # noqa: E402
from torch_footprint.estimate.llm.trace import trace_serving  # noqa: E402
from torch_footprint.hardware.catalog import get  # noqa: E402

CONFIGS = Path(__file__).parents[2] / "src" / "torch_footprint" / "sources" / "configs"
TINY = str(Path(__file__).parents[1] / "configs" / "gpt2-tiny")


@pytest.fixture(scope="module")
def llama2() -> object:
    return trace_serving("hf:meta-llama/Llama-2-7b-hf", batch=1, prompt=4)


def test_llama2_7b_parameters(llama2) -> None:
    # embeddings and head 2 x 32000 x 4096; per layer 4 x 4096^2 attention + 3 x 4096 x 11008 MLP + 2 norms
    layer = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    assert llama2.params == 2 * 32000 * 4096 + 32 * layer + 4096 == 6_738_415_616
    # fp16 cache: 32 layers x 32 heads x 128 x (key + value) x 2 bytes
    assert llama2.kv_bytes_per_token == 32 * 32 * 128 * 2 * 2


def _layer(st, scheme: str, index: int) -> int:
    costs = weight_bytes(st, weight_scheme(scheme))
    return sum(c for p, c in zip(st.prefill.params, costs, strict=True) if f".layers.{index}." in p.name)


Q, MLP = 4096 * 4096, 4096 * 11008  # weights of one attention projection, one MLP projection


def _int4(out: int, inp: int, g_idx: bool) -> int:
    """GPTQ/AWQ storage of one [out, in] linear: packed nibbles, int32 zeros and fp16 scales per 128 inputs."""
    groups = -(-inp // 128)
    return out * inp // 2 + groups * out // 2 + groups * out * 2 + (4 * inp if g_idx else 0)


@pytest.mark.parametrize("scheme, index, expected", [
    # GPTQ: q, k, v, o 4096x4096, gate and up [11008, 4096], down [4096, 11008]; norms fp16
    ("int4-g128", 0, 4 * _int4(4096, 4096, True) + 2 * _int4(11008, 4096, True) + _int4(4096, 11008, True)
     + 2 * 4096 * 2),
    ("int4-g128-awq", 0, 4 * _int4(4096, 4096, False) + 2 * _int4(11008, 4096, False)
     + _int4(4096, 11008, False) + 2 * 4096 * 2),
    # Q4_K_M, layer 0 (< 32/8: "more bits"): attn_v and ffn_down Q6_K (210 B / 256), the rest Q4_K (144 B / 256)
    ("q4_k_m", 0, 3 * Q // 256 * 144 + Q // 256 * 210 + 2 * MLP // 256 * 144 + MLP // 256 * 210 + 2 * 4096 * 4),
    # layer 4: (4 - 4) % 3 != 2, all Q4_K
    ("q4_k_m", 4, 4 * Q // 256 * 144 + 3 * MLP // 256 * 144 + 2 * 4096 * 4),
    # layer 6: (6 - 4) % 3 == 2, more bits again
    ("q4_k_m", 6, 3 * Q // 256 * 144 + Q // 256 * 210 + 2 * MLP // 256 * 144 + MLP // 256 * 210 + 2 * 4096 * 4),
    ("q8_0", 0, (4 * Q + 3 * MLP) // 32 * 34 + 2 * 4096 * 4),
    ("q4_0", 0, (4 * Q + 3 * MLP) // 32 * 18 + 2 * 4096 * 4),
    # GGUF Q4_1 (ggml-common.h block_q4_1: fp16 d and m, 16 bytes of nibbles): 20 bytes per 32 weights
    ("q4_1", 0, (4 * Q + 3 * MLP) // 32 * 20 + 2 * 4096 * 4),
    # NVFP4: half a byte a weight, an fp8 scale per 16 inputs of each output row, an fp32 global and
    # input scale per matrix (7 matrices); norms bf16
    ("nvfp4", 0, (4 * Q + 3 * MLP) // 2 + (4 * Q + 3 * MLP) // 16 + 7 * 8 + 2 * 4096 * 2),
    # NF4: 4 bits + one 8-bit absmax per 64 + one fp32 per 256 absmax blocks; norms bf16
    ("nf4", 0, 4 * (Q // 2 + Q // 64 + 4 * (Q // 64 // 256)) + 3 * (MLP // 2 + MLP // 64 + 4 * (MLP // 64 // 256))
     + 2 * 4096 * 2),
    ("fp8", 0, 4 * Q + 3 * MLP + 7 * 8 + 2 * 4096 * 2),
    ("int8", 0, 4 * Q + 3 * MLP + 2 * (4 * 4096 + 2 * 11008 + 4096) + 2 * 4096 * 2),
    ("bf16", 0, 2 * (4 * Q + 3 * MLP) + 2 * 4096 * 2),
    ("fp32", 0, 4 * (4 * Q + 3 * MLP) + 2 * 4096 * 4),  # a CPU runs it so: every tensor at 4 bytes
])
def test_one_layer_of_llama2_per_scheme(llama2, scheme: str, index: int, expected: int) -> None:
    assert _layer(llama2, scheme, index) == expected


def test_gguf_keeps_the_head_in_q6_k_and_norms_in_f32(llama2) -> None:
    costs = dict(zip((p.name for p in llama2.prefill.params), weight_bytes(llama2, weight_scheme("q4_k_m")),
                     strict=True))
    assert costs["lm_head.weight"] == 32000 * 4096 // 256 * 210
    assert costs["model.embed_tokens.weight"] == 32000 * 4096 // 256 * 144  # untied: the base type
    assert costs["model.norm.weight"] == 4096 * 4


def test_llama31_8b_parameters_and_kv_per_token() -> None:
    st = trace_serving("hf:meta-llama/Llama-3.1-8B", batch=1, prompt=4)
    layer = 4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096  # q, o; k, v (8 kv heads); MLP; norms
    assert st.params == 2 * 128256 * 4096 + 32 * layer + 4096 == 8_030_261_248
    assert st.kv_bytes_per_token == 131_072  # 32 layers x 8 kv heads x 128 x 2 x 2 bytes
    assert st.kv_bytes(1000, batch=3) == 3 * 1000 * 131_072


def test_mistral_cache_is_capped_by_its_window() -> None:
    st = trace_serving("hf:mistralai/Mistral-7B-v0.1", batch=1, prompt=4)
    per_token = 32 * 8 * 128 * 2 * 2
    assert st.kv_bytes_per_token == per_token
    assert st.kv_bytes(2048) == 2048 * per_token
    assert st.kv_bytes(32768) == 4096 * per_token  # sliding_window 4096: no layer keeps more


def test_gemma3_interleaves_local_and_global_layers() -> None:
    st = trace_serving("hf:google/gemma-3-1b-pt", batch=1, prompt=4)
    # 26 layers, every sixth global; 1 kv head of 256, keys and values in bf16: 1,024 bytes per token and layer
    local = [la for la in st.layers if la.cap]
    assert (len(local), len(st.layers)) == (22, 26)
    assert {la.cap for la in local} == {512}
    assert st.kv_bytes(4096) == 22 * 512 * 1024 + 4 * 4096 * 1024


def test_qwen2_config_contradiction_gets_what_the_model_does() -> None:
    # the config ships sliding_window 131072 with use_sliding_window false: every layer is full attention
    st = trace_serving("hf:Qwen/Qwen2-7B", batch=1, prompt=4)
    assert all(la.cap is None for la in st.layers)
    assert st.kv_bytes_per_token == 28 * 4 * 128 * 2 * 2


def test_falcon_multi_query_caches_one_head() -> None:
    st = trace_serving("hf:tiiuae/falcon-7b", batch=1, prompt=4)
    assert st.kv_bytes_per_token == 32 * 1 * 64 * 2 * 2


def test_mamba_keeps_a_fixed_state() -> None:
    st = trace_serving("hf:state-spaces/mamba-130m-hf", batch=1, prompt=2)
    # per layer: conv state d_inner 1536 x d_conv 4, ssm state 1536 x d_state 16, fp32
    assert st.kv_bytes_per_token == 0
    assert st.kv_bytes(1) == st.kv_bytes(100_000) == 24 * (1536 * 4 + 1536 * 16) * 4


def test_deepseek_v3_caches_the_latent(tmp_path: Path) -> None:
    # DeepSeek-V3's attention as shipped; the experts shrunk (the cache does not depend on them)
    cfg = json.loads((CONFIGS / "deepseek-ai--DeepSeek-V3.json").read_text())
    cfg.update(n_routed_experts=8, num_experts_per_tok=2, n_group=1, topk_group=1, moe_intermediate_size=64,
               vocab_size=256)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    st = trace_serving(str(tmp_path), batch=1, prompt=4)
    assert st.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272


def test_deepseek_v2_lite_parameters_latent_and_active() -> None:
    st = trace_serving("hf:deepseek-ai/DeepSeek-V2-Lite", batch=1, prompt=4)
    # attention without a query LoRA: q 2048 -> 16 x (128 + 64), kv_a 2048 -> 512 + 64 and its norm,
    # kv_b 512 -> 16 x (128 + 128), o 16 x 128 -> 2048; two norms per layer
    attention = 2048 * 3072 + 2048 * 576 + 512 + 512 * 4096 + 2048 * 2048 + 2 * 2048
    expert = 3 * 2048 * 1408
    moe = 64 * expert + 3 * 2048 * 2 * 1408 + 64 * 2048  # routed, two shared, router
    dense = 3 * 2048 * 10944  # the first layer's MLP (first_k_dense_replace 1)
    total = 2 * 102400 * 2048 + 27 * attention + dense + 26 * moe + 2048
    assert st.params == total == 15_706_484_224
    assert st.kv_bytes_per_token == 27 * (512 + 64) * 2 == 31_104
    active, routed = active_params(st)
    assert routed == 26 * 64 * expert
    assert active == total - routed + 26 * 6 * expert  # 6 of 64 routed experts per token


def test_mixtral_total_and_active_parameters() -> None:
    st = trace_serving("hf:mistralai/Mixtral-8x7B-v0.1", batch=1, prompt=4)
    experts = 32 * 8 * 3 * 4096 * 14336
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 8 * 4096 + 2 * 4096  # attention, router, norms
    total = 2 * 32000 * 4096 + 32 * layer + experts + 4096
    assert st.params == total == 46_702_792_704
    active, routed = active_params(st)
    assert routed == experts
    assert active == total - experts + experts // 4 == 12_879_925_248  # 2 of 8 experts per token
    assert st.experts.touched(1) == pytest.approx(2.0)
    assert st.experts.touched(10_000) == pytest.approx(8.0)
    # at batch 1, a decode step reads 2 of the 8 experts' weights
    s = Priced(batch=1, prompt=4, output=1)
    r = serve(st, s, [get("h100-sxm")], max_context=None)
    assert r.weights_bytes == 2 * total + sum(b.nbytes for b in st.prefill.buffers)  # bf16; rotary buffers


def test_decode_line_matches_a_direct_trace() -> None:
    short = trace_serving(TINY, batch=1, prompt=8)
    long = trace_serving(TINY, batch=1, prompt=40)
    at40 = short.decode_at(40)
    direct = long.decode[0]
    assert sum(e.flops for e in at40.events) == sum(e.flops for e in direct.events)
    assert sum(e.macs for e in at40.events) == sum(e.macs for e in direct.events)


def test_memory_adds_up_and_batch_scales(llama2) -> None:
    s = Priced(batch=4, prompt=1000, output=24)
    row = serve(llama2, s, [get("a100-sxm-80gb")], max_context=4096).rows[0]
    assert row.kv_bytes == 4 * 1024 * 524_288  # 4 requests x 1,024 tokens x 512 KiB
    assert row.weights_bytes == 2 * 6_738_415_616 + sum(b.nbytes for b in llama2.prefill.buffers)
    assert row.fits and row.max_batch > 4
    assert row.max_context == 4096  # the model's maximum caps the search


@pytest.mark.parametrize("argv, message", [
    (["llm", "hf:bert-base-uncased"], "not a causal language model"),
    (["llm", TINY, "--prompt", "250", "--output", "10"], "beyond the model's maximum of 256"),
    (["llm", TINY, "--quant", "int3"], "unknown weight scheme 'int3'"),
    (["llm", TINY, "--kv", "fp4"], "unknown KV-cache scheme 'fp4'"),
    (["llm", TINY, "--batch", "0"], "at least 1"),
    (["llm", TINY, "--prompt", "0"], "at least 1"),
    (["llm", TINY, "--gpus", "4", "--tp", "3"], "--tp 3 must divide --gpus 4"),
    (["llm", TINY, "--prompt", "16", "--output", "16", "--gpu", "h1000"], "h1000"),
])
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_longer_context_allowed_on_request_and_fp8_without_units_said(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["llm", TINY, "--prompt", "250", "--output", "10", "--allow-longer", "--weights", "fp8",
                 "--gpu", "a100-sxm-80gb"])
    out = capsys.readouterr().out
    assert code == 0
    assert "no fp8 units: matrix work at the bf16 rate" in out


@pytest.mark.slow
def test_measure_runs_the_model_with_its_cache(capsys: pytest.CaptureFixture[str]) -> None:
    from torch_footprint import api

    res = api.llm(TINY, prompt=16, output=4, batch=2, measure=True)
    m = res.measured
    assert m["batch"] == 2 and m["output"] == 4
    assert 0 < m["tpot_s"] <= m["tpot_p90_s"]
    assert m["tokens_per_s"] == pytest.approx(2 / m["tpot_s"])
    # the allocator's peak over a generation holds at least the weights and the cache it built
    weights = sum(p.nbytes for p in trace_serving(TINY, batch=1, prompt=1).prefill.params)
    assert m["peak_bytes"] >= weights + 2 * 20 * (2 * 2 * 128 * 4)  # 2 sequences x 20 tokens x 2 layers k+v fp32
    # sampled over the timed generations: how busy, RSS, and energy per token or why there is none
    s = m["sampling"]
    assert s["device_busy"] > 0 and s["rss_peak"] > 0
    assert "energy_per_token_j" in s or s["unavailable"]["energy"]
    # no calibration in the test's home: no local prediction, and the answer says why
    assert not res.rows and any("footprint calibrate" in n for n in res.notes)


def test_html_report_draws_memory_against_context_and_tokens_against_batch(tmp_path: Path) -> None:
    from html.parser import HTMLParser

    out = tmp_path / "llm.html"
    assert main(["llm", TINY, "--prompt", "16", "--output", "16", "--gpu", "l4", "--gpu", "h100-sxm",
                 "--html", str(out)]) == 0
    page = out.read_text()
    links: list[str] = []

    class Links(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            links.extend(v or "" for k, v in attrs if k in ("src", "href"))

    Links().feed(page)
    assert links == []  # nothing fetched: the page is whole
    assert "Serving a language model" in page
    assert 'aria-label="memory against context"' in page and 'aria-label="tokens per second against batch"' in page
    assert "batch 1 · prompt 16 + output 16 tokens" in page


def test_an_encoders_language_model_head_is_declined() -> None:
    # BERT's LM head with is_decoder false fills a cache it is handed but returns none: generate()
    # would recompute the whole sequence at every token, so there is no decode step to price
    from transformers import BertConfig, BertLMHeadModel

    from torch_footprint.errors import FootprintError

    cfg = BertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2,
                     vocab_size=512)
    with pytest.raises(FootprintError, match="returned no cache"):
        trace_serving(BertLMHeadModel(cfg), batch=1, prompt=4)


def test_a_cache_class_of_the_models_own_holds_the_linear_attention_state() -> None:
    # MiniMax builds a MiniMaxCache: a key/value layer for the softmax-attention layer and, outside
    # its layers, one (batch, heads, head_dim, head_dim) state per linear-attention layer (fp32 here)
    from transformers import MiniMaxConfig, MiniMaxForCausalLM

    cfg = MiniMaxConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        intermediate_size=128, num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2,
                        vocab_size=512, layer_types=["linear_attention", "full_attention"])
    st = trace_serving(MiniMaxForCausalLM(cfg), batch=1, prompt=4)
    per_token = 2 * 2 * 16 * 4  # keys and values, 2 kv heads of 16, fp32
    state = 4 * 16 * 16 * 4
    assert st.kv_bytes_per_token == per_token
    assert st.kv_bytes(100) == 100 * per_token + state
    assert st.kv_bytes(100, batch=3) == 3 * (100 * per_token + state)


def test_a_decoder_that_reads_its_own_mask_is_traced_on_real_tensors() -> None:
    # BART's decoder builds a mask of ones when given none and asks whether it is all ones, which
    # meta tensors cannot answer: the serving trace runs on real tensors and says so
    from transformers import BartConfig, BartForCausalLM

    cfg = BartConfig(d_model=64, decoder_attention_heads=4, decoder_ffn_dim=128, decoder_layers=2,
                     encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128, vocab_size=512)
    st = trace_serving(BartForCausalLM(cfg), batch=1, prompt=4)
    assert st.kv_bytes_per_token == 2 * 2 * 64 * 4  # 2 layers, keys and values of width 64, fp32
    assert any("real CPU tensors" in n for n in st.notes)


def test_a_window_that_keeps_the_prompt_is_not_taken_at_its_word() -> None:
    # UnlimitedOCR's reference sliding-window layer keeps every prompt token and windows only the
    # generated ones; its stated maximum would undercount a long prompt, so the trace runs the model
    # past it, finds the layer holding more, and counts every token (an upper bound, said in a note)
    from transformers import AutoConfig, AutoModelForImageTextToText

    cfg = AutoConfig.for_model("unlimited_ocr")
    for sub in (cfg.vision_config.sam_config, cfg.vision_config.encoder_config):
        sub.update({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4})
    cfg.vision_config.encoder_config.intermediate_size = 128
    cfg.text_config.update({"vocab_size": 512, "num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4,
                            "num_key_value_heads": 4, "head_dim": 16, "intermediate_size": 128,
                            "moe_intermediate_size": 128, "n_routed_experts": 4, "num_experts_per_tok": 2,
                            "mlp_layer_types": ["dense"], "layer_types": ["reference_sliding_attention"],
                            "sliding_window": 8})
    st = trace_serving(AutoModelForImageTextToText.from_config(cfg), batch=1, prompt=4)
    per_token = 2 * 4 * 16 * 4  # keys and values, 4 heads of 16, fp32
    assert st.kv_bytes(100) == 100 * per_token
    assert any("counted without the window" in n for n in st.notes)


@pytest.mark.parametrize("extra, message", [
    # said before the trace, which fails on BERT's position buffer
    (["--prompt", "1024", "--output", "256"], "beyond the model's maximum of 512"),
    ([], "returned no cache"),  # the default lengths fitted within the 512 positions
    (["--prompt", "256", "--output", "16"], "returned no cache"),
])
def test_an_encoders_lm_head_from_a_config_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  extra: list[str], message: str) -> None:
    cfg = json.loads((CONFIGS / "bert-base-uncased.json").read_text())
    cfg["architectures"] = ["BertLMHeadModel"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["llm", str(tmp_path), "--gpu", "h100-sxm", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize("kind, numel, row, expected", [
    ("q4_k", 4096 * 4096, 4096, 4096 * 16 * 144),  # 16 blocks of 256 per row, 144 bytes each
    ("q4_k", 64 * 96, 96, 64 * 3 * 22),  # 96 is no multiple of 256: Q5_0, 3 blocks of 32 per row, 22 bytes
    ("q6_k", 64 * 96, 96, 64 * 3 * 34),  # Q6_K falls back to Q8_0
    ("q4_k", 1536 * 4, 4, 1536 * 4 * 2),  # a Mamba convolution's rows of 4 fit no block: F16
    ("q8_0", 1024 * 14, 14, 1024 * 14 * 2),  # a 14-wide patch kernel: F16
])
def test_gguf_rows_that_fit_no_block_fall_back_as_llama_cpp_does(kind: str, numel: int, row: int,
                                                                  expected: int) -> None:
    from torch_footprint.estimate.llm.quantization import gguf_bytes

    assert gguf_bytes(kind, numel, row) == expected


def test_q4_k_m_keeps_what_llama_cpp_keeps_in_f32() -> None:
    # llama.cpp's converter writes a state-space convolution (SSM_CONV1D) and a router
    # (FFN_GATE_INP) in F32, and its quantizer leaves them so
    st = trace_serving("hf:state-spaces/mamba-130m-hf", batch=1, prompt=2)
    costs = dict(zip((p.name for p in st.prefill.params), weight_bytes(st, weight_scheme("q4_k_m")), strict=True))
    assert costs["backbone.layers.0.mixer.conv1d.weight"] == 1536 * 4 * 4  # (1536, 1, 4) in F32
    assert costs["backbone.layers.0.mixer.in_proj.weight"] == 3072 * 768 // 256 * 144  # Q4_K
    mixtral = trace_serving("hf:mistralai/Mixtral-8x7B-v0.1", batch=1, prompt=2)
    costs = dict(zip((p.name for p in mixtral.prefill.params), weight_bytes(mixtral, weight_scheme("q4_k_m")),
                     strict=True))
    assert costs["model.layers.0.mlp.gate.weight"] == 8 * 4096 * 4


def test_nvfp4_on_a_gpu_without_a_listed_fp4_rate_runs_at_fp8(llama2) -> None:
    # the H100 has no fp4 units: NVFP4's matrix work falls back to fp8, and the row says so
    h100 = get("h100-sxm")
    assert h100.peak("fp4") is None and h100.peak("fp8") is not None
    s = Priced(batch=1, prompt=8, output=8, weights=weight_scheme("fp4"))
    row = serve(llama2, s, [h100], max_context=None).rows[0]
    assert any("no fp4 rate listed: matrix work at the fp8 rate" in n for n in row.notes)
    # the B200 lists its dense fp4 rate: HGX B200's 144 PFLOPS (2:4 sparse, 8 GPUs) halved, per GPU
    b200 = get("b200")
    assert b200.peak("fp4") == pytest.approx(144e15 / 8 / 2)  # FLOP/s
    assert not any("no fp4 rate" in n for n in serve(llama2, s, [b200], max_context=None).rows[0].notes)


def test_gpt_oss_checkpoints_in_mxfp4_weigh_what_their_model_card_prints() -> None:
    # OpenAI's gpt-oss model card (arXiv:2508.10925, table 1): checkpoints of 12.8 GiB and 60.8 GiB, the
    # experts in MXFP4, what the config's modules_to_not_convert names (attention, router, embeddings,
    # head) in bf16; the activations and the cache in bf16 though the config names no dtype
    from torch_footprint import api

    kv = {}
    for model, card in (("hf:openai/gpt-oss-20b", 12.8), ("hf:openai/gpt-oss-120b", 60.8)):
        res = api.llm(model, gpu=["h100-sxm"], prompt=16, output=4)
        assert res.rows[0].weights_bytes / 2**30 == pytest.approx(card, rel=0.005)
        kv[model] = (res.kv_scheme, res.kv_bytes_per_token)
    # a token's cache: layers x key and value x 8 heads x 64 x 2 bytes (bf16, not the fp32 of a build without dtype)
    assert kv["hf:openai/gpt-oss-20b"] == ("bfloat16", 24 * 2 * 8 * 64 * 2)
    assert kv["hf:openai/gpt-oss-120b"] == ("bfloat16", 36 * 2 * 8 * 64 * 2)


def test_mxfp4_prices_a_byte_per_two_weights_and_a_scale_per_32() -> None:
    from torch_footprint.estimate.llm.quantization import Param, checkpoint_scheme

    class Config:
        quantization_config = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}

    scheme = checkpoint_scheme(Config())
    assert scheme is not None and scheme.name == "mxfp4"
    # 2 experts of 64 x 96 (input last): 12,288 weights in 6,144 bytes, 3 scales on each of 128 rows
    experts = Param("model.layers.0.mlp.experts.down_proj", (2, 64, 96), "linear", 0, 2, 2)
    assert scheme.bytes_of(experts) == 6_144 + 384
    # a module the config keeps out stays in bf16
    q = Param("model.layers.1.self_attn.q_proj.weight", (64, 96), "linear", 1, 2, 2)
    assert scheme.bytes_of(q) == 2 * 64 * 96


def test_a_checkpoint_scheme_not_priced_is_refused_not_taken_as_the_dtype() -> None:
    from torch_footprint.errors import FootprintError
    from torch_footprint.estimate.llm.quantization import checkpoint_scheme

    class Config:
        quantization_config = {"quant_method": "hqq", "bits": 3}

    with pytest.raises(FootprintError, match=r"quantization_config \(hqq, bits 3\) is not a scheme"):
        checkpoint_scheme(Config())
