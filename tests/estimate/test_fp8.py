"""FP8 training priced by hand on the tiny Llama (hidden 128, 4 heads of 32 with 2 key/value heads,
MLP 344, vocab 1000, 2 layers) in bf16 autocast: which matmuls run in fp8, their casts, their rate."""

from __future__ import annotations

from pathlib import Path

import pytest

from torch_footprint import api
from torch_footprint.cli import main
from torch_footprint.estimate.kernels import constants as fitted
from torch_footprint.estimate.kernels.fp8 import fp8_casts
from torch_footprint.estimate.kernels.roofline import estimate_latency
from torch_footprint.estimate.workload import trace_step
from torch_footprint.hardware import get
from torch_footprint.settings import Training, Workload

LLAMA = str(Path(__file__).resolve().parents[1] / "configs" / "llama-tiny")
IDS = {"input_ids": "2,64:int64"}


def _trace():
    return trace_step(Workload(LLAMA, IDS, precision="bf16-mixed"), Training(train=True, optimizer="adamw"))[0]


def test_the_linear_layers_with_sixteen_aligned_sides_run_in_fp8():
    t = _trace()
    casts = fp8_casts(t, "tensorwise")
    # q, o (128 x 128) and k, v (128 x 64) per layer; gate, up and down have 344 (not a multiple of 16, as
    # torchao requires) and the head stays in bf16: 4 linears x 3 matmuls (forward, input and weight
    # gradients) x 2 layers
    assert len(casts) == 24
    q = next(i for i, e in enumerate(t.events) if e.module == "model.layers.0.self_attn.q_proj"
             and e.phase == "forward" and e.kind == "matrix")
    # its operands: the 128 tokens x 128 input and the 128 x 128 weight, bf16: 32,768 elements; dynamic
    # scaling reads each for its amax (2 B), again to cast (2 B) and writes a byte: 163,840 B
    assert t.events[q].bytes_read == 65_536 and casts[q] == 163_840
    assert fp8_casts(t, "delayed")[q] == 32_768 * 3  # the amax history: no pass of its own


def test_transformer_engines_casts_under_megatron_core():
    # Megatron-core's FP8 is Transformer Engine's: per linear, the input cast once in the forward
    # and the output's gradient once in the backward, each by a cast-transpose (read 2 B, and for
    # current scaling read again for the amax; write the fp8 byte and its transpose's: 4 or 6 B
    # an element of the 2-byte operand, 2x or 3x its bytes); the weight cast once a step (4
    # micro-batches here); the weight gradient's GEMM casts nothing
    from torch_footprint.settings import Parallel

    w = Workload(LLAMA, IDS, precision="bf16-mixed")
    t = trace_step(w, Training(train=True, optimizer="adamw", grads="zero"),
                   Parallel(framework="megatron", fp8="delayed", grad_accum=4))[0]
    casts = fp8_casts(t, "delayed", micro_batches=4)
    mms = [i for i, e in enumerate(t.events) if e.module == "model.layers.0.self_attn.q_proj" and e.kind == "matrix"]
    forward, data, weight = (next(i for i in mms if t.events[i].phase == "forward" and t.events[i].weights),
                             next(i for i in mms if t.events[i].phase == "backward" and t.events[i].weights),
                             next(i for i in mms if t.events[i].phase == "backward" and not t.events[i].weights))
    x = w_ = 128 * 128 * 2  # the 128 tokens x 128 input (and its gradient), the 128 x 128 weight, bf16
    assert casts[forward] == x * 2 + w_ * 2 // 4
    assert casts[data] == x * 2 and casts[weight] == 0
    assert fp8_casts(t, "tensorwise", 4)[forward] == x * 3 + w_ * 3 // 4


