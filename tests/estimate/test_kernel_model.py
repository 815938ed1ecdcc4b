"""The per-kernel mechanisms of GPU time, worked by hand, and the problems the trace records
for them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import torch_footprint as tfp
from torch_footprint.estimate.kernels import constants
from torch_footprint.estimate.kernels.bandwidth import bandwidth_share, transfer_s
from torch_footprint.estimate.kernels.constants import KernelConstants
from torch_footprint.estimate.kernels.matrix import (
    attention_use,
    conv_gemms,
    exp_rate,
    is_depthwise,
    is_simt,
    is_winograd,
    matrix_share,
    power_clock,
    problem_use,
    tile_use,
    winograd_scale,
)
from torch_footprint.estimate.kernels.roofline import HOST_OP_S, HOST_VIEW_S, estimate_latency
from torch_footprint.hardware import get
from torch_footprint.hardware.db import Accelerator

C = KernelConstants(matrix_a=0.7, matrix_b=0.1, matrix_low=0.35, matrix_high=0.97, amd=0.5, k_half=0.0,
                    kernel_floor_s=5e-6, hbm=0.9, gddr=0.8, other_memory=0.7, attn=0.8, attn_s_half=512.0,
                    attn_backward=0.75)
GPU = Accelerator(id="g", name="G", vendor="nvidia", kind="gpu", memory_gb=16, bandwidth_gbs=1000,
                  tflops={"fp32": 20.0, "fp16": 200.0}, source="https://example.com/g", tdp_w=400.0, units=100,
                  memory_type="HBM3", architecture="ampere")


def test_the_trace_records_each_matrix_kernels_problem() -> None:
    lin = tfp.profile(nn.Linear(64, 32), "8,64").trace
    [mm] = [e for e in lin.events if e.kind == "matrix"]
    assert mm.problem == ["gemm", 1, 8, 32, 64]  # addmm: 8 rows, 32 columns, reducing over 64
    conv = tfp.profile(nn.Conv2d(6, 12, 3, stride=2, padding=1, groups=3), "2,6,10,10", train=True).trace
    fwd, bwd = (e for e in conv.events if e.kind == "matrix")
    # 2 images, 6 -> 12 channels in 3 groups, a 5 x 5 output, 3 x 3 kernel; the backward's
    # weight gradient only (the input needs none); then its window, largest stride and dilation
    assert fwd.problem == ["conv", 2, 6, 12, 25, 9, 3, "forward", "3x3", 2, 1]
    assert bwd.problem == ["conv", 2, 6, 12, 25, 9, 3, "backwardw", "3x3", 2, 1]
    wide = tfp.profile(nn.Conv2d(4, 4, (1, 3), padding=(0, 2), dilation=(1, 2)), "1,4,6,6").trace
    [w] = [e for e in wide.events if e.kind == "matrix"]
    assert w.problem[8:] == ["1x3", 1, 2]
    up = tfp.profile(nn.ConvTranspose2d(4, 4, 3, stride=2), "1,4,5,5").trace
    [u] = [e for e in up.events if e.kind == "matrix"]
    assert u.problem[8:] == ["t3x3", 2, 1]


def test_power_limited_share_by_hand() -> None:
    # 400 W over 200 dense TFLOP/s = 2 W per TFLOP/s: 0.7 + 0.1 x 2 = 0.9 of the fp16 peak;
    # fp32 (20 TFLOP/s): 20 W per TFLOP/s, capped at 0.97; an AMD part reaches half of that
    assert matrix_share(GPU, "fp16", C) == pytest.approx(0.9)
    assert matrix_share(GPU, "fp32", C) == pytest.approx(0.97)
    from dataclasses import replace

    assert matrix_share(replace(GPU, vendor="amd"), "fp16", C) == pytest.approx(0.45)


def test_a_power_limit_below_the_tdp_by_hand() -> None:
    from dataclasses import replace

    half = C.replace(power_exp=0.5)
    capped = replace(GPU, power_limit_w=100.0)  # a quarter of its 400 W: the clocks at sqrt(1/4) = 1/2
    assert power_clock(capped, half) == pytest.approx(0.5) and power_clock(GPU, half) == 1.0
    assert matrix_share(capped, "fp16", half) == pytest.approx(0.9 * 0.5)
    # a fused attention's share is of the datasheet peak: the limit slows it alone, by the same 1/2
    args = ("fp16", 8, 4096, 4096, 128, 128, True, False)
    stock, slow = (attention_use(g, *args, half) * matrix_share(g, "fp16", half) for g in (GPU, capped))
    assert slow == pytest.approx(stock * 0.5)
    # a limit at the TDP changes nothing
    assert power_clock(replace(GPU, power_limit_w=400.0), half) == 1.0


def test_the_power_exponent_is_the_least_squares_fit_of_the_published_power_limited_epochs() -> None:
    """Closed form against the shipped constant (benchmarks/fit_kernels.py fits it by simplex
    search): ln(slowdown) = power_exp x ln(draw / cap), least squares through the origin, over the
    jobs drawing 80% of their board's TDP or more uncapped, at caps of 60-100% of that draw."""
    from pathlib import Path

    import tomllib

    data = tomllib.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "published" /
                          "power_limits.toml").read_text())
    num = den = 0.0
    for j in data["job"]:
        top = j["limit_w"].index(max(j["limit_w"]))
        draw, base = j["power_w"][top], j["epoch_s"][top]
        tdp = get(j["gpu"]).tdp_w
        assert tdp is not None
        if draw < 0.8 * min(tdp, j["limit_w"][top]):
            continue
        for cap, epoch in zip(j["limit_w"], j["epoch_s"], strict=True):
            if 0.6 <= cap / draw < 1.0:
                x, y = math.log(draw / cap), math.log(epoch / base)
                num, den = num + x * y, den + x * x
    assert constants.shipped().power_exp == pytest.approx(num / den, rel=1e-3)
    # an H100 SXM at 500 W of its 700: its matrix units at (5/7) ** exponent, 86% of their stock rate
    from dataclasses import replace

    h100 = replace(get("h100-sxm"), power_limit_w=500.0)
    assert power_clock(h100, constants.shipped()) == pytest.approx((500 / 700) ** (num / den), rel=1e-3)


