"""Roofline latency per operator on an accelerator, from the trace.

For every operator of the trace::

    time = max(FLOPs / compute ceiling, bytes / bandwidth ceiling) + per-call overhead

* compute ceiling: matrix operators (matmul, convolution, attention) use the accelerator's
  dense peak for the operator's dtype; elementwise and reduction work uses the vector fp32
  rate. fp32 convolutions run as TF32 on NVIDIA GPUs that have it
  (``torch.backends.cudnn.allow_tf32`` defaults to True) and fp32 matmuls do not
  (``torch.backends.cuda.matmul.allow_tf32`` defaults to False); on ROCm neither does.
  ``tf32=True/False`` sets both.
* bytes: what the operator reads plus what it writes (from the trace).
* kernels beyond the operator's own, on GPUs (``estimate/gpu_kernels.py``, each with its
  source): the NCHW<->NHWC transposes around tensor-core convolutions when the tensors are
  NCHW (``layout="nchw"``, PyTorch's default; ``"nhwc"`` for channels-last), a batch norm's
  second pass over its tensors in training (and PyTorch's slower NCHW kernels for bf16), and
  no time for the optimizer state that only the first step creates.
* overhead: the host's time to dispatch the operator (views launch nothing, but on a
  calibrated device a view costs its measured dispatch time).
* host and device: a CPU runs the dispatch and the kernel in line, so a run takes the sum of
  the operators' times. A GPU (or SoC) runs kernels asynchronously: the host queues each
  kernel and moves on, and the device runs them in order as they arrive. Two clocks follow
  this (Prediction.effective): the host's advances by every operator's overhead, the
  device's starts a kernel once it is both launched and free, and the run ends when both
  are done. A small model is then host-bound (the sum of overheads) and a large one
  device-bound (the sum of kernel times), rather than paying both. Measured on an H100
  (benchmarks/results/gpu-validate-h100-2.json, torchvision models at batch 1 and 16):
  median |error| 9.4% with the two clocks against 19.7% for the plain sum. This needs the
  host's time per operator, which ``footprint calibrate`` measures: on datasheet rows the
  default per-operator figure stays a cost added to each kernel, as the published tables
  those defaults were checked against were fitted (with two clocks there, resnet50 at batch
  16 on the H100 went from -0.2% to -46%: the datasheet ceilings are optimistic for small
  kernels, and the additive launch figure is what covers it).
* ceilings: the datasheet peak times an achievable fraction (below), unless
  ``footprint calibrate`` measured this device: then the measured matmul and convolution
  FLOP/s, copy bandwidth and per-call overhead replace them.

Achievable fractions (defaults, from published measurements): the best-shaped bf16 matmul
reaches 80% of dense peak on an H100 SXM and 87% on an A100 SXM; a device copy moves
87-90% of the datasheet bandwidth; published LLM estimators fit 0.5-0.7 of peak FLOP/s.
Model operators are not best-shaped, so matrix work defaults to 0.7, vector work to 0.5,
memory traffic to 0.85. Every operator of an eager model also costs the Python module
call, the dispatcher, the allocation and the kernel launch: 10 us per operator on GPUs,
15 us on systems-on-chip, 5 us on CPUs by default; `footprint calibrate` measures it (a
model of 100 tiny kernels on the device).

The seed documents' lower bound, FLOPs / peak FLOP/s at 100%, is reported beside the
roofline figure: no run can be faster.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...dtypes import RATE_KEYS, rate_key
from ...errors import FootprintError
from ...hardware.db import Accelerator
from ...trace.records import Trace
from . import constants as fitted
from .bandwidth import bandwidth_share
from .cpu import downsamples, extra_costs, kind_extra, op_kind, window_kind
from .fp8 import fp8_casts
from .fusion import accumulated_gradients, compiled_layout, fused_chains, host_s, input_gradient_sums, module_chains
from .gpu import (
    LAYOUTS,
    batch_norm_layout_factor,
    batch_norm_pass_bytes,
    is_allocation,
    is_host_scalar_read,
    is_state_init,
    layout_transpose_bytes,
    loop_s,
    norm_rows_s,
)
from .matrix import board_clock, is_depthwise, is_grouped, matrix_share, power_clock, problem_use, sm_clocks
from .prediction import Ceilings, OpTime, Prediction
from .sdpa import sm_of

EFFICIENCY = {"matrix": 0.7, "vector": 0.5, "memory": 0.85}
MATVEC_ROWS = 4  # matmuls of this few rows read their matrix at the calibrated matvec bandwidth
LAUNCH_OVERHEAD_S = {"gpu": 10e-6, "soc": 15e-6, "cpu": 5e-6}
# eager PyTorch's host time per operator on a GPU (Python, dispatcher, launch) and per view,
# overlapped with the device's (two clocks): torchvision models at batch 1 on an H100 host,
# where the device waits on the host, took 16-24 us per operator (resnet50 3.69 ms for 227
# operators, resnet18 1.74 ms for 88, mobilenet_v2 4.98 ms for 203, vit_b_16 3.53 ms for 137
# and 377 views: benchmarks/results/gpu-validate-h100-2.txt); a host of its own can be
# measured with `footprint calibrate --device cuda`
HOST_OP_S = 18e-6
HOST_VIEW_S = 3.5e-6

def ceilings(acc: Accelerator, efficiency: Mapping[str, float] | None = None,
             overhead_s: float | None = None, calibrated: bool = True) -> Ceilings:
    """Achievable rates on ``acc``: measured where calibrated, else datasheet x efficiency."""
    eff = dict(EFFICIENCY)
    for k, v in (efficiency or {}).items():
        if k not in eff:
            raise FootprintError(f"unknown efficiency '{k}': use {', '.join(eff)}")
        if not 0 < v <= 1:
            raise FootprintError(f"efficiency {k} must be in (0, 1], got {v}")
        eff[k] = v
    cal = acc.calibrated if calibrated else None
    if cal and acc.kind == "gpu" and not efficiency:
        return _calibrated_gpu(acc, cal, eff, overhead_s)
    if cal:
        matrix = {k: v * 1e12 for k, v in cal.get("matmul_tflops", {}).items()}
        conv = {k: v * 1e12 for k, v in cal.get("conv_tflops", {}).items()}
        # elementwise work on a CPU runs on the same vector units as its matmuls
        base = matrix.get("fp32") or acc.vector_peak
        vector = base if acc.kind == "cpu" else base * eff["vector"]
        return Ceilings(matrix=matrix, conv=conv, vector=vector, bandwidth=cal["copy_gbs"] * 1e9,
                        overhead=overhead_s if overhead_s is not None else cal["op_overhead_us"] * 1e-6,
                        source=f"calibrated {cal.get('when', '')}".strip(), efficiency={},
                        conv_by_k=_by_size(cal.get("conv_fp32_by_batch_k"), 1e12),
                        depthwise_by_k=_by_size(cal.get("depthwise_fp32_by_batch_k"), 1e12),
                        conv_strided_by_k=_by_size(cal.get("conv_fp32_strided_by_batch_k"), 1e12),
                        matmul_by_rows=_matmul_tables(cal),
                        matvec_bandwidth=cal["matvec_gbs"] * 1e9 if cal.get("matvec_gbs") else None,
                        matvec_by_k={key: {lay: _by_size(by_rows, 1e9) for lay, by_rows in tables.items()
                                           if isinstance(by_rows, dict) and by_rows}
                                     for key, tables in (("fp32", cal.get("matvec_gbs_by_k") or {}),
                                                         ("bf16", cal.get("matvec_bf16_gbs_by_k") or {}))
                                     if tables},
                        pooling=dict(cal.get("pooling_per_s") or {}),
                        linear_by_rows=_by_size(cal.get("linear_fp32_by_rows_k"), 1e12),
                        conv_grouped_by_k=_by_size(cal.get("conv_fp32_grouped_by_batch_k"), 1e12),
                        extra_overhead={k: v * 1e-6 for k, v in extra_costs(cal.get("tiny_call_us") or {}).items()}
                        if overhead_s is None else {},
                        # a view's dispatch is host time: in line with the kernels on a CPU,
                        # overlapped with the device's on a GPU (the two clocks)
                        view_overhead=cal.get("view_overhead_us", 0.0) * 1e-6 if overhead_s is None else 0.0,
                        overlap=acc.kind != "cpu")
    if acc.bandwidth is None:
        raise FootprintError(f"'{acc.id}' has no memory bandwidth figure: run `footprint calibrate` on it first")
    if acc.kind == "gpu" and not efficiency:  # per-kernel mechanisms, their constants fitted
        c = fitted.current()
        matrix = {k: peak * matrix_share(acc, k, c) for k in acc.tflops if (peak := acc.peak(k)) is not None}
        return Ceilings(matrix=matrix, conv=dict(matrix), vector=acc.vector_peak * eff["vector"],
                        bandwidth=acc.bandwidth * bandwidth_share(acc, c),
                        overhead=overhead_s if overhead_s is not None else HOST_OP_S,
                        source="datasheet, per-kernel model", efficiency={}, model="kernels", overlap=True,
                        view_overhead=HOST_VIEW_S if overhead_s is None else 0.0)
    matrix = {k: peak * eff["matrix"] for k in acc.tflops if (peak := acc.peak(k)) is not None}
    return Ceilings(matrix=matrix, conv=dict(matrix), vector=acc.vector_peak * eff["vector"],
                    bandwidth=acc.bandwidth * eff["memory"],
                    overhead=overhead_s if overhead_s is not None else LAUNCH_OVERHEAD_S[acc.kind],
                    source="datasheet", efficiency=eff)


def host_operator_s(acc: Accelerator) -> float:
    """Seconds of host time per eager operator on ``acc``: a calibrated CPU's measured figure;
    on a GPU ``HOST_OP_S`` even where calibrated (see :func:`_calibrated_gpu`)."""
    cal = acc.calibrated or {}
    return cal["op_overhead_us"] * 1e-6 if acc.kind != "gpu" and cal.get("op_overhead_us") else HOST_OP_S


def _calibrated_gpu(acc: Accelerator, cal: Mapping[str, Any], eff: Mapping[str, float],
                    overhead_s: float | None) -> Ceilings:
    """A calibrated GPU: the per-kernel mechanisms (waves, tiles, short reductions, fused
    attention, normalisation rows) over the plateaus this GPU measured (its large square
    matmuls per dtype, its copy bandwidth) in place of the datasheet's times the fitted shares.

    The host's cost per operator stays ``HOST_OP_S``: the calibration's probe (a model of tiny
    linears and ReLUs) did not follow what models pay on two H100 hosts. It read 12.3 and
    19.0 us where torchvision models at batch 1 and 16 paid about 18 on both; priced with it,
    twelve models' median error was 30.2% and 23.1%, with 18 us 5.4% and 17.5%; adding each
    kind's tiny-call cost on top (a convolution's, a batch norm's) made the second 31.5%
    (benchmarks/results/gpu-validate-h100-6.json, -7.json). The probe and the tiny calls are
    kept in the calibration and shown, not priced."""
    c = fitted.current()
    measured = {k: v * 1e12 for k, v in (cal.get("matmul_tflops") or {}).items()}
    matrix = {k: peak * matrix_share(acc, k, c) for k in acc.tflops if (peak := acc.peak(k)) is not None}
    matrix.update(measured)
    bandwidth = cal["copy_gbs"] * 1e9 if cal.get("copy_gbs") else (acc.bandwidth or 0.0) * bandwidth_share(acc, c)
    return Ceilings(matrix=matrix, conv=dict(matrix), vector=acc.vector_peak * eff["vector"], bandwidth=bandwidth,
                    overhead=HOST_OP_S if overhead_s is None else overhead_s,
                    source=f"calibrated {cal.get('when', '')}".strip() + ", per-kernel model", efficiency={},
                    model="kernels", overlap=True, view_overhead=HOST_VIEW_S if overhead_s is None else 0.0)


def _by_size(tables: Mapping[str, list[list[float]]] | None, unit: float) -> dict[int, list[list[float]]]:
    """A calibration's {size: [[K, rate], ...]} with integer sizes and rates in base units."""
    return {int(b): [[k, r * unit] for k, r in t] for b, t in (tables or {}).items()}