def test_transformer_engines_linears_under_pytorch():
    # --fp8-engine transformer-engine without Megatron-core (llm-foundry's fc_type te, Lightning's and Accelerate's
    # TE back ends): Transformer Engine's casts (the input and the output's gradient once with their transposes, the
    # weight gradient's GEMM nothing), and the inputs kept in fp8 for the backward
    from torch_footprint.analysis.memory import replay
    from torch_footprint.settings import Parallel

    w = Workload(LLAMA, IDS, precision="bf16-mixed")
    t, notes = trace_step(w, Training(train=True, optimizer="adamw", grads="zero"),
                          Parallel(fp8="delayed", fp8_engine="transformer-engine", grad_accum=4))
    casts = fp8_casts(t, "delayed", micro_batches=4)
    mms = [i for i, e in enumerate(t.events) if e.module == "model.layers.0.self_attn.q_proj" and e.kind == "matrix"]
    forward = next(i for i in mms if t.events[i].phase == "forward")
    wgrad, data = (i for i in mms if t.events[i].phase == "backward")  # PyTorch's MmBackward0: the weight's first
    x = w_ = 128 * 128 * 2
    # the weight cast every micro-batch: a PyTorch stack passes TE no is_first_microbatch (Megatron-core does)
    assert casts[forward] == (x + w_) * 2 and casts[wgrad] == 0 and casts[data] == x * 2
    plain = trace_step(w, Training(train=True, optimizer="adamw", grads="zero"),
                       Parallel(fp8="delayed", grad_accum=4))[0]
    assert t.settings["fp8_engine"] == "transformer-engine" and "fp8_engine" not in plain.settings
    assert any("keep their inputs in fp8" in n for n in notes)

    def forward_end(trace) -> int:  # what lives as the backward starts: the inputs the linears keep
        live = dict(replay(trace, keep_timeline=True).timeline)
        return live[max(i for i, e in enumerate(trace.events) if e.phase == "forward")]

    # per layer, under autocast: each linear keeps autocast's bf16 copy of its weight, now 1 byte a value (q, o 128 x
    # 128; k, v 64 x 128; gate, up, down 344 x 128: 181,248 values, 181,248 B saved); q, k, v and gate, up each
    # keep their own bf16 cast of the fp32 norm output (128 tokens x 128: 16,384 B saved each, 5 of them); down keeps
    # SwiGLU's 128 x 344 output (44,032 B saved); o keeps an fp8 copy of the attention's output, which the fused
    # attention keeps in bf16 for its own backward (16,384 B more)
    per_layer = 181_248 + 5 * 16_384 + 44_032 - 16_384
    assert forward_end(plain) - forward_end(t) == 2 * per_layer == 581_632


def test_fp8_matmuls_at_the_fp8_rate_and_casts_as_their_own_kernels():
    t = _trace()
    h100 = get("h100-sxm")  # dense bf16 989.4 TFLOP/s, fp8 1978.9 (the datasheet's sparse figures halved)
    bf16 = estimate_latency(t, h100)
    fp8 = estimate_latency(t, h100, fp8="tensorwise")
    floor = fitted.current().kernel_floor_s
    # the same matmul at the achievable fp8 rate instead of the bf16 one (the ceilings' figures: the
    # datasheet's x the kernel model's efficiency of each dtype)
    ratio = fp8.ceilings.matrix["bf16"] / fp8.ceilings.matrix["fp8"]
    assert ratio == pytest.approx(989.4 / 1978.9, rel=0.05)
    for i, extra in fp8_casts(t, "tensorwise").items():
        a, b = bf16.ops[i], fp8.ops[i]
        assert (b.compute_s - floor) == pytest.approx((a.compute_s - floor) * ratio, rel=1e-9)
        assert b.kernels_s == pytest.approx(extra / fp8.ceilings.bandwidth)
    assert any("24 matmuls of linear layers at the fp8 rate" in n for n in fp8.notes)
    # rowwise's GEMMs are priced as tensorwise's, and it says that this is an optimistic bound (its CUTLASS GEMM)
    rowwise = estimate_latency(t, h100, fp8="rowwise")
    assert rowwise.time_s >= fp8.time_s
    assert any("an optimistic bound" in n for n in rowwise.notes)
    assert not any("an optimistic bound" in n for n in fp8.notes)


