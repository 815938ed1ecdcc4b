"""Memory verdicts as the frameworks run the step, by hand on a tiny Llama (tests/configs/llama-tiny:
hidden 128, 4 heads of 32 with 2 key/value heads, MLP 344, vocab 1000, 2 layers; 619,136 parameters):
FSDP2's mixed-precision policy (the step in param_dtype, the shards in fp32) and what a CUDA process
holds beyond its tensors (the context, cuBLAS's workspaces, NCCL's buffers), shown apart."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from torch_footprint import api
from torch_footprint.analysis.memory import replay
from torch_footprint.estimate.allocator import NCCL_PER_COMMUNICATOR, communicators
from torch_footprint.estimate.kernels.roofline import master_scale
from torch_footprint.estimate.layouts.sharding import fsdp_moments, rank_peak
from torch_footprint.estimate.workload import trace_step
from torch_footprint.settings import Parallel, Training, Workload

LLAMA = Path(__file__).resolve().parents[1] / "configs" / "llama-tiny"
IDS = {"input_ids": "2,64:int64"}
PARAMS = 619_136
# per layer: q, o 128x128; k, v 128x64; gate, up, down 128x344; two norms of 128
LAYER = 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 344 + 2 * 128


def _trace(param_dtype: str | None, reduce_dtype: str | None = None):
    p = Parallel(gpus=4, strategy="fsdp", fsdp_param_dtype=param_dtype, fsdp_reduce_dtype=reduce_dtype)
    return trace_step(Workload(str(LLAMA), IDS, precision="bf16-mixed"), Training(train=True, optimizer="adamw"), p)


def test_fsdp_param_dtype_runs_the_step_in_bf16_and_keeps_fp32_shards():
    mixed, _ = _trace(None)
    low, notes = _trace("bf16", "fp32")
    assert {p.dtype for p in low.params} == {"bfloat16"} and master_scale(low) == 2.0 and master_scale(mixed) == 1.0
    assert any("gathered and computed in bfloat16" in n for n in notes)
    a, b = rank_peak(mixed, "fsdp", 4), rank_peak(low, "fsdp", 4)
    # each of 4 ranks keeps a quarter of the fp32 parameters and gradients either way: 619,136 x 4 B / 4
    assert a.persistent["weights"] == b.persistent["weights"] == PARAMS
    assert a.persistent["gradients"] == b.persistent["gradients"] == PARAMS
    # Adam's two fp32 moments, a quarter each (and a 4-byte step count per tensor, halved in the bf16 trace)
    assert b.persistent["optimizer state"] == pytest.approx(2 * PARAMS, abs=4 * 30)
    # the forward's saved tensors in bf16 rather than autocast's fp32 residual stream and norms: fewer
    # bytes in the decoder layers (both peaks are in the backward's first operators, with every layer's
    # saved tensors alive; the loss's fp32 log-softmax is the same in both and left out)
    def layers(p):
        return sum(v for k, v in p.activations_by_module.items() if k.startswith("model.layers."))
    assert 0 < layers(b) < layers(a)


def test_fsdp_gathers_in_param_dtype_and_reduces_in_reduce_dtype():
    low, _ = _trace("bf16", "fp32")
    moments = fsdp_moments(low, "fsdp", 4)
    gathered = {m.hold for m in moments if m.what == "gathered parameters" and m.hold > 0}
    # a layer gathered in bf16: 181,504 x 2 B; the root (embeddings, head, final norm) 256,128 x 2 B
    assert 2 * LAYER in gathered and 2 * (PARAMS - 2 * LAYER) in gathered
    first = next(m for m in moments if m.what == "reduce-scatter input")
    # the last layer's bf16 gradients cast to fp32 for the reduce-scatter: 181,504 x 4 B, each gradient
    # left as a quarter of its fp32 size
    assert first.hold == 4 * LAYER and sum(first.resize.values()) == LAYER
    same, _ = _trace("bf16")  # reduce_dtype defaults to param_dtype (FSDP2): bf16 on the wire
    assert next(m for m in fsdp_moments(same, "fsdp", 4) if m.what == "reduce-scatter input").hold == 2 * LAYER


def test_communicators_per_layout():
    assert communicators(8) == 1  # one data-parallel group
    assert communicators(8, replicas=2) == 2  # HSDP: its shard groups and its replicate groups
    assert communicators(4, tp=2, pp=2) == 3
    assert communicators(1) == 0


def test_fit_shows_what_cuda_holds_beyond_the_tensors():
    res = api.fit(str(LLAMA), IDS, train=True, optimizer="adamw", gpus=8, strategy="fsdp", dp_shard=4,
                  gpu=["h100-sxm"])
    [row] = res.rows
    # HSDP: a shard group of 4 and a replicate group of 2, an NCCL communicator each, 2 x 4 MiB x 16 channels
    assert row.extras["nccl_buffers (estimate)"] == 2 * 128 * 2**20 == 2 * NCCL_PER_COMMUNICATOR
    # CUDA's context (512 MiB) and two 32 MiB cuBLAS workspaces on an sm90 GPU (forward and backward thread)
    assert row.extras["cuda_context"] == 512 * 2**20 and row.extras["cublas_workspace"] == 32 * 2**20
    assert row.extras["cublas_workspace (backward thread)"] == 32 * 2**20
    assert res.peak is not None
    # on an NVIDIA GPU the verdict is the peak plus these against the whole memory; provision adds headroom
    assert row.need == res.peak.peak_bytes + sum(row.extras.values())
    assert row.provision == math.ceil(row.need / 0.8) and row.fits == (row.need <= row.capacity)
    d = res.to_dict()
    assert d["rows"][0]["extras_bytes"] == row.extras
    assert "NCCL_BUFFSIZE" in d["extras_sources"]["nccl_buffers (estimate)"]


def _dropout_llama(tmp_path: Path) -> str:
    cfg = json.loads((LLAMA / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "attention_dropout": 0.1}))
    return str(tmp_path)


def test_a_cuda_target_runs_attention_with_dropout_fused(tmp_path: Path):
    model = _dropout_llama(tmp_path)
    w, t = Workload(model, IDS), Training(train=True)
    cpu, _ = trace_step(w, t)
    cuda, _ = trace_step(w, t, cuda_sm=(9, 0))
    # the CPU runs dropout through the math path: 2 x 4 heads x 64 x 64 score matrices, kept for the backward
    scores = [[2, 4, 64, 64]]
    assert any(e.out_shapes == scores for e in cpu.events if e.phase == "forward")
    assert [c["cpu_path"] for c in cpu.settings["attention"]] == ["math"]
    # CUDA's flash attention (sdp_utils: no mask, head size 32, sm90; fp32 goes to memory-efficient,
    # also fused) keeps the output and its log-sum-exp: no score matrix, no dropout mask
    assert not any(e.out_shapes == scores for e in cuda.events if e.phase == "forward")
    assert [c["cpu_path"] for c in cuda.settings["attention"]] == ["flash"]
    less = replay(cpu).breakdown["activations"] - replay(cuda).breakdown["activations"]
    # per layer at least the fp32 softmax output and the dropped-out copy: 2 x 131,072 B, 2 layers
    assert less >= 2 * 2 * 2 * 4 * 64 * 64 * 4


def test_fit_on_nvidia_gpus_traces_cuda_attention(tmp_path: Path):
    res = api.fit(_dropout_llama(tmp_path), IDS, train=True, gpu=["h100-sxm", "a100-sxm-80gb"])
    assert [c["cpu_path"] for c in res.settings["attention"]] == ["flash"]
    assert not any("priced as traced" in n for n in res.notes)