def test_waves_of_tiles_by_hand() -> None:
    # 1024 x 1024 in 128 x 128 tiles: 64 tiles on 100 units, one wave: 64% busy; 64 x 128
    # tiles: 128 tiles, 2 waves of 100, 64% busy at 0.85; 64 x 64: 256 tiles, 3 waves, 85.3%
    # at 0.7 = 59.7%; 32 x 32: 1024 tiles, 11 waves, 93.1% at 0.4: the 128 x 128 tile wins
    assert tile_use(100, 1, 1024, 1024) == pytest.approx(0.64)
    # 1280 x 1280: 100 tiles of 128 x 128, exactly one wave
    assert tile_use(100, 1, 1280, 1280) == pytest.approx(1.0)
    # 100 x 100: one 128 x 128 tile, 1% of the units, 61% of its area; best is 16 x 16:
    # 49 tiles, 49% busy, 100/112 filled each way, at 0.2
    assert tile_use(100, 1, 100, 100) == pytest.approx(max(0.01 * (100 / 128) ** 2, 0.49 * (100 / 112) ** 2 * 0.2))


def test_convolutions_as_implicit_gemms_by_hand() -> None:
    # N 2, 6 -> 12 channels in 3 groups, 25 output positions, 3 x 3 kernel: per group 2 x 4
    # channels; forward (3 groups, 50 rows, 4 columns, K 2 x 9); backward: the data gradient
    # (50 x 2, K 4 x 9) and the weight gradient (4 x 18, K 50), half the FLOPs each
    assert conv_gemms(["conv", 2, 6, 12, 25, 9, 3, "forward"]) == [(3, 50, 4, 18, 1.0)]
    assert conv_gemms(["conv", 2, 6, 12, 25, 9, 3, "backwarddw"]) == [(3, 50, 2, 36, 0.5), (3, 4, 18, 50, 0.5)]
    # one gradient, one GEMM ("backward" holds both letters: the suffix names the gradients)
    assert conv_gemms(["conv", 2, 6, 12, 25, 9, 3, "backwardd"]) == [(3, 50, 2, 36, 1.0)]
    assert conv_gemms(["conv", 2, 6, 12, 25, 9, 3, "backwardw"]) == [(3, 4, 18, 50, 1.0)]
    assert is_depthwise(["conv", 2, 32, 32, 25, 9, 32, "forward"])
    assert not is_depthwise(["conv", 2, 64, 64, 25, 9, 4, "forward"])