def _matmul_tables(cal: Mapping[str, object]) -> dict[str, dict[int, list[list[float]]]]:
    """{dtype: {rows: [[K, FLOP/s], ...]}}: fp32's few-row tables and its 512-row one, bf16's."""
    out: dict[str, dict[int, list[list[float]]]] = {}
    fp32 = _by_size(cal.get("matmul_fp32_by_rows_k"), 1e12)  # type: ignore[arg-type]
    if cal.get("matmul_fp32_by_k"):
        fp32[512] = [[k, r * 1e12] for k, r in cal["matmul_fp32_by_k"]]  # type: ignore[attr-defined]
    if fp32:
        out["fp32"] = fp32
    bf16 = _by_size(cal.get("matmul_bf16_by_rows_k"), 1e12)  # type: ignore[arg-type]
    if bf16:
        out["bf16"] = bf16
    return out


def _dtype_key(names: list[str]) -> str:
    for n in names:
        key = rate_key(n)
        if key is not None:
            return key
    return "fp32"


# the rate key of each event of the trace priced last: fit prices one trace on every accelerator
_LAST_KEYS: list[Any] = [None, []]


def _rate_keys(trace: Trace) -> list[str]:
    """Each event's rate key (its first output dtype's), computed once per trace."""
    if _LAST_KEYS[0] is not trace.events or len(_LAST_KEYS[1]) != len(trace.events):
        _LAST_KEYS[:] = [trace.events, [_dtype_key(e.out_dtypes) for e in trace.events]]
    return _LAST_KEYS[1]