def test_rowwise_scaling_transposes_the_operands_the_backward_reads_across_their_rows():
    # k_proj: weight 64 x 128 (16,384 B), input 128 tokens x 128 (32,768 B), output gradient 128 x 64 (16,384 B),
    # bf16. Each GEMM casts its operands (2.5 x their bytes); row-wise scales run along the reduction, so the data
    # gradient's weight and both of the weight gradient's operands are first transposed in bf16 (2 x their bytes)
    t = _trace()
    mms = [i for i, e in enumerate(t.events) if e.module == "model.layers.0.self_attn.k_proj" and e.kind == "matrix"]
    backward = {tuple(t.events[i].out_shapes[0]): i for i in mms if t.events[i].phase == "backward"}
    forward = next(i for i in mms if t.events[i].phase == "forward")
    wgrad, dgrad = backward[64, 128], backward[128, 128]  # the weight's shape; the input's
    tensorwise, rowwise = fp8_casts(t, "tensorwise"), fp8_casts(t, "rowwise")
    assert tensorwise[forward] == rowwise[forward] == (32_768 + 16_384) * 5 // 2
    assert tensorwise[dgrad] == (16_384 + 16_384) * 5 // 2 and rowwise[dgrad] == tensorwise[dgrad] + 2 * 16_384
    assert tensorwise[wgrad] == (16_384 + 32_768) * 5 // 2 and rowwise[wgrad] == tensorwise[wgrad] + 2 * 49_152


def test_a_model_without_linear_layers_says_no_matmul_runs_in_fp8():
    # GPT-2's projections are transformers' Conv1D, not nn.Linear: torchao's convert_to_float8_training and Transformer
    # Engine's linears leave them in bf16, so --fp8 changes nothing, and says so rather than print the bf16 time bare
    gpt2 = str(Path(__file__).resolve().parents[1] / "configs" / "gpt2-tiny")
    t = trace_step(Workload(gpt2, IDS, precision="bf16-mixed"), Training(train=True, optimizer="adamw"))[0]
    h100 = get("h100-sxm")
    fp8 = estimate_latency(t, h100, fp8="tensorwise")
    assert fp8_casts(t, "tensorwise") == {} and fp8.time_s == estimate_latency(t, h100).time_s
    assert any("no matmul runs in fp8" in n and "Conv1D" in n for n in fp8.notes)


def test_fit_keeps_the_gpus_with_fp8_units():
    res = api.fit(LLAMA, IDS, train=True, optimizer="adamw", precision="bf16-mixed", fp8="tensorwise")
    ids = {r.accelerator.id for r in res.rows}
    assert "h100-sxm" in ids and "a100-sxm-80gb" not in ids and "t4" not in ids
    assert any("only the accelerators with fp8 units" in n for n in res.notes)


def test_rowwise_with_gw_hp_keeps_the_weight_gradient_in_bf16():
    # torchao's rowwise_with_gw_hp on k_proj (weight 64 x 128: 16,384 B; input 128 x 128: 32,768 B; output gradient
    # 128 x 64: 16,384 B, bf16): the forward as rowwise (2.5 x its operands' bytes); the data gradient scales the
    # weight per tensor, so no bf16 transpose first; the weight gradient's GEMM runs in bf16, uncast
    t = _trace()
    mms = [i for i, e in enumerate(t.events) if e.module == "model.layers.0.self_attn.k_proj" and e.kind == "matrix"]
    backward = {tuple(t.events[i].out_shapes[0]): i for i in mms if t.events[i].phase == "backward"}
    forward = next(i for i in mms if t.events[i].phase == "forward")
    casts = fp8_casts(t, "rowwise_with_gw_hp")
    assert casts[forward] == (32_768 + 16_384) * 5 // 2
    assert casts[backward[128, 128]] == (16_384 + 16_384) * 5 // 2
    assert backward[64, 128] not in casts
    assert len(casts) == 16  # of rowwise's 24: the 8 weight gradients stay in bf16
    h100 = get("h100-sxm")
    hp = estimate_latency(t, h100, fp8="rowwise_with_gw_hp")
    assert hp.ops[backward[64, 128]].compute_s == estimate_latency(t, h100).ops[backward[64, 128]].compute_s


