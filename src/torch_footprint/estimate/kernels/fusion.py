"""What torch.compile (TorchInductor) changes in the kernels an eager trace records.

* **Fused chains** (:func:`fused_chains`): Inductor generates one kernel for a run of
  elementwise, normalisation and reduction operators between two library calls (cuBLAS and
  cuDNN matmuls and convolutions stay library calls unless max-autotune picks a Triton
  template): "TorchInductor ... fuses pointwise, reduction and scatter operations" into
  generated Triton kernels (the PyTorch 2 paper, Ansel et al., ASPLOS 2024, section 5). A
  chain reads its inputs once at entry and writes its result once at exit: its first
  operator's reads, each later operator's reads beyond what the one before it wrote (a
  second operand, a residual), and its last operator's writes. One kernel, so one launch
  and one least time.
* **Channels-last convolutions**: Inductor's layout optimisation puts the activations of a
  model with convolutions in channels-last (``torch._inductor.config.layout_optimization``,
  on by default except on ROCm), so no NCHW<->NHWC transposes run around its tensor-core
  convolutions (:func:`compiled_layout`).

Checked against the compiled and eager rows of ``benchmarks/published/models.toml`` (timm's
inference tables, batch 1024, AMP fp16, on an RTX 4090 and an RTX 5090: the same models both
ways; ``benchmarks/validate_models.py`` prices the compiled rows through this pass).
A training step's saved activations are taken as Inductor's partitioner leaves them: cheap
pointwise results recomputed in the backward rather than written, so the forward's chains
fuse as they would in inference.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...hardware.db import Accelerator
from ...trace.records import OpEvent

FUSIBLE_KINDS = ("vector",)  # elementwise, normalisation, reductions, pooling (trace/formulas.py)
PASS_THROUGH_KINDS = ("view",)  # no kernel: a chain runs on through a reshape or a transpose


def fused_chains(events: Sequence[OpEvent]) -> tuple[dict[int, int], set[int]]:
    """The chains Inductor fuses: the bytes each chain's first operator moves for the whole
    chain (event index -> bytes), and the indices of the operators folded into it (no kernel
    of their own)."""
    heads: dict[int, int] = {}
    folded: set[int] = set()
    chain: list[int] = []

    def close() -> None:
        if len(chain) > 1:
            first, last = events[chain[0]], events[chain[-1]]
            nbytes = first.bytes_read + last.bytes_written
            for before, after in zip(chain, chain[1:], strict=False):
                nbytes += max(0, events[after].bytes_read - events[before].bytes_written)
            heads[chain[0]] = nbytes
            folded.update(chain[1:])
        chain.clear()

    for i, e in enumerate(events):
        empty = e.kind == "data" and not (e.bytes_read or e.bytes_written)  # an allocation: no kernel
        if e.kind in PASS_THROUGH_KINDS or empty:
            continue
        if e.kind in FUSIBLE_KINDS and (not chain or events[chain[-1]].phase == e.phase):
            chain.append(i)
            continue
        close()
        if e.kind in FUSIBLE_KINDS:
            chain.append(i)
    close()
    return heads, folded


def compiled_layout(acc: Accelerator, layout: str) -> str:
    """The activations' layout a compiled model's convolutions run in: channels-last on an
    NVIDIA GPU (Inductor's layout optimisation), as given elsewhere."""
    return "nhwc" if acc.vendor == "nvidia" and acc.kind == "gpu" else layout
