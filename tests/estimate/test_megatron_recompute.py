"""Megatron-core's loss, its experts' weighting and its selective recompute, worked by hand on the
tiny configs.

Tiny Llama (tests/configs/llama-tiny): hidden 128, MLP 344, 2 layers, vocabulary 1,000; tiny
Qwen3-MoE (tests/configs/qwen3-moe-tiny): hidden 64, 4 experts of width 32, 2 a token, 2 layers.
Megatron-core's vocab-parallel cross entropy (megatron/core/tensor_parallel/cross_entropy.py) turns
one fp32 copy of the logits into the softmax in place and writes the gradient into it; torch's
cross entropy on fp32 logits keeps a log-softmax beside the copy. Its experts apply each routed
token's router weight in their activation; transformers applies it after the down projection, whose
output it then keeps for the weight's gradient. Selective recompute drops a norm's
or the experts' activation's output once read (CheckpointWithoutOutput) and remakes it in the
backward."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_footprint as tfp
from torch_footprint.analysis.memory import replay
from torch_footprint.cli import main
from torch_footprint.errors import FootprintError
from torch_footprint.estimate.workload import trace_step
from torch_footprint.settings import Parallel, Training, Workload
from torch_footprint.trace import Trace

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
LLAMA, MOE, MLA = str(CONFIGS / "llama-tiny"), str(CONFIGS / "qwen3-moe-tiny"), str(CONFIGS / "deepseek-v3-tiny")
VOCAB, HIDDEN, LAYERS = 1000, 128, 2


def _loss_bytes(framework: str, tokens: int) -> int:
    """Bytes the loss and the first operators of the backward hold above what was live before it."""
    trace, _ = trace_step(Workload(LLAMA, {"input_ids": f"2,{tokens // 2}:int64"}, precision="bf16-mixed"),
                          Training(train=True, optimizer="adamw"), Parallel(gpus=1, framework=framework))
    live = dict(replay(trace, keep_timeline=True).timeline)
    loss = [i for i, e in enumerate(trace.events) if e.phase == "loss"]
    backward = [i for i, e in enumerate(trace.events) if e.phase == "backward"][:5]
    return max(live[i] for i in loss + backward) - live[loss[0] - 1]


def test_megatrons_loss_holds_one_fp32_copy_of_the_logits() -> None:
    tokens = 128
    fp32_logits = 4 * tokens * VOCAB  # 512,000 bytes
    # Megatron-core: the fp32 copy, made the softmax in place, and three fp32 values a row (max, sum, log-sum)
    assert _loss_bytes("megatron", tokens) == fp32_logits + 3 * 4 * tokens
    # torch's cross entropy on fp32 logits: the copy and the log-softmax it keeps (and two values a row)
    assert _loss_bytes("torch", tokens) == 2 * fp32_logits + 2 * 4 * tokens


def _at_forward_end(trace: Trace) -> int:
    """Bytes live after the forward's last operator."""
    live = dict(replay(trace, keep_timeline=True).timeline)
    return live[max(i for i, e in enumerate(trace.events) if e.phase == "forward")]


def _forward_end_bytes(model: str) -> int:
    trace, _ = trace_step(Workload(model, {"input_ids": "2,64:int64"}),
                          Training(train=True, optimizer="adamw", fused_kernels=True), Parallel(gpus=1))
    return _at_forward_end(trace)


def test_fused_experts_weigh_the_routed_tokens_in_their_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch_footprint.estimate.layouts.fused as fused

    weighted = _forward_end_bytes(MOE)
    # the experts as transformers runs them, weights applied after the down projection
    monkeypatch.setattr(fused, "_experts_forward", lambda mod, forward, *args: forward(*args))
    after = _forward_end_bytes(MOE)
    # 128 tokens x 2 experts = 256 routed: transformers keeps the down projection's fp32 output (64 wide) for
    # the weights' gradient; the weighted gate keeps the 256 weights instead; 2 layers
    routed = 128 * 2
    assert after - weighted == LAYERS * (routed * 64 * 4 - routed * 4) == 129_024


def _total(model: str, ids: str, modules: tuple[str, ...], reuse: bool = True) -> int:
    return tfp.memory(model, ids, train=True, optimizer="adamw", recompute_modules=modules, reuse=reuse).total


@pytest.mark.parametrize("reuse", [True, False])
def test_recomputed_norms_free_their_outputs(reuse: bool) -> None:
    # each block's two RMSNorms give up their fp32 output (2 x 128 tokens x 128 wide x 4 bytes each), which
    # the linears after them would keep
    tokens = 256
    saved = LAYERS * 2 * tokens * HIDDEN * 4
    assert saved == 524_288
    assert _total(LLAMA, "2,128:int64", (), reuse) - _total(LLAMA, "2,128:int64", ("layernorm",), reuse) == saved