def test_flash_attention_share_by_hand() -> None:
    # G: sm86-like (ampere), 128 fp32 lanes per SM: 20e12 x 16 / (2 x 128) = 1.25e12
    # exponentials/s. 64 heads x 4096 queries, head size 128, forward: 0.8 x 4096 / 4608 of
    # the peak, over 2,048 tiles of 128 queries in 21 waves of 100 (2048/2100); 200e12 x that
    # = 138.7e12 FLOP/s; 512 FLOPs per score against one exponential: the exponentials add
    # 138.7e12 / (1.25e12 x 512) = 21.7% to the matrix time; a share of the 0.9 (power) rate
    assert exp_rate(GPU) == pytest.approx(1.25e12)
    share = 0.8 * 4096 / 4608 * 2048 / 2100
    expected = share / (1 + 200e12 * share / (1.25e12 * 512)) / 0.9
    assert attention_use(GPU, "fp16", 64, 4096, 4096, 128, 128, False, False, C) == pytest.approx(expected)
    # the trace's problem reaches it through problem_use
    use = problem_use(GPU, ["attn", 64, 4096, 4096, 128, 128, False, False], C, "fp16")
    assert use == pytest.approx(expected)
    # causal backward on a Hopper: 2048 keys per query block on average (0.8 x 2048 / 2560),
    # half the peak through mma.sync, backward x 0.75; 1,024 FLOPs per score; the diagonal
    # tiles computed whole: 1 + 128 / 4096 more
    from dataclasses import replace

    hopper = replace(GPU, architecture="hopper")
    share = 0.8 * 2048 / 2560 * 0.5 * 0.75 * 2048 / 2100
    expected = share / (1 + 200e12 * share / (1.25e12 * 1024)) / (1 + 128 / 4096) / 0.9
    assert attention_use(hopper, "fp16", 64, 4096, 4096, 128, 128, True, True, C) == pytest.approx(expected)
    # an AMD part: the kernel at amd (0.5) of the rate the same formula gives it with amd = 1 (the rate
    # a share of matrix_share's, which carries amd too)
    amd = replace(GPU, vendor="amd")
    half, whole = (attention_use(amd, "fp16", 64, 4096, 4096, 128, 128, False, False, k) * matrix_share(amd, "fp16", k)
                   for k in (C, replace(C, amd=1.0)))
    assert half == pytest.approx(0.5 * whole)


def test_the_special_function_rate_against_published_figures() -> None:
    # "the H100 SXM5 GPU has 989 TFLOPS of FP16 matmul but only 3.9 TFLOPS of special
    # functions" (FlashAttention-3, arXiv:2407.08608, section 3.1); ours reads the clock from
    # the fp32 rate (67 TFLOP/s at 1.98 GHz where the paper takes 1.83): within 10%. An A100:
    # 108 SMs x 16 x 1.41 GHz = 2.44e12 (A100 whitepaper: 108 SMs, 1,410 MHz boost)
    assert exp_rate(get("h100-sxm")) == pytest.approx(3.9e12, rel=0.10)
    assert exp_rate(get("a100-sxm-80gb")) == pytest.approx(108 * 16 * 1.41e9, rel=0.01)


def test_bandwidth_by_the_memorys_kind_by_hand() -> None:
    assert bandwidth_share(GPU, C) == 0.9
    assert transfer_s(GPU, 9e9, C) == pytest.approx(9e9 / (1000e9 * 0.9))


def test_a_matmul_priced_by_the_kernel_model_by_hand() -> None:
    # x[4096, 4096] @ W.T in fp16: 2 x 4096^3 FLOPs at 200e12 x 0.9 (power) x 1.0 (32 x 32
    # tiles of 128 x 128 = 1,024 tiles, 11 waves on 100 units: 93.1% at 128 x 128... the best
    # tile) plus the 5 us floor; the host's 30 us overlap it (two clocks)
    lin = nn.Linear(4096, 4096, bias=False).half()
    trace = tfp.profile(lin, "4096,4096:float16").trace
    with constants.using(C):
        pred = estimate_latency(trace, GPU)
    [mm] = [o for o in pred.ops if o.op == "aten.mm.default"]
    use = tile_use(100, 1, 4096, 4096)
    assert use == pytest.approx(1024 / 1100)
    assert mm.compute_s == pytest.approx(2 * 4096**3 / (200e12 * 0.9 * use) + 5e-6)
    assert mm.overhead_s == HOST_OP_S and pred.ceilings.overlap
    # the host dispatches the weight's transpose (a view) and the matmul, then the device runs it
    assert pred.time_s == pytest.approx(HOST_VIEW_S + HOST_OP_S + mm.compute_s, rel=1e-6)
    assert math.isclose(pred.effective[-1] + sum(pred.effective[:-1]), pred.time_s)


