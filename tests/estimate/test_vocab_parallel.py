"""The vocabulary split among tensor-parallel ranks (Megatron-LM's VocabParallelEmbedding and
vocab-parallel cross entropy, torchtitan's loss_parallel) by hand on a tiny Llama
(tests/configs/llama-tiny: hidden 128, vocab 1000, untied head, 2 layers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torch_footprint.analysis.memory import replay
from torch_footprint.errors import FootprintError
from torch_footprint.estimate.workload import trace_step
from torch_footprint.settings import Parallel, Training, Workload

LLAMA = Path(__file__).resolve().parents[1] / "configs" / "llama-tiny"
IDS = {"input_ids": "2,64:int64"}
ADAMW = Training(train=True, optimizer="adamw")


def _step(vocab_parallel: bool, config: Path = LLAMA):
    return trace_step(Workload(str(config), IDS), ADAMW, Parallel(gpus=2, tp=2, vocab_parallel=vocab_parallel))


def test_the_embedding_the_head_and_the_logits_hold_half_the_vocabulary():
    whole, _ = _step(False)
    split, notes = _step(True)
    # the embedding and the head, 1000 x 128 each, keep 500 rows each: 2 x 64,000 parameters fewer
    assert sum(q.numel for q in whole.params) - sum(q.numel for q in split.params) == 2 * 64_000
    # fp32 with AdamW: 128,000 fewer parameters x (4 weight + 4 gradient + 8 moments) = 2,048,000 B of states,
    # and the logits [2, 64, 1000] fp32 and their gradient at half the width: 2 x 256,000 B, both alive at the
    # peak (the backward's start)
    assert replay(whole).peak_bytes - replay(split).peak_bytes == 2_048_000 + 2 * 256_000
    assert any("vocabulary parallel" in n for n in notes)


def test_a_vocabulary_split_needs_tp_and_a_divisible_vocabulary(tmp_path: Path):
    with pytest.raises(FootprintError, match="add --tp 2 or more"):
        trace_step(Workload(str(LLAMA), IDS), ADAMW, Parallel(gpus=2, vocab_parallel=True))
    config = json.loads((LLAMA / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(dict(config, vocab_size=1001)))
    with pytest.raises(FootprintError, match="--tp 2 does not divide the vocabulary of 1001"):
        _step(True, tmp_path)


def test_sequence_parallel_and_megatron_reduce_each_modules_input_once():
    from torch_footprint import api

    base = dict(gpus=2, tp=2, train=True, optimizer="adamw", gpu=["h100-sxm"])

    def backward_calls(**kw):
        step = api.fit(str(LLAMA), IDS, **base, **kw).rows[0].step
        return next(c.calls for c in step.collectives if c.what == "column-parallel input gradients")

    # each layer's column-parallel linears: q, k, v (attention), gate, up (MLP). DTensor's ColwiseParallel on each
    # reduces each one's input gradient: 5 a layer x 2 layers; gathered once per module (sequence parallelism,
    # Korthikanti et al. 2022) or fused (Megatron-core's QKV and gate/up): attention and MLP, 2 x 2 layers
    assert backward_calls() == 10
    assert backward_calls(sequence_parallel=True) == 4
    assert backward_calls(framework="megatron") == 4


def test_async_tp_hides_the_tensor_parallel_collectives_behind_their_phase():
    from torch_footprint import api

    base = dict(gpus=2, tp=2, train=True, optimizer="adamw", gpu=["h100-sxm"])
    plain = api.fit(str(LLAMA), IDS, **base).rows[0].step
    overlapped = api.fit(str(LLAMA), IDS, async_tp=True, **base).rows[0].step
    assert plain is not None and overlapped is not None
    tp = {c.what: c.time_s for c in plain.collectives if c.what.startswith(("row-", "column-"))}
    fwd, bwd = plain.compute_s["forward"], plain.compute_s["backward"]
    # plain: both all-reduce groups on the critical path; async: only what outlasts the forward's and the
    # backward's compute (no data parallelism: the TP collectives are all that is exposed)
    assert plain.exposed_s == pytest.approx(sum(tp.values()))
    assert overlapped.exposed_s == pytest.approx(max(0.0, tp["row-parallel outputs"] - fwd)
                                                 + max(0.0, tp["column-parallel input gradients"] - bwd))
    # a layout without tensor parallelism has nothing to overlap: refused where it is traced
    with pytest.raises(FootprintError, match="--async-tp overlaps the tensor-parallel collectives"):
        api.fit(str(LLAMA), IDS, async_tp=True, **{**base, "tp": None})
    # the planner runs it on the layouts it searches with tensor parallelism, not on the others
    res = api.plan(str(LLAMA), gpu=["h100-sxm"], gpus=2, seq=64, global_batch=4, async_tp=True)
    assert {r.layout.tensor for r in res.rows} == {1, 2}
    assert all(r.layout.async_tp == (r.layout.tensor > 1) for r in res.rows)