def test_recomputed_norms_run_again_in_the_backward() -> None:
    def backward_flops(modules: tuple[str, ...]) -> int:
        p = tfp.predict(LLAMA, "h100-sxm", "2,128:int64", train=True, optimizer="adamw", recompute_modules=modules)
        return sum(o.flops for o in p.ops if o.phase == "backward")

    # a Hugging Face RMSNorm's forward: square, mean, scale, weight (4 FLOPs an element) and eps, rsqrt
    # (2 a row), 256 rows of 128, four norms
    norm = 256 * HIDDEN * 4 + 256 * 2
    assert backward_flops(("layernorm",)) - backward_flops(()) == 2 * LAYERS * norm == 526_336


def test_recomputed_expert_activation_frees_its_output() -> None:
    # 128 tokens x 2 experts each, the gated activation's fp32 output 32 wide, in each of 2 layers
    saved = LAYERS * 128 * 2 * 32 * 4
    assert _total(MOE, "2,64:int64", ()) - _total(MOE, "2,64:int64", ("moe_act",)) == saved == 65_536
    both = _total(MOE, "2,64:int64", ("layernorm", "moe_act"))
    # and the norms: 4 of them, 128 tokens x 64 wide x 4 bytes
    assert _total(MOE, "2,64:int64", ()) - both == saved + 2 * LAYERS * 128 * 64 * 4
    assert both == _total(MOE, "2,64:int64", ("layernorm", "moe_act"), reuse=False)


def test_a_checkpointed_mlp_keeps_its_input_not_its_insides() -> None:
    kept, checkpointed = _total(LLAMA, "2,128:int64", ()), _total(LLAMA, "2,128:int64", ("mlp",))
    # inside each block's MLP: the gate's and up projection's outputs, SiLU's and the product (344 wide, fp32)
    insides = 4 * 256 * 344 * 4
    assert kept - checkpointed == LAYERS * insides == 2_818_048


def test_names_are_megatrons_and_checked() -> None:
    assert Training(train=True, recompute_modules=("layernorm,moe-act", "layernorm")).recompute_modules == (
        "layernorm", "moe_act")
    with pytest.raises(FootprintError, match="unknown --recompute-modules name 'norms'"):
        Training(train=True, recompute_modules=("norms",))
    with pytest.raises(FootprintError, match="add --train"):
        Training(recompute_modules=("mlp",))
    with pytest.raises(FootprintError, match="does not combine with --ac"):
        Training(train=True, ac="full", recompute_modules=("mlp",))


def _recomputed(attention: str, module: str, model: str = LLAMA, ids: str = "2,128:int64",
                reuse: bool = True, op: str = "") -> tuple[int, int]:
    """(bytes live at the forward's end, FLOPs of the backward's operators named ``op``, all by default)
    that recomputing ``module`` saves and adds, in fp32."""
    def run(modules: tuple[str, ...]) -> tuple[int, int]:
        w = Workload(model, {"input_ids": ids}, attention=attention, reuse=reuse)
        trace, _ = trace_step(w, Training(train=True, optimizer="adamw", recompute_modules=modules), Parallel(gpus=1))
        return _at_forward_end(trace), sum(e.flops for e in trace.events if e.phase == "backward" and op in e.op)

    (kept, flops), (checkpointed, again) = run(()), run((module,))
    return kept - checkpointed, again - flops


def test_checkpointed_eager_attention_drops_its_scores_and_recomputes_them() -> None:
    # 4 heads over 2 key-value heads, head 32, 2 x 128 tokens, fp32. Eager attention keeps the softmax's output
    # (2 x 4 x 128 x 128) and the keys and values repeated to every head (2 x 4 x 128 x 32 each); checkpointed, it
    # keeps the rotated keys and the values it was called with (2 x 2 x 128 x 32 each), and the call's mask
    # (2 x 1 x 128 x 128 fp32) and position ids (128 int64), made once for all layers, stay alive with it
    probs, repeated, own = 2 * 4 * 128 * 128 * 4, 2 * 4 * 128 * 32 * 4, 2 * 2 * 128 * 32 * 4
    saved, flops = _recomputed("eager", "core_attn")
    assert saved == LAYERS * (probs + 2 * repeated - 2 * own) - 2 * 128 * 128 * 4 - 128 * 8 == 1_178_624
    # the backward runs q @ k^T, the scale, the mask's add and the softmax (5 FLOPs an element) again; PyTorch's
    # checkpoint stops once the softmax's output is remade (nothing after it saves more)
    scores = 2 * 4 * 128 * 128
    assert flops == LAYERS * (2 * scores * 32 + 2 * scores + 5 * scores) == 18_612_224


def test_checkpointed_fused_attention_keeps_its_inputs_and_runs_its_forward_again() -> None:
    # the fused kernel (PyTorch's SDPA, keys and values shared by the heads they serve) keeps its inputs and its
    # output (the output projection reads the same storage) in both cases: checkpointed, only its log-sum-exp
    # (2 x 4 x 128 fp32 a layer) is not kept, the position ids (128 int64) stay alive with the call
    saved, flops = _recomputed("sdpa", "core_attn")
    assert saved == LAYERS * 2 * 4 * 128 * 4 - 128 * 8 == 7_168
    # its forward again in the backward, causal: the query-key pairs each query sees (128 x 129 / 2 of each of 8
    # heads), two matmuls of head 32 over them and the softmax's 5 FLOPs a pair
    pairs = 2 * 4 * 128 * 129 // 2
    assert flops == LAYERS * (2 * pairs * (32 + 32) + 5 * pairs) == 17_568_768


