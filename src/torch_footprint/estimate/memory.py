"""Memory estimates: the traced peak plus fixed overheads, headroom, and batch scaling."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..analysis.memory import MemoryPeak
from ..errors import FootprintError

# Fixed costs outside the trace, per device, each configurable.
#  - CUDA context: driver, kernels and runtime state loaded by the first CUDA call; a few
#    hundred MiB depending on the driver, GPU and libraries (measure yours:
#    torch.cuda.mem_get_info before and after torch.cuda.init()).
#  - cuBLAS workspace: CUBLAS_WORKSPACE_CONFIG's default ":4096:8" is 8 x 4096 KiB.
#  - the caching allocator rounds every allocation up to a multiple of 512 bytes.
CUDA_OVERHEADS = {"cuda_context": 512 * 2**20, "cublas_workspace": 32 * 2**20}
ALLOCATOR_ROUNDING = {"cpu": 0, "cuda": 512}


@dataclass
class BatchFit:
    """peak(batch) = fixed + per_sample x batch, fitted from traces at two batch sizes."""

    batches: list[int]
    peaks: list[int]
    fixed: float
    per_sample: float
    affine: bool  # a third trace landed on the line (within 1%)
    max_batch: int | None = None
    max_batch_checked: bool = False

    def predict(self, batch: int) -> float:
        return self.fixed + self.per_sample * batch


@dataclass
class MemoryEstimate:
    """What ``footprint memory`` reports."""

    peak: MemoryPeak
    settings: dict[str, Any]
    overheads: dict[str, int] = field(default_factory=dict)
    utilisation: float = 0.8
    notes: list[str] = field(default_factory=list)
    batch_fit: BatchFit | None = None
    budget: int | None = None

    @property
    def total(self) -> int:
        """Peak of the tensors plus the fixed overheads."""
        return self.peak.peak_bytes + sum(self.overheads.values())

    @property
    def provision(self) -> int:
        """What to provision: the total divided by the utilisation (the seed's /0.8)."""
        return math.ceil(self.total / self.utilisation)

    def to_dict(self) -> dict[str, Any]:
        d = {"peak": self.peak.to_dict(), "settings": self.settings, "overheads": self.overheads,
             "total_bytes": self.total, "utilisation": self.utilisation, "provision_bytes": self.provision,
             "notes": self.notes, "budget": self.budget}
        if self.batch_fit is not None:
            d["batch_fit"] = self.batch_fit.__dict__
        return d


def overheads_for(device: str, n_allocations: int, rounding_bytes: int) -> dict[str, int]:
    if device == "cuda":
        out = dict(CUDA_OVERHEADS)
        out["allocator_rounding (upper bound)"] = n_allocations * (rounding_bytes - 1) if rounding_bytes else 0
        return out
    return {}


def parse_bytes(text: str) -> int:
    """``24GiB``, ``24GB``, ``512MiB``, ``1.5TiB`` or a plain number of bytes."""
    units = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20,
             "gib": 2**30, "tib": 2**40, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    raw = text.strip().lower().replace(" ", "")
    num = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(num):] or "b"
    if unit not in units or not num:
        raise FootprintError(f"cannot read the memory size '{text}': use e.g. 24GiB, 80GB or 512MiB")
    try:
        value = float(num)
    except ValueError:
        raise FootprintError(f"cannot read the memory size '{text}': use e.g. 24GiB, 80GB or 512MiB") from None
    if value < 0:
        raise FootprintError(f"a memory size cannot be negative, got '{text}'")
    return int(value * units[unit])


def fit_batches(batches: list[int], peaks: list[int]) -> BatchFit:
    (b1, b2), (p1, p2) = batches[:2], peaks[:2]
    per = (p2 - p1) / (b2 - b1)
    fixed = p1 - per * b1
    affine = True
    if len(batches) > 2:
        expected = fixed + per * batches[2]
        affine = abs(peaks[2] - expected) <= 0.01 * max(peaks[2], 1)
    return BatchFit(batches=batches, peaks=peaks, fixed=fixed, per_sample=per, affine=affine)