def test_mxfp8_casts_once_a_gemm_with_a_scale_per_32_values_and_runs_on_blackwell_only():
    # q_proj's forward reads the 128 tokens x 128 input and the 128 x 128 weight, bf16: 32,768 elements. An MX cast
    # reads each 2-byte value once and writes its byte and, per 32 values, a 1-byte E8M0 scale: 2 + 1 + 1/32 B an
    # element (torchao's MX, a cast per GEMM); Transformer Engine writes the row-wise and column-wise copies in one
    # kernel: 2 + 2 x (1 + 1/32) B, its weight cast once over 4 micro-batches
    from torch_footprint.settings import Parallel

    t = _trace()
    q = next(i for i, e in enumerate(t.events) if e.module == "model.layers.0.self_attn.q_proj"
             and e.phase == "forward" and e.kind == "matrix")
    assert fp8_casts(t, "mxfp8")[q] == 32_768 * 2 + 32_768 + 32_768 // 32
    w = Workload(LLAMA, IDS, precision="bf16-mixed")
    te = trace_step(w, Training(train=True, optimizer="adamw", grads="zero"),
                    Parallel(framework="megatron", fp8="mxfp8", grad_accum=4))[0]
    forward = next(i for i, e in enumerate(te.events) if e.module == "model.layers.0.self_attn.q_proj"
                   and e.phase == "forward" and e.kind == "matrix")
    per = 2 + 2 * (1 + 1 / 32)
    assert fp8_casts(te, "mxfp8", micro_batches=4)[forward] == int(16_384 * per + 16_384 * per / 4)
    # block-scaled matmuls: Blackwell's (compute capability 10.0 and 12.0), not Hopper's or AMD's CDNA3
    from torch_footprint.estimate.kernels.fp8 import block_scaled

    assert [block_scaled(get(g)) for g in ("b200", "rtx-5090", "h100-sxm", "mi300x")] == [True, True, False, False]
    res = api.fit(LLAMA, IDS, train=True, optimizer="adamw", precision="bf16-mixed", fp8="mxfp8")
    assert {r.accelerator.id for r in res.rows} == {"b200", "rtx-5090", "rtx-5080"}
    assert any("only the accelerators with MX units" in n for n in res.notes)


