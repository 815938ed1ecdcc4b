"""The trace: one plain, serialisable record per run (the single source of truth).

Every FLOP, MAC and byte that any later stage reports comes from these records.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Kinds of operator cost: "matrix" (matmul, convolution, attention: tensor-core work),
# "vector" (elementwise, reductions, norms, softmax), "data" (copies, gathers, creation:
# no arithmetic, bytes only), "view" (metadata only: no kernel, no bytes), "unknown"
# (no formula: FLOPs not counted, listed in every report).
KINDS = ("matrix", "vector", "data", "view", "unknown")


@dataclass(slots=True)
class OpEvent:
    """One aten operator call."""

    op: str
    module: str
    phase: str
    flops: int
    macs: int
    kind: str
    bytes_read: int
    bytes_written: int
    out_shapes: list[list[int]]
    out_dtypes: list[str]
    # storages this op allocated: [uid, nbytes]
    allocs: list[list[int]] = field(default_factory=list)
    # bytes the kernel allocates and frees inside itself (copies of operands it cannot use as they are)
    scratch: int = 0
    # the model's parameters this op reads: indices into ``Trace.params``
    weights: list[int] = field(default_factory=list)
    # a matmul whose right operand is stored transposed (column-major), as nn.Linear passes its
    # weight: a one-row product then reads it a row at a time, at a rate of its own on CPUs
    transposed: bool = False
    # a matrix op's problem for kernel-time models (trace/formulas.py's Cost.problem): e.g.
    # ["gemm", batch, m, n, k]; empty for other ops
    problem: list[Any] = field(default_factory=list)
    # the loop of PyTorch's CUDA elementwise kernels this op would run (trace.recorder.elementwise_loop):
    # "" vectorized (or not an elementwise op), "strided" (an operand not in the output's dense layout,
    # broadcast included), "cast" (operands of another dtype than the output's), or "strided cast"
    loop: str = ""

    @property
    def matrix_flops(self) -> int:
        """2 x MACs: the tensor-core part (the rest of ``flops`` is vector work)."""
        return 2 * self.macs


@dataclass(slots=True)
class MemFree:
    """A storage freed after event ``after`` (index into ``Trace.events``; -1: before any)."""

    after: int
    storage: int
    nbytes: int


@dataclass(slots=True)
class ModuleInfo:
    """One module of the model, in ``named_modules`` order (shared modules listed once)."""

    path: str
    type: str
    depth: int
    params: int = 0  # parameters owned directly (not by children), each counted once
    param_bytes: int = 0
    calls: int = 0
    out_shapes: list[list[int]] = field(default_factory=list)


@dataclass(slots=True)
class TensorInfo:
    """A parameter or buffer of the model."""

    name: str
    module: str
    shape: list[int]
    dtype: str
    numel: int
    nbytes: int
    trainable: bool = False


@dataclass
class Trace:
    """Everything recorded in one run of a model."""

    model: str
    inputs: list[dict[str, Any]]
    events: list[OpEvent] = field(default_factory=list)
    frees: list[MemFree] = field(default_factory=list)
    modules: list[ModuleInfo] = field(default_factory=list)
    params: list[TensorInfo] = field(default_factory=list)
    buffers: list[TensorInfo] = field(default_factory=list)
    # storages alive before the first event:
    # [uid, nbytes, "weights" | "buffers" | "input" | "gradients" | "optimizer state"]
    preexisting: list[list[Any]] = field(default_factory=list)
    # storage uids by role, read at the end of the run: "output", "gradients", "optimizer"
    tags: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "torch-footprint-trace/1",
            "model": self.model,
            "inputs": self.inputs,
            "settings": self.settings,
            "notes": self.notes,
            "modules": [asdict(m) for m in self.modules],
            "params": [asdict(p) for p in self.params],
            "buffers": [asdict(b) for b in self.buffers],
            "preexisting": self.preexisting,
            "tags": self.tags,
            "events": [asdict(e) for e in self.events],
            "frees": [asdict(f) for f in self.frees],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trace:
        if d.get("format") != "torch-footprint-trace/1":
            raise ValueError("not a torch-footprint trace (missing format 'torch-footprint-trace/1')")
        return cls(
            model=d["model"],
            inputs=d["inputs"],
            settings=d.get("settings", {}),
            notes=d.get("notes", []),
            modules=[ModuleInfo(**m) for m in d["modules"]],
            params=[TensorInfo(**p) for p in d["params"]],
            buffers=[TensorInfo(**b) for b in d["buffers"]],
            preexisting=d.get("preexisting", []),
            tags=d.get("tags", {}),
            events=[OpEvent(**e) for e in d["events"]],
            frees=[MemFree(**f) for f in d.get("frees", [])],
        )
