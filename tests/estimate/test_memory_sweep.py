"""The memory replay's pass as array operations (analysis/sweep.py) gives what its event-by-event
loop gives: every field of the peak (its bytes, where, the breakdown, the activations by module,
the timeline and the highs), on training steps replayed as one rank of every sharding (scaled
states, FSDP's gathered units and reduce-scatter resizes, DDP's buckets), first and steady steps."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from torch_footprint.analysis import memory
from torch_footprint.estimate.layouts.sharding import rank_peak
from torch_footprint.sources import prepare
from torch_footprint.trace import StepOptions, setups, trace_model

LLAMA = Path(__file__).resolve().parents[1] / "configs" / "llama-gqa-tiny"


def _trace(ac: str | None, mixed: bool):
    work = prepare(str(LLAMA), "2,16:int64")
    work.model.train()
    undo = lambda: None  # noqa: E731
    if ac is not None:
        _, undo = setups.enable_checkpointing(work.model, selective=ac == "selective")
    step = StepOptions(setups.optimizer("adamw"), setups.precision("bf16-mixed" if mixed else "fp32")[1])
    try:
        with work.built.trace_context():
            return trace_model(work.model, work.make_inputs(), backward=True, step=step)
    finally:
        undo()


@pytest.mark.parametrize(("ac", "mixed"), [(None, False), ("full", True), ("selective", True)])
def test_the_sweep_is_the_loop(monkeypatch: pytest.MonkeyPatch, ac: str | None, mixed: bool) -> None:
    trace = _trace(ac, mixed)
    cases = [(s, n, steady, bucket) for s in ("ddp", "zero1", "zero2", "fsdp") for n in (1, 4)
             for steady in (False, True) for bucket in (False, True)]
    for strategy, n, steady, bucket in cases:
        monkeypatch.setattr(memory, "SWEEP_FROM", 0)
        fast = rank_peak(trace, strategy, n, bucket, steady=steady)
        monkeypatch.setattr(memory, "SWEEP_FROM", 10**12)
        loop = rank_peak(trace, strategy, n, bucket, steady=steady)
        assert asdict(fast) == asdict(loop), (strategy, n, steady, bucket)
    monkeypatch.setattr(memory, "SWEEP_FROM", 0)
    fast = memory.replay(trace, keep_timeline=False, extra=12345)
    monkeypatch.setattr(memory, "SWEEP_FROM", 10**12)
    assert asdict(fast) == asdict(memory.replay(trace, keep_timeline=False, extra=12345))