def master_scale(trace: Trace) -> float:
    """How much wider each rank's sharded parameters, gradients and optimizer state are than the
    traced ones: under FSDP2's MixedPrecisionPolicy the trace runs in param_dtype (bf16) while
    the shards stay in the parameters' own dtype (fp32: 2; 1 otherwise). The optimizer steps
    those, so its kernels move that many times the traced bytes; measured on an H100 (FSDP2 on
    one rank, Llama-3-8B cut to 2 and 4 layers, AdamW foreach): 29 ns per parameter, about 87
    bytes of fp32 traffic, as its ten passes over fp32 tensors move."""
    return float(trace.settings.get("fsdp_state_scale", 1.0))


def estimate_latency(trace: Trace, acc: Accelerator, *, tf32: bool | None = None,
                     efficiency: Mapping[str, float] | None = None, overhead_s: float | None = None,
                     calibrated: bool = True, compute_dtype: str | None = None,
                     layout: str = "nchw", fp8: str | None = None, compiled: bool = False,
                     cuda_graphs: bool = False, micro_batches: int = 1) -> Prediction:
    """Roofline time of every operator of ``trace`` on ``acc`` (see the module docstring).

    ``compute_dtype`` ("fp16", "bf16", ...) times floating-point matrix work at that dtype's
    rate whatever dtype it was traced in (bytes stay as traced). ``layout``: the memory
    layout of the model's 4-d activations, "nchw" (PyTorch's default) or "nhwc"
    (``channels_last``). On GPUs the kernels' own traffic is added (:mod:`.gpu_kernels`): the
    transposes around tensor-core convolutions in NCHW, batch norm's second pass in
    training; and an optimizer's first-step state creation is left out of a step's time.
    ``fp8`` (tensorwise, rowwise, delayed, mxfp8): FP8 training's matmuls (:func:`fp8_casts`, a step of
    ``micro_batches``).
    ``compiled``: the model runs under torch.compile (:mod:`.fusion`): chains of elementwise and
    normalisation operators fused into one kernel each, convolutions in channels-last on NVIDIA
    GPUs, and on a GPU the host's time per kernel a launch's; ``cuda_graphs``: replayed as a CUDA
    graph, the host launches the graph once (:func:`.fusion.host_s`).
    """
    if compute_dtype is not None and compute_dtype not in RATE_KEYS:
        raise FootprintError(f"unknown dtype '{compute_dtype}': use fp32, tf32, fp16, bf16, fp8 or int8")
    layout = layout.lower().replace("channels_last", "nhwc").replace("channels-last", "nhwc")
    if layout not in LAYOUTS:
        raise FootprintError(f"unknown layout '{layout}': use {' or '.join(LAYOUTS)} (channels_last)")
    c = ceilings(acc, efficiency, overhead_s, calibrated)
    notes: list[str] = []
    heads: dict[int, int] = {}
    folded: set[int] = set()
    mode = "eager" if acc.kind != "gpu" else "cuda-graphs" if cuda_graphs else "compiled" if compiled else "eager"
    launched = False  # a kernel launched already (a graph's launch is charged to its first)
    if cuda_graphs:
        notes.append("CUDA graph: the host launches the step once, not each kernel")
    if compiled:
        heads, folded = fused_chains(trace.events)
        layout = compiled_layout(acc, layout)
        notes.append(f"torch.compile: {len(heads)} fused kernels in place of {len(heads) + len(folded)} elementwise "
                     "and normalisation operators" + (", convolutions in channels-last" if layout == "nhwc" else ""))
    elif trace.settings.get("fused_modules"):  # Megatron-core's or --fused-kernels' modules (layouts.fused)
        heads, folded = module_chains(trace.events, set(trace.settings["fused_modules"]),
                                      set(trace.settings.get("rope_modules", ())))
        if heads:
            notes.append(f"fused kernels: {len(heads)} in place of {len(heads) + len(folded)} elementwise and "
                         "normalisation operators of the fused norms and activations")
    if trace.settings.get("wgrad_accumulation_fused"):  # Megatron-core: into main_grad by the GEMM itself
        summed = accumulated_gradients(trace.events, trace.params)
        folded = folded | summed
        if summed:
            notes.append(f"gradient accumulation fusion: {len(summed)} gradient adds in the weight-gradient GEMMs")
    if trace.settings.get("merged_linears"):  # Megatron-core's linear_qkv and linear_fc1
        sums = input_gradient_sums(trace.events, trace.params, set(trace.settings["merged_linears"]))
        folded = folded | sums
        if sums:
            notes.append(f"merged linears: {len(sums)} input-gradient sums in their one data-gradient GEMM")
    missing: set[str] = set()
    ops: list[OpTime] = []
    flops_by_dtype: dict[str, int] = {}
    has_tf32 = "tf32" in c.matrix and acc.kind != "cpu"
    # PyTorch's default (cudnn.allow_tf32) sends fp32 convolutions to TF32 on NVIDIA GPUs; ROCm
    # keeps fp32 unless asked (tf32=True)
    conv_tf32 = tf32 if tf32 is not None else acc.vendor == "nvidia"
    gpu = acc.kind == "gpu"
    nvidia_sm = sm_of(acc)
    k_const = fitted.current()
    clocks = sm_clocks(acc) * board_clock(acc, k_const) if nvidia_sm is not None else 0.0  # the SMs' cycles a second
    training = bool(trace.settings.get("training")) and bool(trace.settings.get("backward"))
    kernels = c.model == "kernels"
    floor = k_const.kernel_floor_s if kernels else 0.0
    total_flops = 0
    uses: dict[tuple[Any, ...], float] = {}  # problem_use by problem and dtype: layers repeat their shapes
    attention = trace.settings.get("attention_kernel")  # a fused attention kernel the user named
    casts = fp8_casts(trace, fp8, micro_batches) if fp8 and fp8 != "none" else {}
    wider = master_scale(trace)
    for i, (e, dkey) in enumerate(zip(trace.events, _rate_keys(trace), strict=True)):
        nbytes = heads.get(i, e.bytes_read + e.bytes_written) if i not in folded else 0
        if e.phase == "optimizer":  # it steps the wider master copies, not the traced ones
            nbytes = round(nbytes * wider)
        total_flops += e.flops
        if e.kind == "view" or (gpu and (is_host_scalar_read(e) or is_allocation(e))):  # no kernel, a dispatch
            ops.append(OpTime(i, e.op, e.module, e.phase, e.kind, dkey, e.flops, nbytes, 0.0, 0.0,
                              host_s(mode, c.view_overhead, False, False)))
            continue
        if training and is_state_init(e):  # made in the first step only: not a step's time
            ops.append(OpTime(i, e.op, e.module, e.phase, e.kind, dkey, e.flops, nbytes, 0.0, 0.0, 0.0))
            continue
        extra = 0  # bytes the operator's own kernels move beyond the traced ones
        transposes = 0  # bytes of separate kernels around it
        compute = 0.0
        bandwidth = c.bandwidth
        if e.flops:
            if e.kind == "matrix":
                is_conv = "convolution" in e.op
                rates = c.conv if is_conv else c.matrix
                key = compute_dtype if compute_dtype and dkey in ("fp32", "fp16", "bf16") else dkey
                if i in casts:
                    key, transposes = "fp8", casts[i]
                if key == "fp32" and has_tf32 and (conv_tf32 if is_conv else bool(tf32)):
                    key = "tf32"
                if gpu and acc.vendor == "nvidia" and i not in casts:
                    transposes = layout_transpose_bytes(e, key, layout)
                rate = rates.get(key) or c.matrix.get(key)
                outs = sum(math.prod(s) for s in e.out_shapes) if e.out_shapes else 0
                if outs and is_conv and key == "fp32" and c.conv_by_k:
                    batch = e.out_shapes[0][0] if e.out_shapes[0] else 1
                    dw = is_depthwise(e.problem)
                    strided = not dw and bool(c.conv_strided_by_k) and downsamples(e.problem, e.bytes_read,
                                                                                   e.out_shapes[0])
                    grouped = is_grouped(e.problem)
                    rate = c.conv_rate(e.macs / outs, max(1, batch), dw, strided, grouped)
                elif outs and not is_conv and c.matmul_by_rows:
                    rows = outs // max(e.out_shapes[0][-1], 1) if e.out_shapes[0] else 1
                    rate = c.matmul_rate(e.macs / outs, max(1, rows), key) or rate
                    if e.transposed and key == "fp32":  # nn.Linear's layout, where calibrated
                        rate = c.linear_rate(e.macs / outs, rows) or rate
                    if rows <= MATVEC_ROWS:  # its matrix streams as a matvec's
                        bandwidth = min(bandwidth, c.matvec_rate(e.macs / outs, e.transposed, max(1, rows), key))
                if rate is None:
                    missing.add(key)
                    rate = rates.get("fp32") or c.matrix["fp32"]
                vec = e.flops - e.matrix_flops  # a bias add or scaling inside the op
                if kernels and e.problem and e.problem[0] == "attn":
                    # a fused attention's softmax runs in its registers beside its matmuls: the
                    # share (matrix.attention_use, fitted to the FlashAttention tables
                    # by their matrix FLOPs alone) already holds its time
                    vec = 0
                if kernels and is_depthwise(e.problem):  # a memory-bound kernel of its own
                    rate = c.vector
                elif kernels:  # waves of tiles, short reductions, fused attention
                    problem = (*e.problem, key)
                    use = uses.get(problem)
                    if use is None:
                        use = uses[problem] = problem_use(acc, e.problem, k_const, key, attention)
                    rate *= use
                compute = e.matrix_flops / rate + max(vec, 0) / c.vector
                flops_by_dtype[key] = flops_by_dtype.get(key, 0) + e.matrix_flops
            else:
                window = window_kind(e.op) if c.pooling else None
                compute = e.flops / ((c.pooling.get(window) or c.vector) if window else c.vector)
        slowdown = 1.0
        if gpu:
            extra += batch_norm_pass_bytes(e, training)
            if acc.vendor == "nvidia":
                slowdown = batch_norm_layout_factor(e, training, layout, bandwidth)
        memory = (nbytes + extra) / bandwidth * slowdown
        if nvidia_sm is not None and kernels and not compiled:  # eager's block per row (gpu.norm_rows_s)
            memory = max(memory, norm_rows_s(e, acc.units, nvidia_sm))
            if e.loop and i not in folded:  # its unvectorized loops (gpu.loop_s)
                memory = max(memory, loop_s(e, clocks))
        if (nbytes or e.flops) and i not in folded:  # a kernel's least time on the device: its own
            compute, memory = compute + floor, memory + floor
        overhead = c.overhead + kind_extra(c.extra_overhead, op_kind(e.op, e.problem)) if c.extra_overhead \
            else c.overhead
        if i in folded:  # part of the kernel its chain's first operator launches
            overhead = 0.0
        launches = bool(nbytes or e.flops or extra) and i not in folded
        overhead = host_s(mode, overhead, launches, not launched)
        launched = launched or launches
        ops.append(OpTime(i, e.op, e.module, e.phase, e.kind, dkey, e.flops, nbytes, compute, memory, overhead,
                          transposes / c.bandwidth))
    for key in sorted(missing):
        notes.append(f"{acc.name} has no published {key} rate: its fp32 rate is used for {key} matrix work")
    if gpu and (clock := power_clock(acc, k_const)) < 1.0:
        notes.append(f"power limit {acc.power_limit_w:g} W of its {acc.tdp_w:g} W TDP: matrix work and fused attention "
                     f"at {clock:.0%} of their rate at the TDP")
    unknown = {e.op for e in trace.events if e.kind == "unknown"}
    if unknown:
        notes.append("operators without a FLOP formula are timed by their bytes only: " + ", ".join(sorted(unknown)))
    if compute_dtype:
        notes.append(f"matrix work timed at the {compute_dtype} rate; bytes as traced")
    if fp8 and fp8 != "none" and not casts:  # torchao and Transformer Engine convert nn.Linear modules only
        notes.append(f"fp8 ({fp8}): no matmul runs in fp8: none is an nn.Linear's (the head apart) in bf16 or fp16 "
                     "with both sides multiples of 16 (GPT-2's Conv1D is not an nn.Linear)")
    if casts:
        notes.append(f"fp8 ({fp8}): {len(casts)} matmuls of linear layers at the fp8 rate, each operand's scaling "
                     "and cast a pass of its own")
        if fp8 == "tensorwise" and trace.settings.get("fp8_colwise_inputs"):  # torchao's float8 TP styles
            notes.append("fp8 under tensor parallelism: each attention and MLP input cast once, before its gather")
        if fp8 in ("rowwise", "rowwise_with_gw_hp"):  # priced as tensorwise's GEMM: an optimistic bound, said so
            notes.append(f"fp8 {fp8}: GEMMs priced as tensor-wise ones; PyTorch's row-wise _scaled_mm, a CUTLASS "
                         "kernel, runs at 50-100% of their speed (pytorch issue 147971): an optimistic bound")
    main = max(flops_by_dtype, key=lambda k: flops_by_dtype[k]) if flops_by_dtype else "fp32"
    return Prediction(accelerator=acc, ceilings=c, ops=ops, flops=total_flops, main_dtype=main, notes=notes,
                      missing_dtypes=sorted(missing))