def test_fp32_gemms_run_on_the_fp32_cores_whose_small_tiles_lose_nothing() -> None:
    # 1024 x 1024 on an A100's 108 SMs: 128 x 128 tiles make 64 tiles, one wave, 64/108 busy;
    # on the fp32 cores cuBLAS's 32 x 32 sgemm tiles lose nothing: 1,024 tiles in 10 waves of
    # 108, 1024/1080 busy. bf16 keeps the tensor cores' ladder (the 128 x 128 tile's 64/108).
    assert tile_use(108, 1, 1024, 1024, simt=True) == pytest.approx(1024 / 1080)
    assert tile_use(108, 1, 1024, 1024) == pytest.approx(64 / 108)
    a100 = get("a100-pcie-80gb")
    assert is_simt(a100, "fp32") and not is_simt(a100, "tf32") and not is_simt(a100, "bf16")


def test_an_fp32_matmul_on_an_a100_reproduces_its_published_time() -> None:
    # cuBLAS fp32 1024 x 1024 x 1024 on an A100 PCIe 80GB: 16.0 TFLOP/s as printed
    # (https://github.com/triton-lang/triton/issues/2491, benchmarks/published/kernels.toml):
    # 2 x 1024^3 / 16.0e12 = 134 us. Priced with the shipped constants, within 15%; with the
    # tensor cores' tile ladder it was 51% too slow (202 us).
    trace = tfp.profile(nn.Linear(1024, 1024, bias=False), "1024,1024").trace
    pred = estimate_latency(trace, get("a100-pcie-80gb"))
    [mm] = [o for o in pred.ops if o.kind == "matrix"]
    assert mm.device_s == pytest.approx(2 * 1024**3 / 16.0e12, rel=0.15)


