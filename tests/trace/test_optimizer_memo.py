"""A recorded optimizer step replayed in a later trace: the trace is the one a run of the step
makes, and a step of other parameters is not taken for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.fixtures.reuse_check import assert_same
from torch_footprint.sources.prepare import prepare
from torch_footprint.trace import StepOptions, setups, trace_model
from torch_footprint.trace.optimizer_memo import MEMO

TINY = str(Path(__file__).parents[1] / "configs" / "llama-gqa-tiny")


def _traces(setup: str, optimizer: str, tokens: int = 16, freeze: str | None = None) -> tuple[Any, Any, Any]:
    """(full, the step recorded, the step replayed): three traces of one training step of the
    tiny Llama, the first with nothing replayed."""
    work = prepare(TINY, f"1,{tokens}:int64")
    model = work.model
    model.train()
    if freeze:
        model.get_parameter(freeze).requires_grad_(False)
    undo = lambda: None  # noqa: E731
    autocast = None
    if "checkpointing" in setup:
        _, undo = setups.enable_checkpointing(model)
    if "bf16-mixed" in setup:
        _, autocast = setups.precision("bf16-mixed")
    step = StepOptions(setups.optimizer(optimizer, cuda=True), autocast)
    try:
        with work.built.trace_context():
            full = trace_model(model, work.make_inputs(), reuse=False, backward=True, step=step)
            first = trace_model(model, work.make_inputs(), backward=True, step=step)
            second = trace_model(model, work.make_inputs(), backward=True, step=step)
    finally:
        undo()
    return full, first, second


@pytest.mark.parametrize(("setup", "optimizer"), [("fp32", "adamw"), ("bf16-mixed", "adamw-foreach"),
                                                  ("bf16-mixed+checkpointing", "adam-foreach"),
                                                  ("fp32", "momentum"), ("fp32", "adagrad")])
def test_replayed_step_is_the_step_a_run_records(setup: str, optimizer: str) -> None:
    MEMO._steps.clear()
    before = MEMO.replayed
    full, first, second = _traces(setup, optimizer)
    assert MEMO.replayed == before + 1  # the third trace's step replayed, the second's recorded
    optimizer_events = [e for e in second.events if e.phase == "optimizer"]
    assert len(optimizer_events) > 5 and second.tags["optimizer"]
    assert_same(first, full)
    assert_same(second, full)


def test_step_of_other_parameters_is_recorded_again() -> None:
    MEMO._steps.clear()
    _traces("fp32", "adamw-foreach")
    before = MEMO.replayed
    # another length of input: the same parameters, the step replayed
    full, _, second = _traces("fp32", "adamw-foreach", tokens=8)
    assert MEMO.replayed == before + 2
    assert_same(second, full)
    # one weight frozen: no gradient, no state for it; not the step recorded before
    full, first, second = _traces("fp32", "adamw-foreach", freeze="model.layers.0.mlp.up_proj.weight")
    assert MEMO.replayed == before + 3  # the frozen model's first step recorded afresh, its second replayed
    assert_same(first, full)
    assert_same(second, full)
    frozen = sum(1 for e in full.events if e.phase == "optimizer" for s in e.out_shapes)
    assert frozen < sum(1 for e in _traces("fp32", "adamw-foreach")[0].events
                        if e.phase == "optimizer" for s in e.out_shapes)


def test_optimizer_not_of_torch_optim_is_run_each_time() -> None:
    MEMO._steps.clear()
    before = MEMO.replayed

    def mine(params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)

    work = prepare(TINY, "1,8:int64")
    model = work.model
    model.train()
    step = StepOptions(mine)
    with work.built.trace_context():
        for _ in range(2):
            trace_model(model, work.make_inputs(), backward=True, step=step)
    assert MEMO.replayed == before