@pytest.mark.parametrize(("argv", "message"), [
    (["--fp8", "tensorwise", "--precision", "bf16-mixed", "--gpu", "a100-sxm-80gb"],
     "--fp8 tensorwise: a100-sxm-80gb has no fp8 units (no fp8 rate in its row)"),
    (["--fp8", "rowwise", "--gpu", "h100-sxm"], "--fp8 rowwise casts bf16 or fp16 matmuls to fp8: add --precision"),
    (["--fp8", "mxfp8", "--precision", "bf16-mixed", "--gpu", "h100-sxm"],
     "--fp8 mxfp8: h100-sxm has no block-scaled (MX) matmul units"),
    (["--fp8", "nvfp4", "--gpu", "b200"],
     "unknown FP8 recipe 'nvfp4': use none, tensorwise, rowwise, rowwise_with_gw_hp, delayed, mxfp8"),
    (["--fp8", "rowwise", "--precision", "bf16-mixed", "--framework", "megatron", "--gpu", "h100-sxm"],
     "--fp8 rowwise is torchao's; Transformer Engine's recipes priced here: tensorwise, delayed, mxfp8"),
    (["--fp8", "tensorwise", "--framework", "megatron", "--fp8-engine", "torchao", "--gpu", "h100-sxm"],
     "--fp8-engine torchao: Megatron-core's FP8 is Transformer Engine's"),
    (["--fp8-engine", "te", "--gpu", "h100-sxm"], "--fp8-engine transformer-engine runs FP8 training: add --fp8"),
])
def test_fp8_bad_input_is_one_line_and_exit_code_2(argv: list[str], message: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["fit", LLAMA, "--input-ids", "2,64", "--train", *argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_torchaos_tensor_parallel_styles_cast_each_modules_input_once_before_its_gather():
    # torchtitan's float8 TP plan (tensorwise): PrepareFloat8ModuleInput casts the attention's input on each
    # rank's half of the 128 tokens (TP 2, sequence parallel), and q, k and v read that one fp8 tensor
    from torch_footprint.estimate.workload import colwise_input_shares
    from torch_footprint.settings import Parallel

    plan = {"a.q": "colwise", "a.k": "colwise", "a.v": "colwise", "a.o": "rowwise", "m.gate": "colwise",
            "m.up": "colwise", "m.down": "rowwise"}
    assert colwise_input_shares(plan, 4) == {"a.q": 12, "a.k": 12, "a.v": 12, "m.gate": 8, "m.up": 8}
    t = trace_step(Workload(LLAMA, IDS, precision="bf16-mixed"), Training(train=True, optimizer="adamw"),
                   Parallel(gpus=2, tp=2, sequence_parallel=True))[0]
    q = next(i for i, e in enumerate(t.events) if e.module == "model.layers.0.self_attn.q_proj"
             and e.phase == "forward" and e.kind == "matrix")
    x, w_ = 128 * 128 * 2, 64 * 128 * 2  # the gathered 128 tokens x 128 input; the rank's 64 x 128 weight, bf16
    assert t.events[q].bytes_read == x + w_
    # a sixth of the input's cast (2 + 2 + 1 B an element: 2.5 x its bytes), the weight's whole
    assert fp8_casts(t, "tensorwise")[q] == x * 5 // 2 // 6 + w_ * 5 // 2
    assert fp8_casts(t, "rowwise")[q] == (x + w_) * 5 // 2  # no float8 TP styles for rowwise: its own cast


def test_the_forward_gathers_carry_fp8_under_torchaos_tensor_parallel_styles():
    from torch_footprint.estimate.layouts.comm import Link, gather_s, step_time
    from torch_footprint.settings import Parallel

    t = trace_step(Workload(LLAMA, IDS, precision="bf16-mixed"), Training(train=True, optimizer="adamw"),
                   Parallel(gpus=2, tp=2, sequence_parallel=True))[0]
    link = Link(100e9, 0.0, "by hand")
    phases = {"forward": 1e-9, "backward": 1e-9}
    plain = step_time(t, phases, "ddp", 1, link, 2)
    fp8 = step_time(t, phases, "ddp", 1, link, 2, fp8_gather=True)
    size = 2 * 64 * 128 * 2  # [2, 64, 128] bf16 between the blocks
    [a] = [c for c in plain.collectives if c.what == "row-parallel outputs"]
    [b] = [c for c in fp8.collectives if c.what == "row-parallel outputs"]
    # each call: a bf16 reduce-scatter of the output and an fp8 all-gather of the next input (3/4 of the bytes)
    assert b.nbytes == a.nbytes * 3 // 4
    assert b.time_s == pytest.approx(b.calls * (gather_s(size, 2, link) + gather_s(size / 2, 2, link)))
    assert b.time_s == pytest.approx(a.time_s * 3 / 4)
    # the backward's collectives are unchanged
    assert [c.time_s for c in fp8.collectives if c.phase == "backward"] == \
        [c.time_s for c in plain.collectives if c.phase == "backward"]
