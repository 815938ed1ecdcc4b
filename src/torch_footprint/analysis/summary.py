"""Pure functions over a :class:`~torch_footprint.trace.records.Trace`: totals, modules, operators."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from ..trace.records import OpEvent, Trace


@dataclass
class Totals:
    """Sums over the events of some phases."""

    flops: int = 0
    macs: int = 0
    matrix_flops: int = 0
    vector_flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    ops: int = 0
    unknown: dict[str, int] = field(default_factory=dict)

    def add(self, e: OpEvent) -> None:
        self.flops += e.flops
        self.macs += e.macs
        # a matrix op's FLOPs beyond 2 x MACs (bias adds, softmax inside attention) are vector work
        self.matrix_flops += 2 * e.macs
        self.vector_flops += e.flops - 2 * e.macs
        self.bytes_read += e.bytes_read
        self.bytes_written += e.bytes_written
        if e.kind != "view":
            self.ops += 1
        if e.kind == "unknown":
            self.unknown[e.op] = self.unknown.get(e.op, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _events(trace: Trace, phases: Iterable[str] | None) -> Iterable[OpEvent]:
    if phases is None:
        return trace.events
    wanted = set(phases)
    return (e for e in trace.events if e.phase in wanted)


def totals(trace: Trace, phases: Iterable[str] | None = ("forward",)) -> Totals:
    """Totals over the given phases (None: all)."""
    t = Totals()
    for e in _events(trace, phases):
        t.add(e)
    return t


def unknown_ops(trace: Trace) -> dict[str, int]:
    """Operators that had no formula, with their call counts (all phases)."""
    return totals(trace, None).unknown


@lru_cache(maxsize=65536)
def ancestors(path: str) -> tuple[str, ...]:
    """``"a.b.c"`` -> ``("", "a", "a.b", "a.b.c")``."""
    if path == "":
        return ("",)
    parts = path.split(".")
    return ("",) + tuple(".".join(parts[: i + 1]) for i in range(len(parts)))


@dataclass
class ModuleRow:
    path: str
    type: str
    depth: int
    params: int
    param_bytes: int
    calls: int
    out_shapes: list[list[int]]
    flops: int
    macs: int
    matrix_flops: int
    vector_flops: int
    bytes_read: int
    bytes_written: int
    share: float  # of the total FLOPs of the phases summed

    @property
    def name(self) -> str:
        return self.path.rpartition(".")[2] if self.path else ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def by_module(trace: Trace, depth: int | None = None,
              phases: Iterable[str] | None = ("forward",)) -> list[ModuleRow]:
    """One row per module (pre-order, as ``named_modules``), each summing its subtree."""
    acc: dict[str, Totals] = {m.path: Totals() for m in trace.modules}
    for e in _events(trace, phases):
        for a in ancestors(e.module):
            t = acc.get(a)
            if t is not None:
                t.add(e)
    params: dict[str, list[int]] = {m.path: [0, 0] for m in trace.modules}
    for m in trace.modules:
        for a in ancestors(m.path):
            if a in params:
                params[a][0] += m.params
                params[a][1] += m.param_bytes
    total = acc[""].flops if "" in acc else 0
    rows = []
    for m in trace.modules:
        if depth is not None and m.depth > depth:
            continue
        t = acc[m.path]
        rows.append(ModuleRow(
            path=m.path, type=m.type, depth=m.depth, params=params[m.path][0], param_bytes=params[m.path][1],
            calls=m.calls, out_shapes=m.out_shapes, flops=t.flops, macs=t.macs, matrix_flops=t.matrix_flops,
            vector_flops=t.vector_flops, bytes_read=t.bytes_read, bytes_written=t.bytes_written,
            share=t.flops / total if total else 0.0,
        ))
    return rows


@dataclass
class OperatorRow:
    op: str
    kind: str
    calls: int
    flops: int
    macs: int
    bytes_read: int
    bytes_written: int
    share: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def by_operator(trace: Trace, phases: Iterable[str] | None = ("forward",)) -> list[OperatorRow]:
    """One row per aten operator (views left out), most FLOPs first, then most bytes."""
    acc: dict[str, OperatorRow] = {}
    grand = 0
    for e in _events(trace, phases):
        if e.kind == "view":
            continue
        row = acc.get(e.op)
        if row is None:
            row = acc[e.op] = OperatorRow(e.op, e.kind, 0, 0, 0, 0, 0, 0.0)
        row.calls += 1
        row.flops += e.flops
        row.macs += e.macs
        row.bytes_read += e.bytes_read
        row.bytes_written += e.bytes_written
        grand += e.flops
    rows = sorted(acc.values(), key=lambda r: (-r.flops, -(r.bytes_read + r.bytes_written), r.op))
    for r in rows:
        r.share = r.flops / grand if grand else 0.0
    return rows
