"""Megatron-core's fused norms and activations priced as one kernel per call (kernels.fusion's
module_chains); expected counts and bytes worked by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

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
    # two layers: 5 RMSNorms (two a layer, the final one), 2 SwiGLU activations and 2 attention
    # modules' rotations (apply_rope_fusion), each one kernel in the forward and one in the
    # backward: 18 kernels
    w = Workload(TINY, "input_ids=1,64:int64", precision="bf16-mixed")
    t = Training(train=True, optimizer="adamw")
    fused, _ = trace_step(w, t, Parallel(framework="megatron"))
    assert len(fused.settings["fused_modules"]) == 9
    assert fused.settings["rope_modules"] == ["model.layers.0.self_attn", "model.layers.1.self_attn"]
    pred = estimate_latency(fused, get("h100-sxm"))
    note = next(n for n in pred.notes if n.startswith("fused kernels:"))
    assert note.startswith("fused kernels: 18 in place of")
    # gradients zeroed, not set to None (accumulated over micro-batches): each of the 21
    # parameters' gradient (9 a layer, the embedding, the final norm, the head) is added to by its
    # weight-gradient GEMM, not by an add of its own
    kept, _ = trace_step(w, Training(train=True, optimizer="adamw", grads="zero"), Parallel(framework="megatron"))
    assert len(kept.params) == 21
    assert "gradient accumulation fusion: 21 gradient adds in the weight-gradient GEMMs" in \
        estimate_latency(kept, get("h100-sxm")).notes
    plain, _ = trace_step(w, t)  # torch's own modules: nothing fused
    assert "fused_modules" not in plain.settings
    assert not any(n.startswith("fused kernels:") for n in estimate_latency(plain, get("h100-sxm")).notes)


def test_a_fused_ropes_rotation_is_the_kernels_own_indexing() -> None:
    # the Hugging Face rotation of one tensor of N bf16 values: q x cos (2N + cos in, 2N out),
    # the half negated (N in, N out), the concatenation (2N in, 2N out), x sin, the sum. In a
    # rotary module (a fused RoPE kernel) the concatenation joins the chain: one kernel; in any
    # other fused module a concatenation keeps its kernel and splits the chain in two.
    n, c = 1000, 10
    rope = [_op("aten.mul.Tensor", "attn", "vector", 2 * n + c, 2 * n), _op("aten.neg.default", "attn", "vector", n, n),
            _op("aten.cat.default", "attn", "data", 2 * n, 2 * n),
            _op("aten.mul.Tensor", "attn", "vector", 2 * n + c, 2 * n),
            _op("aten.add.Tensor", "attn", "vector", 4 * n, 2 * n)]
    heads, folded = module_chains(rope, {"attn"}, {"attn"})
    # the first read (2N + c), what each later op reads beyond its predecessor's write (the
    # concatenation's N: the half not negated; the product's c: the sine; the sum's 2N: the
    # first product), the last write (2N)
    assert heads == {0: (2 * n + c) + n + c + 2 * n + 2 * n} and folded == {1, 2, 3, 4}
    heads, folded = module_chains(rope, {"attn"})
    assert set(heads) == {0, 3} and folded == {1, 4}


def test_gradient_accumulation_fusion_folds_the_adds_into_a_parameters_gradient() -> None:
    # an add_ in the backward into a tensor of the shape of a parameter of the module it is
    # attributed to: autograd accumulating .grad, done by the weight-gradient GEMM under
    # Megatron-core. An add_ of another shape (an activation's), one in the forward, or one in a
    # module that owns no parameter of that shape is not.
    from torch_footprint.estimate.kernels.fusion import accumulated_gradients
    from torch_footprint.trace.records import TensorInfo

    def add_(module: str, shape: list[int], phase: str = "backward") -> OpEvent:
        return OpEvent("aten.add_.Tensor", module, phase, 1, 0, "vector", 8, 4, [shape], ["float32"])

    params = [TensorInfo("fc.weight", "fc", [4, 3], "float32", 12, 48),
              TensorInfo("fc.bias", "fc", [4], "float32", 4, 16),
              TensorInfo("norm.weight", "norm", [3], "float32", 3, 12)]
    events = [add_("fc", [4, 3]), add_("fc", [4]), add_("fc", [2, 4]), add_("fc", [4, 3], "forward"),
              add_("norm", [4]), add_("norm", [3])]
    assert accumulated_gradients(events, params) == {0, 1, 5}


def test_merged_linears_sum_their_shared_inputs_gradient_in_one_gemm() -> None:
    # q, k and v read the same input (width 3), as gate and up do: autograd sums their input's
    # gradients with adds attributed to one of them, which Megatron-core's linear_qkv gives summed
    # out of one GEMM. An add as wide as the output (4) or in another linear is not such a sum.
    from torch_footprint.estimate.kernels.fusion import input_gradient_sums
    from torch_footprint.trace.records import TensorInfo

    def add(module: str, shape: list[int], phase: str = "backward") -> OpEvent:
        return OpEvent("aten.add.Tensor", module, phase, 1, 0, "vector", 8, 4, [shape], ["float32"])

    params = [TensorInfo(f"{m}.weight", m, [4, 3], "float32", 12, 48) for m in ("q", "k", "o")]
    events = [add("k", [2, 3]), add("q", [2, 3]), add("q", [2, 4]), add("o", [2, 3]), add("q", [2, 3], "forward")]
    assert input_gradient_sums(events, params, {"q", "k"}) == {0, 1}


def test_megatron_merges_the_query_key_value_and_the_gate_up_linears() -> None:
    pytest.importorskip("transformers")
    # the tiny Llama's two layers: q, k, v (3 linears) and gate, up (2) each merged; each layer's
    # backward sums q's, k's and v's input gradients with 2 adds and gate's and up's with 1: 6
    from torch_footprint.estimate.layouts.fused import merged_linears

    w = Workload(TINY, "input_ids=1,64:int64", precision="bf16-mixed")
    trace, _ = trace_step(w, Training(train=True, optimizer="adamw"), Parallel(framework="megatron"))
    assert len(trace.settings["merged_linears"]) == 10
    assert "merged linears: 6 input-gradient sums in their one data-gradient GEMM" in \
        estimate_latency(trace, get("h100-sxm")).notes
    assert merged_linears(torch.nn.Linear(2, 2)) == []
