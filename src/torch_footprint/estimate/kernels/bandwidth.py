"""Memory traffic on a GPU: the share of the datasheet bandwidth a kernel reaches.

* **The memory's kind** (:func:`bandwidth_share`): streaming kernels reach 85-97% of the
  datasheet bandwidth of HBM and GDDR parts alike, less on some (BabelStream-style copy,
  read, scale and triad kernels in ``published/kernels.toml``: V100 96% read and 90% triad,
  A100 80 GB 87%, H100 PCIe 92-97%, GDDR6 A40 98%, T4 75%); the share is fitted by the
  memory's kind (HBM, GDDR, other), each fit leaving the GPU under test out.
* **A kernel's least time** (``kernel_floor_s`` of :mod:`.constants`): a copy of a few
  hundred kilobytes takes a few microseconds whatever the bandwidth (CCCL's triad on an RTX
  5090: 196,608 bytes at 48 GB/s).
"""

from __future__ import annotations

from ...hardware.db import Accelerator
from .constants import KernelConstants


def memory_kind(acc: Accelerator) -> str:
    t = acc.memory_type.upper()
    return "hbm" if t.startswith("HBM") else "gddr" if t.startswith("GDDR") else "other"


def bandwidth_share(acc: Accelerator, c: KernelConstants) -> float:
    """The share of ``acc``'s datasheet bandwidth a streaming kernel reaches."""
    return {"hbm": c.hbm, "gddr": c.gddr}.get(memory_kind(acc), c.other_memory)


def transfer_s(acc: Accelerator, nbytes: float, c: KernelConstants) -> float:
    """Seconds a streaming kernel takes to move ``nbytes`` (reads and writes) on ``acc``."""
    bw = acc.bandwidth or 0.0
    return nbytes / (bw * bandwidth_share(acc, c)) if bw else 0.0


def floored_s(t: float, c: KernelConstants) -> float:
    """A kernel's device time given its work's ``t`` seconds: the launch and the ramp of its
    first wave (``kernel_floor_s``) come on top (fitted that way: taking the larger of the two
    instead fits the published GEMMs worse, leave-one-GPU-out median 24% against 11%)."""
    return t + c.kernel_floor_s
