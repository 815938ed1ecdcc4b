"""The result of ``footprint profile``: parameters, FLOPs and MACs, by module and operator,
all read from one trace (which it keeps, and saves, so a profile re-renders without the model)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import FootprintError
from ..trace import Trace
from .summary import ModuleRow, OperatorRow, Totals, by_module, by_operator, totals, unknown_ops


@dataclass(repr=False)
class Profile:
    """What ``footprint profile`` reports: parameters, FLOPs and MACs, by module and operator."""

    kind = "profile"  # the envelope's kind of its saved file

    trace: Trace
    notes: list[str] = field(default_factory=list)

    # ----------------------------------------------------------------- parameters
    @property
    def params(self) -> int:
        return sum(p.numel for p in self.trace.params)

    @property
    def trainable_params(self) -> int:
        return sum(p.numel for p in self.trace.params if p.trainable)

    @property
    def param_bytes(self) -> int:
        return sum(p.nbytes for p in self.trace.params)

    @property
    def buffer_bytes(self) -> int:
        return sum(b.nbytes for b in self.trace.buffers)

    @property
    def params_by_dtype(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.trace.params:
            out[p.dtype] = out.get(p.dtype, 0) + p.numel
        return out

    # ----------------------------------------------------------------- compute
    @property
    def forward(self) -> Totals:
        return totals(self.trace, ("forward",))

    @property
    def backward(self) -> Totals:
        return totals(self.trace, ("backward",))

    @property
    def flops(self) -> int:
        """Forward FLOPs (matrix + vector)."""
        return self.forward.flops

    @property
    def macs(self) -> int:
        """Forward MACs of the matrix ops (the figure comparable to thop, fvcore, torchvision)."""
        return self.forward.macs

    @property
    def matrix_flops(self) -> int:
        return self.forward.matrix_flops

    @property
    def vector_flops(self) -> int:
        return self.forward.vector_flops

    @property
    def backward_flops(self) -> int | None:
        """Backward FLOPs, or None when the trace has no backward pass."""
        return self.backward.flops if self.trace.settings.get("backward") else None

    @property
    def unknown_ops(self) -> dict[str, int]:
        return unknown_ops(self.trace)

    def by_module(self, depth: int | None = None, phases: Sequence[str] | None = ("forward",)) -> list[ModuleRow]:
        return by_module(self.trace, depth, phases)

    def by_operator(self, phases: Sequence[str] | None = ("forward",)) -> list[OperatorRow]:
        return by_operator(self.trace, phases)

    def to_dict(self, depth: int | None = None, include_trace: bool = False) -> dict[str, Any]:
        fwd = self.forward
        d: dict[str, Any] = {
            "model": self.trace.model,
            "inputs": self.trace.inputs,
            "settings": self.trace.settings,
            "notes": self.notes,
            "conventions": {"mac": "1 MAC = 2 FLOPs", "macs": "matrix ops only (matmul, convolution, attention)",
                            "flops": "matrix + vector FLOPs"},
            "params": self.params,
            "trainable_params": self.trainable_params,
            "param_bytes": self.param_bytes,
            "buffer_bytes": self.buffer_bytes,
            "params_by_dtype": self.params_by_dtype,
            "forward": fwd.to_dict(),
            "unknown_ops": self.unknown_ops,
            "by_module": [r.to_dict() for r in self.by_module(depth)],
            "by_operator": [r.to_dict() for r in self.by_operator()],
        }
        if self.trace.settings.get("backward"):
            d["backward"] = self.backward.to_dict()
        if include_trace:
            d["trace"] = self.trace.to_dict()
        return d

    def __repr__(self) -> str:  # the trace would fill a screen: the headline figures instead
        back = f", backward_flops={self.backward_flops}" if self.trace.settings.get("backward") else ""
        return (f"Profile(model={self.trace.model!r}, params={self.params}, flops={self.flops}, "
                f"macs={self.macs}{back}, trace.events=<{len(self.trace.events)}>)")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Profile:
        """A profile saved with ``to_dict(include_trace=True)`` (``footprint profile --json``)."""
        if not isinstance(d, dict):
            raise FootprintError("this JSON file is not a profile: save one with footprint profile --json")
        if "trace" not in d:
            raise FootprintError("this JSON file holds no trace; save it with footprint profile --json")
        try:
            return cls(Trace.from_dict(d["trace"]), list(d.get("notes", [])))
        except (KeyError, TypeError, ValueError) as e:
            raise FootprintError(f"malformed trace in JSON file: {e}") from e
