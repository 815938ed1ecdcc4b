"""A roofline prediction: the rates it used, every operator's predicted time and what bounds
it, and the run's time from them (on a GPU, the host's and the device's two clocks)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ...analysis.summary import ancestors
from ...hardware.db import Accelerator


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
    # calibrated fp32 convolution rates against the reduction length K: {batch: [[K, FLOP/s], ...]}
    conv_by_k: dict[int, list[list[float]]] = field(default_factory=dict)
    # the same for depthwise convolutions (K = kernel area), a kernel of their own
    depthwise_by_k: dict[int, list[list[float]]] = field(default_factory=dict)
    # the same for convolutions of stride 2 (estimate/kernels/cpu.py; empty: conv_by_k)
    conv_strided_by_k: dict[int, list[list[float]]] = field(default_factory=dict)
    view_overhead: float = 0.0  # seconds per view operator (calibrated eager devices; 0: views are free)
    # calibrated matmul rates by dtype and rows M: {dtype: {M: [[K, FLOP/s], ...]}}
    matmul_by_rows: dict[str, dict[int, list[list[float]]]] = field(default_factory=dict)
    # bytes/s a one-row fp32 matmul streams its matrix at (calibrated CPUs; None: the bandwidth)
    matvec_bandwidth: float | None = None
    # few-row products' streaming rate by dtype, layout ("n", "t": the right operand transposed,
    # as nn.Linear's), rows and K: {dtype: {layout: {rows: [[K, bytes/s], ...]}}} (calibrated
    # CPUs; empty: matvec_bandwidth)
    matvec_by_k: dict[str, dict[str, dict[int, list[list[float]]]]] = field(default_factory=dict)
    # seconds a call of each kind of operator costs beyond ``overhead`` (calibrated CPUs:
    # estimate/kernels/cpu.py)
    extra_overhead: dict[str, float] = field(default_factory=dict)
    # window elements per second of a forward max and average pool (calibrated CPUs: "max",
    # "avg"; empty: the vector rate)
    pooling: dict[str, float] = field(default_factory=dict)
    # fp32 F.linear (weight (N, K), a bias) by rows and K: {rows: [[K, FLOP/s], ...]}; grouped
    # 3x3 convolutions by batch and K (calibrated CPUs: measure/cpu_tables.py; empty: the plain tables)
    linear_by_rows: dict[int, list[list[float]]] = field(default_factory=dict)
    conv_grouped_by_k: dict[int, list[list[float]]] = field(default_factory=dict)
    overlap: bool = False  # host and device clocks (calibrated GPUs and SoCs; module docstring)
    # per-kernel mechanisms (estimate/kernels/matrix.py, bandwidth.py) on a GPU priced from its
    # datasheet: "kernels"; "flat": the datasheet peaks times fixed efficiencies
    model: str = "flat"

    def matvec_rate(self, k: float, transposed: bool, rows: int = 1, key: str = "fp32") -> float:
        """Bytes/s a product of ``rows`` rows streams its matrix at: by dtype (fp32's table of
        the layout where ``key`` has none: a CPU streams bytes, whatever their type), layout,
        rows (in log rows between the calibrated ones) and K where calibrated, else the one
        calibrated one-row figure, else the bandwidth."""
        layout = "t" if transposed else "n"
        tables = (self.matvec_by_k.get(key, {}).get(layout) or self.matvec_by_k.get("fp32", {}).get(layout))
        if tables:
            return self._by_size(tables, k, rows)
        return self.matvec_bandwidth or self.bandwidth

    def conv_rate(self, k: float, batch: int, depthwise: bool = False, strided: bool = False,
                  grouped: bool = False) -> float:
        """Calibrated convolution rate at reduction length ``k``, interpolated in log batch
        (a depthwise convolution's, a grouped one's, a strided one's from its own table, where
        measured)."""
        table = self.depthwise_by_k if depthwise and self.depthwise_by_k else \
            self.conv_grouped_by_k if grouped and self.conv_grouped_by_k else \
            self.conv_strided_by_k if strided and self.conv_strided_by_k else self.conv_by_k
        return self._by_size(table, k, batch)

    def linear_rate(self, k: float, rows: int) -> float | None:
        """Calibrated fp32 ``F.linear`` rate (weight stored transposed, a bias) at reduction length
        ``k`` and ``rows`` rows, interpolated in log rows; None below the fewest rows measured
        (the few-row tables and the streaming rates hold there) or where none was measured."""
        if not self.linear_by_rows or rows < min(self.linear_by_rows):
            return None
        return self._by_size(self.linear_by_rows, k, rows)

    def matmul_rate(self, k: float, rows: int, key: str = "fp32") -> float | None:
        """Calibrated ``key`` matmul rate at reduction length ``k`` and ``rows`` output rows,
        interpolated in log rows between the tables (None: none measured for ``key``)."""
        tables = self.matmul_by_rows.get(key)
        return self._by_size(tables, k, rows) if tables else None

    def highest(self, key: str) -> float:
        """The highest ``key`` rate this prediction may use for matrix work (FLOP/s): no operator
        is timed faster, so a utilisation against it is at most 100%."""
        rates = [r for r in (self.matrix.get(key), self.conv.get(key)) if r]
        fp32 = key == "fp32"
        for tables in (self.matmul_by_rows.get(key, {}), self.conv_by_k if fp32 else {},
                       self.depthwise_by_k if fp32 else {}, self.conv_strided_by_k if fp32 else {},
                       self.linear_by_rows if fp32 else {}, self.conv_grouped_by_k if fp32 else {}):
            rates += [r for table in tables.values() for _, r in table]
        return max(rates, default=0.0)

    def highest_bandwidth(self) -> float:
        """The highest rate this prediction may read memory at (bytes/s): the copy's, a matvec's."""
        rates = [self.bandwidth, self.matvec_bandwidth or 0.0]
        rates += [r for by_layout in self.matvec_by_k.values() for tables in by_layout.values()
                  for table in tables.values() for _, r in table]
        return max(rates)

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
    def device_s(self) -> float:
        """The kernel's own time, without the call's overhead: the longer of its arithmetic and its
        memory traffic, and the kernels it runs besides its own."""
        return max(self.compute_s, self.memory_s) + self.kernels_s

    @property
    def time_s(self) -> float:
        return self.device_s + self.overhead_s

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
    # a training layout's whole step on one rank (estimate/layouts: micro-batches, pipeline,
    # collectives), where one was given; the operators above are one micro-batch's
    step: Any = None

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
                device = max(device, host) + o.device_s
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
        if self.step is not None:
            d["step"] = self.step.to_dict()
        if ops:
            d["ops"] = [{**{k: getattr(o, k) for k in OpTime.__slots__}, "time_s": o.time_s, "bound": o.bound}
                        for o in self.ops]
        return d
