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
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ...analysis.summary import ancestors
from ...dtypes import RATE_KEYS, rate_key
from ...errors import FootprintError
from ...hardware.db import Accelerator
from ...trace.records import Trace
from .gpu import LAYOUTS, batch_norm_layout_factor, batch_norm_pass_bytes, is_state_init, layout_transpose_bytes

EFFICIENCY = {"matrix": 0.7, "vector": 0.5, "memory": 0.85}
MATVEC_ROWS = 4  # matmuls of this few rows read their matrix at the calibrated matvec bandwidth
LAUNCH_OVERHEAD_S = {"gpu": 10e-6, "soc": 15e-6, "cpu": 5e-6}

@dataclass
class Ceilings:
    """The rates one prediction uses (FLOP/s, bytes/s, seconds)."""

    matrix: dict[str, float]
    conv: dict[str, float]
    vector: float
    bandwidth: float
    overhead: float
    source: str  # "datasheet" or "calibrated"
    efficiency: dict[str, float] = field(default_factory=dict)
    # calibrated fp32 rates against the reduction length K: [[K, FLOP/s], ...] sorted by K
    conv_by_k: dict[int, list[list[float]]] = field(default_factory=dict)  # per batch size
    matmul_by_k: list[list[float]] = field(default_factory=list)
    view_overhead: float = 0.0  # seconds per view operator (calibrated eager devices; 0: views are free)
    # calibrated fp32 matmul rates by rows M (few-row matmuls), each against K
    matmul_by_rows: dict[int, list[list[float]]] = field(default_factory=dict)
    # bytes/s a one-row matmul streams its matrix at (calibrated CPUs; None: the bandwidth)
    matvec_bandwidth: float | None = None
    # few-row products' streaming rate by layout ("n", "t": the right operand transposed, as
    # nn.Linear's), rows and K: {layout: {rows: [[K, bytes/s], ...]}} (calibrated CPUs; empty:
    # matvec_bandwidth)
    matvec_by_k: dict[str, dict[int, list[list[float]]]] = field(default_factory=dict)
    overlap: bool = False  # host and device clocks (calibrated GPUs and SoCs; module docstring)

    def matvec_rate(self, k: float, transposed: bool, rows: int = 1) -> float:
        """Bytes/s a product of ``rows`` rows streams its matrix at: by layout, rows (in log
        rows between the calibrated ones) and K where calibrated, else the one calibrated
        one-row figure, else the bandwidth."""
        tables = self.matvec_by_k.get("t" if transposed else "n")
        if tables:
            return self._by_size(tables, k, rows)
        return self.matvec_bandwidth or self.bandwidth

    def conv_rate(self, k: float, batch: int) -> float:
        """Calibrated convolution rate at reduction length ``k``, interpolated in log batch."""
        return self._by_size(self.conv_by_k, k, batch)

    def matmul_rate(self, k: float, rows: int) -> float:
        """Calibrated matmul rate at reduction length ``k`` and ``rows`` output rows,
        interpolated in log rows between the few-row tables and the 512-row one."""
        tables = {**self.matmul_by_rows, 512: self.matmul_by_k} if self.matmul_by_rows else {512: self.matmul_by_k}
        return self._by_size(tables, k, rows)

    def _by_size(self, tables: dict[int, list[list[float]]], k: float, size: int) -> float:
        """A by-K rate interpolated in log size between tables measured at sizes (flat beyond)."""
        bs = sorted(tables)
        if size <= bs[0] or len(bs) == 1:
            return self.rate_at(tables[bs[0]], k)
        for b0, b1 in zip(bs, bs[1:], strict=False):
            if size <= b1:
                f = (math.log(size) - math.log(b0)) / (math.log(b1) - math.log(b0))
                r0, r1 = self.rate_at(tables[b0], k), self.rate_at(tables[b1], k)
                return r0 + f * (r1 - r0)
        return self.rate_at(tables[bs[-1]], k)

    def rate_at(self, table: list[list[float]], k: float) -> float:
        """Interpolate a by-K table linearly in log K (flat beyond its ends)."""
        if k <= table[0][0]:
            return table[0][1]
        for (k0, r0), (k1, r1) in zip(table, table[1:], strict=False):
            if k <= k1:
                f = (math.log(k) - math.log(k0)) / (math.log(k1) - math.log(k0)) if k1 > k0 else 1.0
                return r0 + f * (r1 - r0)
        return table[-1][1]

    def to_dict(self) -> dict[str, Any]:
        return {"matrix_flops": self.matrix, "conv_flops": self.conv, "vector_flops": self.vector,
                "bandwidth_bytes_per_s": self.bandwidth, "overhead_s": self.overhead, "source": self.source,
                "efficiency": self.efficiency}


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
    if cal:
        matrix = {k: v * 1e12 for k, v in cal.get("matmul_tflops", {}).items()}
        conv = {k: v * 1e12 for k, v in cal.get("conv_tflops", {}).items()}
        # elementwise work on a CPU runs on the same vector units as its matmuls
        base = matrix.get("fp32") or acc.vector_peak
        vector = base if acc.kind == "cpu" else base * eff["vector"]
        return Ceilings(matrix=matrix, conv=conv, vector=vector, bandwidth=cal["copy_gbs"] * 1e9,
                        overhead=overhead_s if overhead_s is not None else cal["op_overhead_us"] * 1e-6,
                        source=f"calibrated {cal.get('when', '')}".strip(), efficiency={},
                        conv_by_k={int(b): [[k, r * 1e12] for k, r in t]
                                   for b, t in cal.get("conv_fp32_by_batch_k", {}).items()},
                        matmul_by_k=[[k, r * 1e12] for k, r in cal.get("matmul_fp32_by_k", [])],
                        matmul_by_rows={int(m): [[k, r * 1e12] for k, r in t]
                                        for m, t in cal.get("matmul_fp32_by_rows_k", {}).items()},
                        matvec_bandwidth=cal["matvec_gbs"] * 1e9 if cal.get("matvec_gbs") else None,
                        matvec_by_k={lay: {int(m): [[k, r * 1e9] for k, r in t] for m, t in by_rows.items()}
                                     for lay, by_rows in cal.get("matvec_gbs_by_k", {}).items()
                                     if isinstance(by_rows, dict) and by_rows},
                        # a view's dispatch is host time: in line with the kernels on a CPU,
                        # overlapped with the device's on a GPU (the two clocks)
                        view_overhead=cal.get("view_overhead_us", 0.0) * 1e-6 if overhead_s is None else 0.0,
                        overlap=acc.kind != "cpu")
    if acc.bandwidth is None:
        raise FootprintError(f"'{acc.id}' has no memory bandwidth figure: run `footprint calibrate` on it first")
    matrix = {k: v * eff["matrix"] for k in acc.tflops if (v := acc.peak(k)) is not None}
    return Ceilings(matrix=matrix, conv=dict(matrix), vector=acc.vector_peak * eff["vector"],
                    bandwidth=acc.bandwidth * eff["memory"],
                    overhead=overhead_s if overhead_s is not None else LAUNCH_OVERHEAD_S[acc.kind],
                    source="datasheet", efficiency=eff)


