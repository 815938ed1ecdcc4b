"""Matrix kernels on a GPU: what makes a GEMM, a convolution or a fused attention slower than
the dense peak. One function per mechanism, each with its source; the constants they need
are fitted to published kernel measurements (:mod:`.constants`).

* **Power-limited clocks** (:func:`matrix_share`): a GPU's dense peak is quoted at its boost
  clock, which the tensor cores cannot hold at full load within the board's power. The best
  sustained share of the peak grows with the watts the board has per dense TFLOP/s:
  measured best-shape matmuls reach 78% of the peak on a B200 (0.44 W per TFLOP/s), 80% on
  an H100 SXM (0.71), 87% on an A100 SXM (1.28) and 94% on an RTX 4090 (2.7)
  (``published/kernels.toml``: Stas Bekman's maximum-achievable-matmul tables, the PyTorch
  issue of RTX 4090 bf16 GEMMs). A line in the watts per TFLOP/s, fitted, capped below the
  peak; AMD's libraries reach a fitted share of that.
* **A power limit below the TDP** (:func:`power_clock`): ``nvidia-smi -pl`` caps the board's
  watts; at full load the clocks fall until the chip draws no more than the cap. Measured
  training epochs on three GPUs (V100, A40, Quadro RTX 6000; Zeus, NSDI 2023, its power traces)
  slow as (cap / the watts the job drew uncapped) ** ``power_exp``, fitted; matrix work at full
  load draws the board's TDP (the premise of the line above), so the matrix units' and the fused
  attention's rates are scaled by (limit / TDP) ** ``power_exp``.
* **Waves of tiles** (:func:`tile_use`): a GEMM's output is computed in tiles, one thread
  block per streaming multiprocessor at a time; the last wave leaves units idle (NVIDIA's
  "Matrix Multiplication Background" user guide, "Wave quantization"). The library picks the
  tile that wastes least (128 x 256 down to 64 x 64, smaller tiles at a lower rate).
* **Short reductions** (:func:`reduction_use`): a GEMM whose reduction length K is short
  spends its time loading tiles rather than multiplying: K / (K + k_half), fitted.
* **Winograd convolutions** (:func:`winograd_scale`): cuDNN runs a 3 x 3, stride-1 convolution in
  fp32 by Winograd's minimal filtering, fewer multiplies per output than the direct product (Lavin
  and Gray 2016, arXiv:1509.09308: F(2x2, 3x3) takes 16 where the direct form takes 36), when
  that beats the tensor cores' rate for the dtype; its gain over a GEMM of the direct FLOPs, fitted.
* **A kernel's least time** (``kernel_floor_s``): launch latency and the ramp of one wave,
  fitted to the smallest published GEMMs and copies.
* **Fused attention** (:func:`attention_use`): FlashAttention-2's share of the matrix
  units' best rate grows with the keys each block of queries runs over (more work per tile
  of queries: half the keys under a causal mask), lower in its backward (Dao 2023,
  arXiv:2307.08691, figures 4-7, as measured in ``published/kernels.toml``), fitted. On
  Hopper and Blackwell it runs the Ampere-style ``mma.sync`` instructions, which reach about
  two thirds of those chips' peak (Shah et al. 2024, arXiv:2407.08608, section 1:
  FlashAttention-2 "achieves only 35%" of an H100's peak, mma.sync "only about 2/3 of the
  peak throughput"). Two mechanisms need no fitting: a causal mask's diagonal tiles are
  computed whole (:data:`FLASH_BLOCK`), and every score's exponential runs on the special
  function units, whose rate is far below the tensor cores' and falls further behind them
  from one generation to the next (:func:`exp_rate`), so a small head dimension (fewer
  matrix FLOPs per exponential) and a Hopper reach a smaller share of the peak.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...hardware.db import Accelerator
from .constants import KernelConstants
from .sdpa import sdpa_kernel, sm_of

# (rows, columns, rate) of the output tiles a GEMM library picks among: CUTLASS's and cuBLAS's
# common tensor-core tiles; a smaller tile fills more units at a lower rate per unit
TILES = ((128, 256, 1.0), (128, 128, 1.0), (64, 128, 0.85), (64, 64, 0.7), (32, 32, 0.4), (16, 16, 0.2))
# cuBLAS's smallest fp32 (SIMT) tile: its sgemm kernels run 128 x 128 down to 32 x 32 output
# tiles (kernel names such as ampere_sgemm_32x32_sliced1x4_tn in a profile)
SIMT_SMALLEST_TILE = 32
DEPTHWISE_CHANNELS = 4  # a convolution with this few channels per group runs as a memory-bound kernel
# FlashAttention-2 issues the Ampere-style mma.sync instructions, at an A100 SM's rate per clock
# (1,024 dense fp16 FMAs) on the parts whose tensor cores do twice that through warpgroup
# instructions: "the H100 SM ... delivers 2x the MMA computational rates of the A100 SM ...
# clock-for-clock" (NVIDIA H100 Tensor Core GPU Architecture whitepaper); the FlashAttention-3
# paper (arXiv:2407.08608, section 1) puts mma.sync at "about 2/3" of Hopper's peak, but the
# published FlashAttention-2 tables scale from the A100 to the H100 SXM as SMs x clock do
# (forward+backward, head size 128, 16k tokens: 203 and 338 TFLOP/s, 1.66 times; SMs x boost
# clock 132 x 1.83 against 108 x 1.41 GHz: 1.59 times), not as 2/3 of the peaks (2.1 times)
MMA_SYNC_SHARE = 0.5
WARPGROUP_SM = ((9, 0), (10, 0), (10, 3))  # Hopper and data-centre Blackwell (wgmma, tcgen05)
# FlashAttention-2's block of queries (kBlockM = 128 in its forward kernels' traits for head
# sizes up to 128 on sm80 and later, csrc/flash_attn/src/flash_fwd_launch_template.h): under a
# causal mask, each block computes its diagonal tile whole, masked half included
FLASH_BLOCK = 128
# special-function (MUFU: exp2, log2, rcp, sin, cos) results per clock per SM against 32-bit
# fp32 FMA lanes per SM, by compute capability (CUDA C++ Programming Guide, "Arithmetic
# Instructions", throughput of native arithmetic instructions: 16 special-function results
# on every capability from 5.0; fp32 64 lanes on 6.0, 7.x and 8.0, 128 on 8.6 and later).
# The FlashAttention-3 paper prints the consequence: "the H100 SXM5 GPU has 989 TFLOPS of FP16
# matmul but only 3.9 TFLOPS of special functions" (arXiv:2407.08608, section 3.1).
SFU_PER_SM = 16
EXP_PER_SCORE = 1  # one exponential per score, forward; the backward recomputes it once
FP32_LANES_64 = ((6, 0), (7, 0), (7, 2), (7, 5), (8, 0))


def matrix_share(acc: Accelerator, key: str, c: KernelConstants) -> float:
    """The matrix units' best sustained share of ``acc``'s dense ``key`` peak (power-limited clocks,
    and the board's own power limit where it is set below the TDP)."""
    peak = acc.peak(key)
    if not peak or not acc.tdp_w:
        share = c.matrix_a
    else:
        watts_per_tflops = acc.tdp_w / (peak / 1e12)
        share = c.matrix_a + c.matrix_b * watts_per_tflops
    share = min(max(share, c.matrix_low), c.matrix_high)
    return share * (c.amd if acc.vendor == "amd" else 1.0) * board_clock(acc, c)


def board_clock(acc: Accelerator, c: KernelConstants) -> float:
    """The board's clocks at full load over those its datasheet rates are at: a power limit set
    below the TDP (:func:`power_clock`), and on a GeForce board ``geforce``. NVIDIA rates a GeForce
    part's TFLOP/s at its boost clock, a typical figure, and GPU Boost runs above it while power and
    temperature allow (the RTX 3090, 4090 and 5090 run square matmuls at 1.00-1.17 of their rated
    dense peak, ``published/kernels.toml``); a data-centre part's boost clock is its ceiling. A board
    powered by its PCIe slot alone (:func:`is_slot_powered`) runs below that ceiling under load,
    at ``slot`` of it: the T4's and L4's best published matmuls reach 0.51-0.65 of their rated
    peaks (fp16, tf32 and fp32 alike, so the clocks, not a unit), where data-centre boards with
    power to spare reach 0.74-0.85."""
    factor = c.geforce if is_geforce(acc) else c.slot if is_slot_powered(acc) else 1.0
    return power_clock(acc, c) * factor


SLOT_W = 75.0  # watts a PCIe x16 slot supplies (PCI Express CEM specification)


def is_slot_powered(acc: Accelerator) -> bool:
    """Whether ``acc`` is an NVIDIA PCIe board drawing no more than its slot supplies (the T4's 70 W,
    the L4's 72 W): no auxiliary power, and clocks that its power limit holds down under load."""
    return acc.vendor == "nvidia" and acc.kind == "gpu" and 0.0 < (acc.tdp_w or 0.0) <= SLOT_W


def is_geforce(acc: Accelerator) -> bool:
    """Whether ``acc`` is an NVIDIA GeForce board (its datasheet rated at a typical boost clock)."""
    return acc.vendor == "nvidia" and "GeForce" in acc.name


def power_clock(acc: Accelerator, c: KernelConstants) -> float:
    """The share of its stock clocks ``acc`` keeps at full load under its power limit:
    (limit / TDP) ** ``power_exp``; 1 where no limit below the TDP is set."""
    if not acc.power_limit_w or not acc.tdp_w or acc.power_limit_w >= acc.tdp_w:
        return 1.0
    return float((acc.power_limit_w / acc.tdp_w) ** c.power_exp)


def tile_use(units: int | None, batch: int, m: int, n: int, simt: bool = False) -> float:
    """The share of the units' time a GEMM of ``batch`` x (``m`` x ``n``) outputs keeps busy
    over its waves of tiles, with the tile the library would pick (``simt``: on the fp32
    cores, where a tile down to 32 x 32 loses nothing: :func:`is_simt`)."""
    if not units or m <= 0 or n <= 0:
        return 1.0
    best = 0.0
    for tm, tn, tile_rate in TILES:
        rate = 1.0 if simt and tm >= SIMT_SMALLEST_TILE else tile_rate
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * max(batch, 1)
        waves = math.ceil(tiles / units)
        # a tile larger than the matrix computes padding
        fill = (m / (math.ceil(m / tm) * tm)) * (n / (math.ceil(n / tn) * tn))
        best = max(best, tiles / (waves * units) * fill * rate)
    return best


def is_simt(acc: Accelerator, key: str) -> bool:
    """Whether ``key`` matrix work runs on ``acc``'s fp32 cores rather than its tensor cores.

    An fp32 GEMM without TF32 on an NVIDIA GPU runs SIMT kernels (cuBLAS's ``sgemm``). A tile's
    rate falls with its size on tensor cores because a small tile brings too few FLOPs per
    operand byte to keep them fed; the fp32 cores are far slower (an A100 SM: 64 fp32 FMAs per
    clock against 1,024 dense fp16 FMAs on its tensor cores, 16 times more, A100 whitepaper),
    and a 32 x 32 fp32 tile (8 FLOPs per operand byte it loads) asks 16 bytes per clock of
    shared memory's 128 (CUDA C++ Programming Guide, compute capability 8.x: 32 banks of 4
    bytes per clock). Measured: an A100's cuBLAS fp32
    product of 1024 x 1024 x 1024 reaches 16 of its 19.5 TFLOP/s (82%) where 128 x 128 tiles
    could fill only 64 of its 108 SMs (triton-lang/triton issue 2491, ``published/kernels.toml``).
    """
    return acc.vendor == "nvidia" and key == "fp32"


def reduction_use(k: int, c: KernelConstants) -> float:
    return k / (k + c.k_half) if k > 0 else 1.0


def gemm_use(acc: Accelerator, batch: int, m: int, n: int, k: int, c: KernelConstants, key: str = "") -> float:
    """The share of the best rate a ``key`` GEMM of these sizes reaches (waves of tiles,
    reduction length)."""
    return tile_use(acc.units, batch, m, n, is_simt(acc, key)) * reduction_use(k, c)


def conv_gemms(problem: Sequence[Any]) -> list[tuple[int, int, int, int, float]]:
    """The GEMMs an implicit-GEMM convolution runs (batch, m, n, k, share of the FLOPs) for a
    traced ``["conv", n, c_in, c_out, spatial_out, kernel, groups, pass, ...]`` problem: the
    forward (outputs x output channels, reducing over input channels x kernel), or the
    backward's data gradient and weight gradient."""
    _, n, c_in, c_out, spatial, kernel, groups, which = problem[:8]
    g = max(int(groups), 1)
    ci, co = max(int(c_in) // g, 1), max(int(c_out) // g, 1)
    rows = int(n) * int(spatial)
    forward = (g, rows, co, ci * int(kernel))
    if which == "forward":
        return [(*forward, 1.0)]
    grads = str(which).removeprefix("backward")  # "d", "w" or "dw": the gradients the call computes
    parts = []
    if "d" in grads:  # dX = dY W^T: as many FLOPs as the forward
        parts.append((g, rows, ci, co * int(kernel)))
    if "w" in grads:  # dW = X^T dY: reduces over the batch's positions
        parts.append((g, co, ci * int(kernel), rows))
    return [(*p, 1.0 / len(parts)) for p in parts] or [(*forward, 1.0)]


def is_grouped(problem: Sequence[Any]) -> bool:
    """A convolution of several groups that is not depthwise (RegNet's, ResNeXt's)."""
    return bool(problem) and problem[0] == "conv" and len(problem) > 6 and int(problem[6]) > 1 \
        and not is_depthwise(problem)


def is_depthwise(problem: Sequence[Any]) -> bool:
    """A convolution of a few channels per group (depthwise): a memory-bound kernel of its own."""
    if not problem or problem[0] != "conv":
        return False
    g = max(int(problem[6]), 1)
    return int(problem[2]) // g <= DEPTHWISE_CHANNELS and int(problem[3]) // g <= DEPTHWISE_CHANNELS


WINOGRAD_WINDOW = "3x3"


def is_winograd(problem: Sequence[Any]) -> bool:
    """A convolution that cuDNN's Winograd algorithms take: a 3 x 3 window, stride 1, no dilation,
    one group, not transposed (the supported configurations of ``CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD``
    and its ``_NONFUSED`` forms, forward, data and filter gradients; cuDNN's API reference)."""
    return len(problem) > 10 and problem[0] == "conv" and problem[8] == WINOGRAD_WINDOW \
        and int(problem[9]) == 1 and int(problem[10]) == 1 and int(problem[6]) == 1


def winograd_scale(acc: Accelerator, key: str, c: KernelConstants) -> float:
    """What a Winograd convolution reaches of ``key``'s best rate, per direct-product FLOP, on ``acc``
    (0: not run). Only an NVIDIA GPU's fp32 work takes it (fp32 without TF32, or TF32 on a part
    whose TF32 tensor rate is no faster than its fp32 cores, a GeForce's): Winograd runs on the
    fp32 cores at ``winograd`` times a GEMM's rate per direct FLOP (fitted to DeepBench's cuDNN
    convolutions, ``published/kernels.toml``), and cuDNN's search (``cudnnFind``, or PyTorch's
    ``cudnn.benchmark``) keeps it where it beats the tensor cores."""
    if acc.vendor != "nvidia" or key not in ("fp32", "tf32") or not (simt := acc.peak("fp32")):
        return 0.0
    rate = acc.peak(key) or simt
    return c.winograd * simt * matrix_share(acc, "fp32", c) / (rate * matrix_share(acc, key, c))


def problem_use(acc: Accelerator, problem: Sequence[Any], c: KernelConstants, key: str = "",
                attention: str | None = None) -> float:
    """The share of the best rate a traced matrix problem reaches at dtype ``key`` (1.0 where
    none is known); ``attention``: the fused attention kernel the user named, if any."""
    if not problem:
        return 1.0
    kind = problem[0]
    if kind == "gemm":
        _, batch, m, n, k = problem[:5]
        return gemm_use(acc, int(batch), int(m), int(n), int(k), c, key)
    if kind == "conv":
        parts = conv_gemms(problem)
        wino = winograd_scale(acc, key, c) if is_winograd(problem) else 0.0

        def use(b: int, m: int, n: int, k: int) -> float:  # the faster algorithm's
            gemm = gemm_use(acc, b, m, n, k, c, key)
            return max(gemm, wino * gemm_use(acc, b, m, n, k, c, "fp32")) if wino else gemm

        # harmonic: the parts run one after another, each FLOP share at its own rate
        return 1.0 / sum(share / max(use(b, m, n, k), 1e-6) for b, m, n, k, share in parts)
    if kind == "attn":
        _, bh, lq, lk, e, ev, causal, backward = problem[:8]
        return attention_use(acc, key, int(bh), int(lq), int(lk), int(e), int(ev), bool(causal), bool(backward), c,
                             sdpa_kernel(acc, key, int(e), int(ev), attention))
    return 1.0


def exp_rate(acc: Accelerator) -> float:
    """Exponentials per second on ``acc``'s special-function units: 16 per SM per clock, the
    clock read from the fp32 rate (lanes x 2 FLOPs x SMs x clock). An A100: 19.5 TFLOP/s over
    64 lanes x 2 gives 2.4 T exponentials/s (128 times fewer than its 312 dense fp16 TFLOP/s);
    an H100 SXM: 67 over 128 x 2 gives 4.2 T (236 times fewer than its 989). Other vendors'
    parts are taken as 64 lanes per unit (AMD CDNA's transcendentals run at a quarter of its
    64-lane fp32 rate, the CDNA3 instruction-set guide)."""
    return sm_clocks(acc) * SFU_PER_SM


def sm_clocks(acc: Accelerator) -> float:
    """Clock cycles a second over all of ``acc``'s SMs (units x clock), read from its fp32 rate:
    lanes x 2 FLOPs per cycle on each (128 fp32 lanes from compute capability 8.6, 64 before; other
    vendors' units taken as 64). An H100 SXM: 67 TFLOP/s over 2 x 128 gives 132 SMs at 1.98 GHz."""
    sm = sm_of(acc)
    lanes = 64 if sm is None or sm in FP32_LANES_64 else 128
    return acc.vector_peak / (2 * lanes)


def attention_use(acc: Accelerator, key: str, bh: int, seq_q: int, seq_k: int, head: int, head_v: int,
                  causal: bool, backward: bool, c: KernelConstants, kernel: str = "flash2") -> float:
    """The share of ``acc``'s best ``key`` matrix rate a FlashAttention-2 kernel reaches.

    Its matrix work runs at a share of the mma.sync rate (:data:`MMA_SYNC_SHARE` of a Hopper's
    peak) that grows with the keys each block of queries runs over (half of ``seq_k`` on
    average under a causal mask), over waves of query blocks; unlike a best-shape GEMM it
    does not reach the power-limited clocks of :func:`matrix_share` (it keeps the tensor
    cores under three quarters busy), so its share is of the datasheet peak (slowed by a power
    limit set below the TDP and a GeForce board's boost alone, :func:`board_clock`); a causal
    mask's diagonal tiles are computed whole (1 + FLASH_BLOCK / seq_k of the visible pairs);
    each score's exponential (one per pair, forward, and once again in the backward, which
    recomputes the probabilities) takes a special-function result (:func:`exp_rate`), added to the
    matrix time as FlashAttention-2 runs its softmax between its two matmuls. The matrix
    FLOPs are footprint's count (2 (E + Ev) per visible pair forward, twice that backward).
    The result is a share of the rate :func:`matrix_share` gives, as the other problems' are.
    ``kernel`` "cudnn" or "flash3": a warpgroup kernel (wgmma), whose matrix work runs at
    ``attn_wgmma`` of the peak where FlashAttention-2's runs at the mma.sync share on Hopper.
    ``kernel`` "flash1": FlashAttention (v1) or its Triton port, FlashAttention-2's work over
    1 + head / ``attn_v1_head``: v1 splits each block's keys and values over its four warps, which
    write their partial products to shared memory, synchronise and add them up ("split-K"), traffic
    that grows with the head dimension; FlashAttention-2 splits the queries instead (Dao 2023,
    arXiv:2307.08691, section 3.3). Measured in the FlashAttention-2 release's tables, both at
    0.55-0.7 of FlashAttention-2's throughput at head size 64 and 0.4-0.5 at 128, on the A100 and
    the H100 alike (``published/kernels.toml``), fitted. Another kernel on an AMD part (ROCm's
    flash-attention package, CK) reaches the ``amd`` share of FlashAttention-2's, as AMD's GEMMs
    reach of NVIDIA's (an assumption, not a fit).
    ``kernel`` "aotriton": PyTorch's SDPA on ROCm (AOTriton's kernels), with constants of its own
    (``attn_aotriton``, ``attn_aotriton_s_half``), fitted to its published forward times on the MI300X;
    its backward runs at ``attn_aotriton_backward`` of its forward's rate at the same shape, the ratio
    fitted to its published pairs on the MI355X.
    """
    keys = seq_k / 2 if causal else seq_k
    aotriton = kernel == "aotriton"
    if aotriton:
        share = c.attn_aotriton * keys / (keys + c.attn_aotriton_s_half)
    else:
        share = c.attn * keys / (keys + c.attn_s_half)
        share *= c.attn_backward if backward else 1.0
    if sm_of(acc) in WARPGROUP_SM:
        share *= c.attn_wgmma if kernel in ("cudnn", "flash3") else MMA_SYNC_SHARE
    if kernel == "flash1":
        share /= 1 + head / c.attn_v1_head
    share *= tile_use(acc.units, bh, seq_q, FLASH_BLOCK)
    flops_per_pair = 2 * (head + head_v) * (2 if backward and not aotriton else 1)
    matrix_rate = (acc.peak(key) or acc.vector_peak) * share
    exp_per_flop = EXP_PER_SCORE / (exp_rate(acc) * flops_per_pair)  # seconds of exponentials per matrix FLOP
    use = share / (1 + matrix_rate * exp_per_flop)
    if causal and seq_k > 0:
        use /= 1 + FLASH_BLOCK / seq_k
    if aotriton and backward:  # its backward runs at a fitted share of its forward's rate at the same shape
        use *= c.attn_aotriton_backward
    if acc.vendor == "amd" and not aotriton:  # reach ``amd`` of it, as AMD's GEMM libraries do (matrix_share)
        use *= c.amd
    return use * board_clock(acc, c) / matrix_share(acc, key, c)
