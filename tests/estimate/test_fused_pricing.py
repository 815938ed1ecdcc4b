"""Megatron-core's fused norms and activations priced as one kernel per call (kernels.fusion's
module_chains); expected counts and bytes worked by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from torch_footprint.estimate.kernels.fusion import module_chains
from torch_footprint.estimate.kernels.roofline import estimate_latency
from torch_footprint.estimate.workload import trace_step
from torch_footprint.hardware import get
from torch_footprint.settings import Parallel, Training, Workload
from torch_footprint.trace.records import OpEvent

TINY = str(Path(__file__).parents[1] / "configs" / "llama-tiny")


def _op(op: str, module: str, kind: str, read: int, written: int, phase: str = "forward") -> OpEvent:
    return OpEvent(op, module, phase, 1, 0, kind, read, written, [[1]], ["float32"])


def test_a_fused_modules_casts_and_elementwise_run_as_one_pass() -> None:
    # an RMSNorm's forward on N bf16 values: the upcast (reads 2N, writes 4N), the scaling (4N in,
    # 4N out), the cast back (4N in, 2N out): one kernel reading 2N and writing 2N. The same ops
    # in a module that is not fused keep their kernels; a matmul or a gather (an experts module's
    # token permutation) inside a fused module ends a chain.
    n = 1000
    events = [_op("aten._to_copy", "norm", "data", 2 * n, 4 * n), _op("aten.mul", "norm", "vector", 4 * n, 4 * n),
              _op("aten._to_copy", "norm", "data", 4 * n, 2 * n),
              _op("aten.mul", "other", "vector", 4 * n, 4 * n), _op("aten.add", "other", "vector", 4 * n, 4 * n),
              _op("aten.silu", "mlp", "vector", 4 * n, 4 * n), _op("aten.mm", "mlp", "matrix", 8 * n, 4 * n),
              _op("aten.mul", "mlp", "vector", 4 * n, 4 * n), _op("aten.index_select", "mlp", "data", 4 * n, 4 * n),
              _op("aten.mul", "mlp", "vector", 4 * n, 4 * n)]
    heads, folded = module_chains(events, {"norm", "mlp"})
    assert heads == {0: 4 * n} and folded == {1, 2}


def test_megatron_fused_norms_and_swiglu_are_one_kernel_a_call(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    # two layers: 5 RMSNorms (two a layer, the final one) and 2 SwiGLU activations, each one
    # kernel in the forward and one in the backward: 14 kernels
    w = Workload(TINY, "input_ids=1,64:int64", precision="bf16-mixed")
    t = Training(train=True, optimizer="adamw")
    fused, _ = trace_step(w, t, Parallel(framework="megatron"))
    assert len(fused.settings["fused_modules"]) == 7
    pred = estimate_latency(fused, get("h100-sxm"))
    note = next(n for n in pred.notes if n.startswith("fused kernels:"))
    assert note.startswith("fused kernels: 14 in place of")
    plain, _ = trace_step(w, t)  # torch's own modules: nothing fused
    assert "fused_modules" not in plain.settings
    assert not any(n.startswith("fused kernels:") for n in estimate_latency(plain, get("h100-sxm")).notes)