@dataclass(slots=True)
class OpTime:
    """One operator's predicted time (seconds) and what bounds it."""

    index: int
    op: str
    module: str
    phase: str
    kind: str
    dtype: str
    flops: int
    bytes: int
    compute_s: float
    memory_s: float
    overhead_s: float
    # kernels the operator runs besides its own, one after another (an NCHW convolution's
    # layout transposes, estimate/gpu_kernels.py): memory traffic that does not overlap its work
    kernels_s: float = 0.0

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.kernels_s + self.overhead_s

    @property
    def bound(self) -> str:
        if self.kind == "view":
            return "overhead" if self.overhead_s else "none"
        top = max(self.compute_s, self.memory_s + self.kernels_s)
        if self.overhead_s > top:
            return "overhead"
        return "compute" if self.compute_s >= self.memory_s + self.kernels_s else "memory"


@dataclass
class ModuleTime:
    module: str
    time_s: float
    compute_s: float
    memory_s: float
    overhead_s: float
    ops: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Prediction:
    """Roofline latency of one traced run on one accelerator."""

    kind = "predict"  # the envelope's kind of its saved file

    accelerator: Accelerator
    ceilings: Ceilings
    ops: list[OpTime]
    flops: int
    main_dtype: str
    notes: list[str] = field(default_factory=list)
    missing_dtypes: list[str] = field(default_factory=list)  # timed at the fp32 rate for want of a figure

    @cached_property
    def effective(self) -> list[float]:
        """Seconds each operator adds to the run, in trace order; they sum to ``time_s``.

        In line (CPUs): each operator's own time. Overlapped (GPUs): the two clocks of the
        module docstring; an operator adds how far it moves the later of the two, so a
        kernel hidden behind the host's dispatching adds only its dispatch, and dispatching
        hidden behind a long kernel adds nothing."""
        if not self.ceilings.overlap:
            return [o.time_s for o in self.ops]
        host = device = done = 0.0
        out = []
        for o in self.ops:
            host += o.overhead_s
            if o.kind != "view":
                device = max(device, host) + max(o.compute_s, o.memory_s) + o.kernels_s
            end = max(host, device)
            out.append(end - done)
            done = end
        return out

    @property
    def time_s(self) -> float:
        return sum(self.effective)

    @property
    def lower_bound_s(self) -> float:
        """The seed's bound: all FLOPs at the datasheet peak of the main dtype, nothing else."""
        peak = self.accelerator.peak(self.main_dtype) or self.accelerator.peak("fp32") or 0.0
        return self.flops / peak if peak else 0.0

    def time_by_bound(self) -> dict[str, float]:
        out = {"compute": 0.0, "memory": 0.0, "overhead": 0.0}
        for o, t in zip(self.ops, self.effective, strict=True):
            if o.kind != "view" or o.overhead_s:
                out[o.bound] += t
        return out

    @property
    def bound(self) -> str:
        """What most of the time is spent on: compute, memory or overhead."""
        t = self.time_by_bound()
        return max(t, key=lambda k: t[k])

    def by_module(self, depth: int | None = 1) -> list[ModuleTime]:
        acc: dict[str, ModuleTime] = {}
        for o, t in zip(self.ops, self.effective, strict=True):
            if o.kind == "view" and not o.overhead_s:
                continue
            for a in ancestors(o.module):
                if depth is not None and a and a.count(".") + 1 > depth:
                    continue
                m = acc.get(a)
                if m is None:
                    m = acc[a] = ModuleTime(a, 0.0, 0.0, 0.0, 0.0, 0)
                m.time_s += t
                m.compute_s += o.compute_s
                m.memory_s += o.memory_s + o.kernels_s
                m.overhead_s += o.overhead_s
                m.ops += 1
        return list(acc.values())

    def by_phase(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for o, t in zip(self.ops, self.effective, strict=True):
            out[o.phase] = out.get(o.phase, 0.0) + t
        return out

    def __repr__(self) -> str:
        return (f"Prediction(accelerator={self.accelerator.id!r}, time_s={self.time_s:.6g}, "
                f"lower_bound_s={self.lower_bound_s:.6g}, bound={self.bound!r}, ops={len(self.ops)})")

    def starts(self) -> list[float]:
        """When each operator starts (seconds), in trace order: the sum of the earlier
        operators' ``effective`` times."""
        out, t = [], 0.0
        for dt in self.effective:
            out.append(t)
            t += dt
        return out

    def roofline_points(self) -> list[dict[str, Any]]:
        """Operators as points of a roofline plot: arithmetic intensity (FLOP per byte) and
        the FLOP/s they reach in their predicted time. Calls of one operator with the same
        FLOPs, bytes, dtype and phase land on the same spot and are merged (``calls``, their
        summed ``time_s``, the first one's ``module``). Operators without FLOPs or bytes
        have no place on log axes and are left out."""
        merged: dict[tuple[str, str, str, str, int, int], dict[str, Any]] = {}
        for o in self.ops:
            if o.kind == "view" or o.flops <= 0 or o.bytes <= 0:
                continue
            key = (o.op, o.kind, o.phase, o.dtype, o.flops, o.bytes)
            pt = merged.get(key)
            if pt is None:
                merged[key] = {"op": o.op, "kind": o.kind, "phase": o.phase, "dtype": o.dtype, "module": o.module,
                               "calls": 1, "flops": o.flops, "bytes": o.bytes, "time_s": o.time_s,
                               "intensity": o.flops / o.bytes, "flop_per_s": o.flops / o.time_s, "bound": o.bound}
            else:
                pt["calls"] += 1
                pt["time_s"] += o.time_s
        return list(merged.values())

    def to_dict(self, ops: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "accelerator": self.accelerator.id, "time_s": self.time_s, "lower_bound_s": self.lower_bound_s,
            "bound": self.bound, "time_by_bound_s": self.time_by_bound(), "by_phase_s": self.by_phase(),
            "flops": self.flops, "main_dtype": self.main_dtype, "ceilings": self.ceilings.to_dict(),
            "notes": self.notes, "by_module": [m.to_dict() for m in self.by_module(1)],
        }
        if ops:
            d["ops"] = [{**{k: getattr(o, k) for k in OpTime.__slots__}, "time_s": o.time_s, "bound": o.bound}
                        for o in self.ops]
        return d


def _dtype_key(names: list[str]) -> str:
    for n in names:
        key = rate_key(n)
        if key is not None:
            return key
    return "fp32"


def estimate_latency(trace: Trace, acc: Accelerator, *, tf32: bool | None = None,
                     efficiency: Mapping[str, float] | None = None, overhead_s: float | None = None,
                     calibrated: bool = True, compute_dtype: str | None = None,
                     layout: str = "nchw") -> Prediction:
    """Roofline time of every operator of ``trace`` on ``acc`` (see the module docstring).

    ``compute_dtype`` ("fp16", "bf16", ...) times floating-point matrix work at that dtype's
    rate whatever dtype it was traced in (bytes stay as traced). ``layout``: the memory
    layout of the model's 4-d activations, "nchw" (PyTorch's default) or "nhwc"
    (``channels_last``). On GPUs the kernels' own traffic is added (:mod:`.gpu_kernels`): the
    transposes around tensor-core convolutions in NCHW, batch norm's second pass in
    training; and an optimizer's first-step state creation is left out of a step's time.
    """
    if compute_dtype is not None and compute_dtype not in RATE_KEYS:
        raise FootprintError(f"unknown dtype '{compute_dtype}': use fp32, tf32, fp16, bf16, fp8 or int8")
    layout = layout.lower().replace("channels_last", "nhwc").replace("channels-last", "nhwc")
    if layout not in LAYOUTS:
        raise FootprintError(f"unknown layout '{layout}': use {' or '.join(LAYOUTS)} (channels_last)")
    c = ceilings(acc, efficiency, overhead_s, calibrated)
    notes: list[str] = []
    missing: set[str] = set()
    ops: list[OpTime] = []
    flops_by_dtype: dict[str, int] = {}
    has_tf32 = "tf32" in c.matrix and acc.kind != "cpu"
    # PyTorch's default (cudnn.allow_tf32) sends fp32 convolutions to TF32 on NVIDIA GPUs; ROCm
    # keeps fp32 unless asked (tf32=True)
    conv_tf32 = tf32 if tf32 is not None else acc.vendor == "nvidia"
    gpu = acc.kind == "gpu"
    training = bool(trace.settings.get("training")) and bool(trace.settings.get("backward"))
    total_flops = 0
    for i, e in enumerate(trace.events):
        dkey = _dtype_key(e.out_dtypes)
        nbytes = e.bytes_read + e.bytes_written
        total_flops += e.flops
        if e.kind == "view":  # no kernel; an eager device still pays the dispatcher (calibrated)
            ops.append(OpTime(i, e.op, e.module, e.phase, e.kind, dkey, e.flops, nbytes, 0.0, 0.0, c.view_overhead))
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
                if key == "fp32" and has_tf32 and (conv_tf32 if is_conv else bool(tf32)):
                    key = "tf32"
                if gpu and acc.vendor == "nvidia":
                    transposes = layout_transpose_bytes(e, key, layout)
                rate = rates.get(key) or c.matrix.get(key)
                if key == "fp32" and e.out_shapes and (c.conv_by_k if is_conv else c.matmul_by_k):
                    outs = sum(math.prod(s) for s in e.out_shapes)
                    if outs and is_conv:
                        batch = e.out_shapes[0][0] if e.out_shapes[0] else 1
                        rate = c.conv_rate(e.macs / outs, max(1, batch))
                    elif outs:
                        rows = outs // max(e.out_shapes[0][-1], 1) if e.out_shapes[0] else 1
                        rate = c.matmul_rate(e.macs / outs, max(1, rows))
                        if rows <= MATVEC_ROWS:  # its matrix streams as a matvec's
                            bandwidth = min(bandwidth, c.matvec_rate(e.macs / outs, e.transposed, max(1, rows)))
                if rate is None:
                    missing.add(key)
                    rate = rates.get("fp32") or c.matrix["fp32"]
                vec = e.flops - e.matrix_flops  # a bias add or scaling inside the op
                compute = e.matrix_flops / rate + max(vec, 0) / c.vector
                flops_by_dtype[key] = flops_by_dtype.get(key, 0) + e.matrix_flops
            else:
                compute = e.flops / c.vector
        slowdown = 1.0
        if gpu:
            extra += batch_norm_pass_bytes(e, training)
            if acc.vendor == "nvidia":
                slowdown = batch_norm_layout_factor(e, training, layout)
        memory = (nbytes + extra) / bandwidth * slowdown
        ops.append(OpTime(i, e.op, e.module, e.phase, e.kind, dkey, e.flops, nbytes, compute, memory, c.overhead,
                          transposes / c.bandwidth))
    for key in sorted(missing):
        notes.append(f"{acc.name} has no published {key} rate: its fp32 rate is used for {key} matrix work")
    unknown = {e.op for e in trace.events if e.kind == "unknown"}
    if unknown:
        notes.append("operators without a FLOP formula are timed by their bytes only: " + ", ".join(sorted(unknown)))
    if compute_dtype:
        notes.append(f"matrix work timed at the {compute_dtype} rate; bytes as traced")
    main = max(flops_by_dtype, key=lambda k: flops_by_dtype[k]) if flops_by_dtype else "fp32"
    return Prediction(accelerator=acc, ceilings=c, ops=ops, flops=total_flops, main_dtype=main, notes=notes,
                      missing_dtypes=sorted(missing))