class _SelfAttention(nn.Module):
    """q = k = v = x * w, then fused attention (a weight so the step has a backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(128))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = x * self.w
        return F.scaled_dot_product_attention(q, q, q)


def test_sdpa_reproduces_the_published_attention_figures_of_its_kernel() -> None:
    # batch 4 x 16 heads, 4k tokens, head dim 128, no mask, forward + backward, FLOPs counted as
    # 4 x batch x heads x seq^2 x head dim forward and 2.5 times that backward
    # (benchmarks/published/kernels.toml):
    # - an A100 80GB runs FlashAttention-2: 196 TFLOP/s forward + backward
    #   (Dao-AILab/flash-attention assets/flash2_a100_fwd_bwd_benchmark.png);
    # - an H100 SXM5 runs cuDNN's attention, which PyTorch prefers there (sdp_utils.cpp,
    #   check_prefer_cudnn_attention): 609 TFLOP/s forward, 499 backward (FlashAttention-3 paper,
    #   assets/flash3_fp16_fwd.png and its backward figure, the cuDNN bars at 4k)
    trace = tfp.profile(_SelfAttention(), "4,16,4096,128", precision="fp16", train=True).trace
    fwd = 4 * 4 * 16 * 4096**2 * 128
    for gpu, seconds, within in (("h100-sxm", fwd / 609e12 + 2.5 * fwd / 499e12, 0.10),
                                 ("a100-sxm-80gb", 3.5 * fwd / 196e12, 0.10)):
        pred = estimate_latency(trace, get(gpu))
        attn = [(o, e) for o, e in zip(pred.ops, trace.events, strict=True) if e.problem and e.problem[0] == "attn"]
        assert [e.phase for _, e in attn] == ["forward", "backward"]
        assert sum(o.device_s for o, _ in attn) == pytest.approx(seconds, rel=within)
        # the softmax's vector FLOPs are in the fitted share, not added at the elementwise rate
        o, e = attn[0]
        c = constants.current()
        acc = get(gpu)
        rate = acc.peak("fp16") * matrix_share(acc, "fp16", c) * problem_use(acc, e.problem, c, "fp16")
        assert e.flops > e.matrix_flops and o.compute_s == pytest.approx(e.matrix_flops / rate + c.kernel_floor_s)


def test_flash_attention_forward_by_head_size_against_the_published_tables() -> None:
    # FlashAttention-2's forward at 16k tokens (hidden 2048, no mask), TFLOP/s as printed:
    # H100 SXM5 head size 64: 324, 128: 370 (FlashAttention-3 paper, assets/flash3_fp16_fwd.png);
    # A100 80GB: 192 and 223 (FlashAttention-2 paper, figure 5); benchmarks/published/kernels.toml.
    # A larger head does more matrix work per exponential: 1.14 and 1.16 times the rate
    c = constants.current()
    for gpu, by_head in (("h100-sxm", {64: 324.0, 128: 370.0}), ("a100-sxm-80gb", {64: 192.0, 128: 223.0})):
        acc = get(gpu)
        rates = {}
        for d, tflops in by_head.items():
            use = attention_use(acc, "fp16", 2048 // d, 16384, 16384, d, d, False, False, c)
            rates[d] = acc.peak("fp16") * matrix_share(acc, "fp16", c) * use
            assert rates[d] == pytest.approx(tflops * 1e12, rel=0.10)
        assert rates[128] / rates[64] == pytest.approx(by_head[128] / by_head[64], rel=0.05)


def test_flash_attention_v1_against_the_published_tables() -> None:
    # FlashAttention (v1) forward + backward, 8k tokens, batch 2 x hidden 2048 (the release's
    # flash2_*_fwd_bwd_benchmark.png bars, benchmarks/published/kernels.toml), TFLOP/s as printed,
    # FlashAttention-2 beside it: the A100 80GB, no mask: head size 64 110 (FlashAttention-2 175),
    # 128 82 (201); the H100 SXM5, causal: 64 149 (273), 128 135 (308). FLOPs as those benchmarks
    # count them: 4 x batch x heads x seq^2 x head forward, halved under the mask, x 3.5 both ways
    c = constants.current()
    for gpu, causal, by_head in (("a100-sxm-80gb", False, {64: 110.0, 128: 82.0}),
                                 ("h100-sxm", True, {64: 149.0, 128: 135.0})):
        acc = get(gpu)
        peak = acc.peak("fp16") * matrix_share(acc, "fp16", c)
        for d, tflops in by_head.items():
            bh, fwd = 2 * 2048 // d, 4 * 2 * (2048 // d) * 8192**2 * d / (2 if causal else 1)
            seconds = sum(k * fwd / (peak * attention_use(acc, "fp16", bh, 8192, 8192, d, d, causal, back, c,
                                                               "flash1"))
                          for k, back in ((1, False), (2, True)))
            assert 3.5 * fwd / seconds == pytest.approx(tflops * 1e12, rel=0.15)


def test_sdpa_on_an_mi300x_runs_aotritons_kernels_at_their_published_rates() -> None:
    # PyTorch's SDPA on ROCm runs AOTriton's kernels. Its forward on one MI300X, causal, batch 16 x 16
    # heads, bf16, TFLOP/s as printed (4 x batch x heads x seq^2 x head / 2 over the mean time;
    # midiareshadi/attn-dsl-bench results/raw/sweep_v1.csv, benchmarks/published/kernels.toml):
    # head 128: 164.07 at 1k, 256.90 at 4k, 306.54 at 16k; head 64: 269.64 at 16k
    from torch_footprint.estimate.kernels.sdpa import sdpa_kernel

    acc, c = get("mi300x"), constants.current()
    assert sdpa_kernel(acc, "bf16", 128, 128) == "aotriton"
    assert sdpa_kernel(acc, "bf16", 128, 128, "flash2") == "flash2"  # ROCm's flash-attention package, named
    for d, seq, tflops in ((128, 1024, 164.07), (128, 4096, 256.90), (128, 16384, 306.54), (64, 16384, 269.64)):
        use = attention_use(acc, "bf16", 16 * 16, seq, seq, d, d, True, False, c, "aotriton")
        assert acc.peak("bf16") * matrix_share(acc, "bf16", c) * use == pytest.approx(tflops * 1e12, rel=0.10)
    # its backward's rate over its forward's: the MI355X's SDPA in HipKittens' tables (analysis/attn,
    # batch 16 x 16 heads, head 128), backward TFLOP/s (2.5 times the forward's FLOPs) over forward, at
    # 2k-16k causal and 1k-16k not: median 0.376, so 0.8 x 0.376 = 0.30 with the backward's FLOPs
    # counted as twice the forward's
    ratios = [b / f for b, f in ((156.71, 246.376588), (142.82, 421.775249), (224.01, 630.386987),
                                 (259.14, 761.564515), (220.27, 452.941180), (273.06, 579.431411),
                                 (301.24, 593.913331), (309.30, 821.786381), (311.66, 872.787694))]
    back, fwd = (attention_use(acc, "bf16", 256, 8192, 8192, 128, 128, False, b, c, "aotriton") for b in (True, False))
    assert back / fwd == pytest.approx(0.8 * sorted(ratios)[4], rel=0.15)


def test_a_geforce_boards_clock_by_hand() -> None:
    # NVIDIA rates a GeForce board at its boost clock, which GPU Boost exceeds: its matrix share is the
    # data-centre formula's times geforce; a data-centre part's is not; a power limit still applies
    from dataclasses import replace

    from torch_footprint.estimate.kernels.matrix import board_clock

    k = replace(C, geforce=1.25)
    geforce = replace(GPU, name="NVIDIA GeForce G")
    assert board_clock(GPU, k) == 1.0 and board_clock(geforce, k) == 1.25
    assert matrix_share(geforce, "fp16", k) == pytest.approx(1.25 * matrix_share(GPU, "fp16", k))
    capped = replace(geforce, power_limit_w=200.0)
    assert board_clock(capped, k) == pytest.approx(1.25 * 0.5 ** k.power_exp)


def test_a_slot_powered_boards_clock_by_hand() -> None:
    # a PCIe board drawing no more than its x16 slot supplies (75 W) runs below its rated boost clock under
    # load: its share is the data-centre formula's times slot; 76 W, a module or another vendor's board is not
    from dataclasses import replace

    from torch_footprint.estimate.kernels.matrix import board_clock, is_slot_powered

    k = replace(C, slot=0.8)
    slot = replace(GPU, tdp_w=70.0)
    assert is_slot_powered(slot) and is_slot_powered(replace(GPU, tdp_w=75.0))
    assert not any(is_slot_powered(g) for g in (replace(GPU, tdp_w=76.0), replace(slot, kind="soc"),
                                                replace(slot, vendor="amd"), replace(GPU, tdp_w=None)))
    assert board_clock(slot, k) == 0.8 and board_clock(replace(GPU, tdp_w=76.0), k) == 1.0
    assert matrix_share(slot, "fp16", k) == pytest.approx(
        0.8 * min(max(k.matrix_a + k.matrix_b * 70.0 / 200.0, k.matrix_low), k.matrix_high))  # 70 W over 200 TFLOP/s


def test_slot_powered_matmuls_against_their_published_best_rates() -> None:
    # the best of five square fp16 matmuls (1k-10k) in zzc0721/torch-performance-test-data's database.md
    # (benchmarks/published/kernels.toml), TFLOP/s: T4 41.91-42.71 of 65 rated, L4 68.83 of 121
    c = constants.current()
    for gpu, tflops in (("t4", 42.3), ("l4", 68.83)):
        acc = get(gpu)
        best = max(acc.peak("fp16") * matrix_share(acc, "fp16", c) * problem_use(acc, ["gemm", 1, s, s, s], c, "fp16")
                   for s in (1024, 2048, 4096, 8192, 10240))
        assert best == pytest.approx(tflops * 1e12, rel=0.15)


def test_geforce_matmuls_against_their_published_best_rates() -> None:
    # the best of five square fp16 matmuls (1k-10k), medians of the boards in
    # zzc0721/torch-performance-test-data's database.md (benchmarks/published/kernels.toml), TFLOP/s:
    # RTX 3090 75.64 of 71 rated, RTX 4090 166.87 of 165.2, RTX 5090 229.52 of 209.5
    c = constants.current()
    for gpu, tflops in (("rtx-3090", 75.64), ("rtx-4090", 166.87), ("rtx-5090", 229.52)):
        acc = get(gpu)
        best = max(acc.peak("fp16") * matrix_share(acc, "fp16", c) * problem_use(acc, ["gemm", 1, s, s, s], c, "fp16")
                   for s in (1024, 2048, 4096, 8192, 10240))
        assert best > acc.peak("fp16")  # above the rated peak, as measured
        assert best == pytest.approx(tflops * 1e12, rel=0.10)


def test_winograd_convolutions_by_hand() -> None:
    # cuDNN's Winograd algorithms take a 3 x 3 window at stride 1, undilated, ungrouped, not transposed
    from dataclasses import replace

    conv = ["conv", 8, 64, 64, 3136, 9, 1, "forward", "3x3", 1, 1]
    assert is_winograd(conv) and is_winograd([*conv[:7], "backwarddw", *conv[8:]])
    assert not any(is_winograd(p) for p in ([*conv[:9], 2, 1], [*conv[:9], 1, 2], [*conv[:8], "t3x3", 1, 1],
                                            [*conv[:8], "1x1", 1, 1], [*conv[:6], 2, *conv[7:]], conv[:8]))
    k = replace(C, winograd=1.6)
    # on the fp32 cores (no faster tensor path): winograd times a GEMM's share, per direct FLOP
    assert winograd_scale(GPU, "fp32", k) == pytest.approx(1.6)
    assert problem_use(GPU, conv, k, "fp32") == pytest.approx(1.6 * problem_use(GPU, [*conv[:9], 2, 1], k, "fp32"))
    assert winograd_scale(GPU, "fp16", k) == 0.0 and winograd_scale(replace(GPU, vendor="amd"), "fp32", k) == 0.0
    # TF32 tensor cores 8 times the fp32 cores (an A100's ratio): 1.6 x (20 x 0.97) / (160 x 0.95), the
    # shares min(0.7 + 0.1 x watts per TFLOP/s, 0.97) at 400 W; the implicit GEMM wins
    a100_like = replace(GPU, tflops={"fp32": 20.0, "tf32": 160.0})
    assert winograd_scale(a100_like, "tf32", k) == pytest.approx(1.6 * 20 * 0.97 / (160 * 0.95))
    assert problem_use(a100_like, conv, k, "tf32") == pytest.approx(problem_use(a100_like, conv, C, "tf32"))
    # TF32 no faster than the fp32 cores (a GeForce's): Winograd wins
    geforce_like = replace(GPU, tflops={"fp32": 20.0, "tf32": 20.0})
    assert winograd_scale(geforce_like, "tf32", k) == pytest.approx(1.6)


def test_fp32_winograd_convolutions_against_deepbench() -> None:
    """Baidu DeepBench's cuDNN 7.6 times (benchmarks/published/kernels.toml), fp32, the algorithm
    cudnnFind found fastest: every 3 x 3, stride-1 pass on the V100 and the T4, priced by their direct
    FLOPs at the rate problem_use gives. The shipped Winograd gain is their fit (one constant, two
    GPUs, which disagree: the V100's passes alone fit about 1.9, the T4's about 1.5); without it the
    passes were priced 40-80% too slow."""
    from pathlib import Path

    import tomllib

    data = tomllib.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "published" /
                          "kernels.toml").read_text())
    c = constants.shipped()
    errs: dict[str, list[float]] = {}
    plain: list[float] = []
    for r in data["conv"]:
        if r["dtype"] != "fp32" or (r["r"], r["s"], r["stride_h"], r["stride_w"]) != (3, 3, 1, 1):
            continue
        acc = get(r["gpu"])
        oh, ow = r["h"] + 2 * r["pad_h"] - 2, r["w"] + 2 * r["pad_w"] - 2
        flops = 2 * r["n"] * r["k"] * r["c"] * 9 * oh * ow
        for which, field in (("forward", "fwd_ms"), ("backwardd", "bwd_data_ms"), ("backwardw", "bwd_weight_ms")):
            if field in r:
                conv = ["conv", r["n"], r["c"], r["k"], oh * ow, 9, 1, which, "3x3", 1, 1]
                for k, out in ((c, errs.setdefault(acc.id, [])), (c.replace(winograd=1.0), plain)):
                    rate = acc.peak("fp32") * matrix_share(acc, "fp32", k) * problem_use(acc, conv, k, "fp32")
                    out.append(flops / rate / (r[field] * 1e-3) - 1)
    assert set(errs) == {"v100-sxm2-16gb", "t4"} and sum(map(len, errs.values())) == len(plain) > 150
    every = [abs(e) for v in errs.values() for e in v]
    assert sorted(every)[len(every) // 2] < 0.3
    assert sorted(abs(e) for e in plain)[len(plain) // 2] > 0.4
    for v in errs.values():  # the V100 as priced at the median (+1%), the T4 slower than priced (-20%)
        assert abs(sorted(v)[len(v) // 2]) < 0.25