@pytest.mark.parametrize("reuse", [True, False])
def test_mla_up_projections_drop_query_key_and_value_and_remake_them(reuse: bool) -> None:
    # tiny DeepSeek-V3 (tests/configs/deepseek-v3-tiny): hidden 64, 4 heads, query latent 32, key-value latent
    # 16, heads of 8 + 8 rotary (query, key) and 8 (value), 2 layers, 2 x 64 tokens, fp32, one fused attention
    # call a layer. Dropped once the attention has read them: the query and the key (2 x 4 x 64 x 16 each) and
    # the key-value up-projection's output that the value is a view of (2 x 64 x 4 x (8 + 8)); the position
    # ids (64 int64) stay alive with the recipe
    q = k = kv = 2 * 4 * 64 * 16 * 4
    saved, flops = _recomputed("fused", "mla_up_proj", MLA, "2,64:int64", reuse, op="aten.mm")
    assert saved == LAYERS * (q + k + kv) - 64 * 8 == 196_096
    # remade by running the attention's forward again up to its attention call: the four projections of its
    # 128 tokens (64 -> 32 -> 4 x 16 for the query; 64 -> 16 + 8, then 16 -> 4 x (8 + 8) for key and value)
    assert flops == LAYERS * 2 * 128 * (64 * 32 + 32 * 64 + 64 * 24 + 16 * 64) == 3_407_872


def test_megatrons_granularity_is_the_mode_it_names() -> None:
    # Megatron-core's --recompute-granularity: selective recomputes its --recompute-modules, core_attn unless
    # named (TransformerConfig's default); full recomputes each block whole, as torchtitan's --ac full
    assert Training(train=True, recompute_granularity="selective").recompute_modules == ("core_attn",)
    assert Training(train=True, recompute_granularity="selective", recompute_modules=("mlp",)).recompute_modules == (
        "mlp",)
    full = Training(train=True, recompute_granularity="full")
    assert full.ac == "full" and full.checkpointing
    assert _total(LLAMA, "2,128:int64", ()) > tfp.memory(LLAMA, "2,128:int64", train=True, optimizer="adamw",
                                                         recompute_granularity="full").total == tfp.memory(
        LLAMA, "2,128:int64", train=True, optimizer="adamw", ac="full").total
    for bad in (dict(recompute_granularity="full", ac="selective"), dict(recompute_granularity="selective", ac="full"),
                dict(recompute_granularity="full", recompute_modules=("mlp",))):
        with pytest.raises(FootprintError, match="--recompute"):
            Training(train=True, **bad)  # type: ignore[arg-type]


def test_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", LLAMA, "--input-ids", "2,128", "--train", "--recompute-modules", "layernorm,mlp"]) == 0
    assert "selective recompute of layernorm (4), mlp (2) of 2 blocks" in capsys.readouterr().out
    assert main(["memory", LLAMA, "--input-ids", "2,128", "--train", "--recompute-modules", "core_attn"]) == 0
    assert "selective recompute of core_attn (2) of 2 blocks" in capsys.readouterr().out
    assert main(["memory", LLAMA, "--input-ids", "2,128", "--train", "--recompute-modules", "core-attn,mla"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown --recompute-modules name 'mla'" in err[0]


def test_transformer_engine_fp8_keeps_each_linears_input_in_fp8() -> None:
    # Megatron-core under --fp8: each linear (the head apart) keeps its input as one byte a value, once
    # however many linears read it. Tiny Llama in bf16, 128 tokens, each of its 2 layers: the first norm's
    # output (128 wide: q, k and v read it), the attention's output (128: the output projection), the second
    # norm's output (128: gate and up), SwiGLU's output (344: down): 2 bytes a value each, now 1. The
    # attention's output stays whole too: the fused attention keeps it for its own backward.
    def forward_end(fp8: str | None) -> int:
        trace, notes = trace_step(Workload(LLAMA, {"input_ids": "2,64:int64"}, precision="bf16-mixed"),
                                  Training(train=True, optimizer="adamw"),
                                  Parallel(gpus=1, framework="megatron", fp8=fp8))
        assert (fp8 is not None) == any("keep their inputs in fp8" in n for n in notes)
        return _at_forward_end(trace)

    tokens = 128
    freed = 2 * tokens * HIDDEN + tokens * 344  # bytes at 2 a value less 1 a value: the bf16 copies let go
    attention = tokens * HIDDEN  # its fp8 copy, beside the bf16 one the attention keeps
    assert forward_end(None) - forward_end("tensorwise") == LAYERS * (freed - attention) == 120_832
