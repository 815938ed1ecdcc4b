"""FSDP2 as measured on one H100, and the bytes an in-place foreach optimizer moves.

The measured figures are benchmarks/results/gpu-fsdp-step-h100.json (benchmarks/gpu_fsdp_step.py:
torch 2.11, one H100 SXM, fully_shard on every block then the root, MixedPrecisionPolicy(bf16,
fp32), AdamW foreach, the logits released before the backward); the byte counts are worked by
hand from torch/optim/adamw.py's ``_multi_tensor_adamw`` and the operators' schemas."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from torch_footprint.estimate.kernels.roofline import estimate_latency
from torch_footprint.estimate.layouts.sharding import fsdp_copy_bytes, step_peak
from torch_footprint.estimate.workload import trace_step
from torch_footprint.hardware import get
from torch_footprint.settings import Parallel, Training, Workload
from torch_footprint.trace.modules import ModuleStack
from torch_footprint.trace.recorder import Recorder

ROOT = Path(__file__).resolve().parents[2]
LLAMA3_8B = ROOT / "benchmarks" / "configs" / "meta-llama--Meta-Llama-3-8B" / "config.json"
GIB = 2**30


def _recorded(model: torch.nn.Module, run: Any) -> Recorder:
    """``run()`` under a recorder; the module stack's global hooks removed after it."""
    stack = ModuleStack(model)
    try:
        with Recorder(stack) as rec:
            run()
    finally:
        stack.remove()
    return rec


def test_an_in_place_foreach_op_writes_every_tensor_of_its_list():
    a, b = torch.zeros(100), torch.zeros(28, dtype=torch.float64)
    rec = _recorded(torch.nn.Identity(), lambda: torch._foreach_mul_([a, b], 2.0))
    (e,) = [e for e in rec.events if "_foreach_mul_" in e.op]
    assert (e.bytes_read, e.bytes_written) == (400 + 224, 400 + 224)  # returns nothing, writes both


def _adamw_foreach_bytes_per_param() -> float:
    model = torch.nn.Linear(64, 32)
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    model(torch.randn(4, 64)).sum().backward()
    opt.step()  # the states exist: the step below is a steady one
    model(torch.randn(4, 64)).sum().backward()
    rec = _recorded(model, opt.step)
    numel = sum(p.numel() for p in model.parameters())
    # the step counters (one fp32 scalar per parameter, on the host) are not the per-element passes
    return sum(e.bytes_read + e.bytes_written for e in rec.events
               if e.op.startswith("aten._foreach") and "Tensor" not in e.op) / numel


def test_adamw_foreach_moves_eighty_bytes_a_parameter_in_fp32():
    # mul_ (weight decay) 8, lerp_ (m) 12, mul_ (v) 8, addcmul_ (v) 12, sqrt 8, div_ 8, add_ (eps) 8,
    # addcdiv_ (the parameter, from m and the denominator) 16: 80 bytes of fp32 traffic
    assert _adamw_foreach_bytes_per_param() == pytest.approx(80.0)


@pytest.fixture(scope="module")
def llama_two_blocks(tmp_path_factory):
    cfg = json.loads(LLAMA3_8B.read_text())
    cfg["num_hidden_layers"] = 2
    folder = tmp_path_factory.mktemp("llama3-8b-2")
    (folder / "config.json").write_text(json.dumps(cfg))
    w = Workload(str(folder), "input_ids=1,8192:int64", precision="bf16-mixed", attention="sdpa")
    p = Parallel(gpus=1, strategy="fsdp", fsdp_param_dtype="bf16", fsdp_reduce_dtype="fp32")
    return trace_step(w, Training(train=True, optimizer="adamw-foreach"), p, cuda_sm=(9, 0))[0]


def test_fsdp2_on_one_rank_peaks_as_measured_on_an_h100(llama_two_blocks):
    # max_memory_allocated over a steady step, measured: 33.70 GiB (the root gathered into the
    # backward, the first block prefetched after the loss's backward); 4-6% below it before FSDP2's
    # buffers were counted on one rank
    peak = step_peak(llama_two_blocks, "fsdp", 1).peak_bytes
    assert peak / GIB == pytest.approx(33.70, rel=0.01)


def test_the_optimizer_steps_the_fp32_shards_and_fsdp_copies_its_parameters(llama_two_blocks):
    trace = llama_two_blocks
    numel = sum(p.numel for p in trace.params)
    pred = estimate_latency(trace, get("h100-sxm"))
    opt = sum(o.bytes for o in pred.ops if o.phase == "optimizer" and o.op.startswith("aten._foreach")
              and "Tensor" not in o.op)
    assert opt / numel == pytest.approx(80.0, rel=0.01)  # traced in bf16 (40 bytes), stepped in fp32
    # one rank, bf16 gathered from fp32 shards, fp32 reduce: each gather 4 + 2 + 2 x 2 = 10 bytes,
    # twice for a block (forward, backward), once for the root; each gradient's cast 2 + 4
    blocks = sum(p.numel for p in trace.params if ".layers." in p.module)
    expected = blocks * 2 * 10 + (numel - blocks) * 10 + numel * 6
    assert fsdp_copy_bytes(trace, "fsdp", 1, "bf16", "fp32") == pytest.approx(expected, rel=1e-6)


def test_each_pipeline_rank_copies_its_own_stages_parameters(llama_two_blocks):
    # FSDP2 under two pipeline ranks, one block each, two micro-batches: each rank's copy kernels
    # move its own parameters' bytes, once a step (a pipeline stage gathers once and reduce-scatters
    # after the last micro-batch, as torch.distributed.pipelining runs FSDP2). Rank 0 holds
    # block 0 and the embedding (outside every unit), rank 1 block 1, the final norm and the head;
    # per parameter as above: a block's 2 x 10 + 6, the root's 10 + 6.
    from torch_footprint.estimate.kernels import constants
    from torch_footprint.estimate.kernels.bandwidth import transfer_s
    from torch_footprint.estimate.layouts.schedule import layout_step

    trace = llama_two_blocks
    acc = get("h100-sxm")

    def numel(*words: str) -> int:
        return sum(p.numel for p in trace.params if any(w in p.module for w in words))

    ranks = [numel(".layers.0.") * 26 + numel("embed_tokens") * 16,
             numel(".layers.1.") * 26 + numel("model.norm", "lm_head") * 16]
    p = Parallel(gpus=2, pp=2, grad_accum=2, strategy="fsdp", fsdp_param_dtype="bf16", fsdp_reduce_dtype="fp32")
    step = layout_step(trace, acc, estimate_latency(trace, acc), p, None)
    assert step is not None
    assert step.compute_s["FSDP copies"] == pytest.approx(transfer_s(acc, max(ranks), constants.current()),
                                                          rel=1e-6)
    # over two data-parallel ranks: the gathers and reduce-scatters of eight micro-batches are those of one
    four = dataclasses.replace(p, gpus=4)
    pred = estimate_latency(trace, acc)

    def fsdp_calls(accum: int) -> list[tuple[str, int, int]]:
        step = layout_step(trace, acc, pred, dataclasses.replace(four, grad_accum=accum), None)
        assert step is not None
        return [(c.op, c.calls, c.nbytes) for c in step.collectives if c.op in ("all-gather", "reduce-scatter")]

    assert fsdp_calls(8) == fsdp_calls(1) != []
