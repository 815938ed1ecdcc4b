"""Checkpointing one block in N (torchtitan's ``selective_ac_option = N``): the blocks it
recomputes, its cost by hand against no checkpointing and full checkpointing, repeated blocks
that differ only in their switch kept apart by the replay, and its bad input."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from reuse_check import assert_same
from torch import nn

from torch_footprint.errors import FootprintError
from torch_footprint.estimate.workload import trace_step
from torch_footprint.settings import Training, Workload
from torch_footprint.trace import reuse, setups

CONFIGS = Path(__file__).parents[1] / "configs"


def _layers(tmp_path: Path, n: int) -> str:
    config = json.loads((CONFIGS / "llama-gqa-tiny" / "config.json").read_text())
    config["num_hidden_layers"] = n
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    return str(tmp_path / "m")


def _flops(model: str, reuse_blocks: bool = True, **ac: str) -> tuple[int, object]:
    w = Workload(model, inputs={"input_ids": "2,16:int64"}, precision="bf16-mixed", reuse=reuse_blocks)
    trace, notes = trace_step(w, Training(train=True, optimizer="adamw", **ac), cuda_sm=(9, 0))
    return sum(e.flops for e in trace.events), trace


def test_every_second_block_recomputes_half_of_what_full_checkpointing_does(tmp_path: Path) -> None:
    model = _layers(tmp_path, 6)
    none, _ = _flops(model)
    full, _ = _flops(model, ac="full")
    every2, _ = _flops(model, ac="selective", selective_ac_option="2")
    every3, _ = _flops(model, ac="selective", selective_ac_option="3")
    every1, _ = _flops(model, ac="selective", selective_ac_option="1")
    # each checkpointed block runs its forward once more in the backward: 3 of 6, 2 of 6, 6 of 6
    assert full > none
    assert (every2 - none) * 2 == full - none
    assert (every3 - none) * 3 == full - none
    assert every1 == full


def test_blocks_that_differ_in_their_switch_alone_are_not_replayed_from_each_other(tmp_path: Path) -> None:
    model = _layers(tmp_path, 6)
    fast = _flops(model, ac="selective", selective_ac_option="2")[1]
    stats = (reuse.LAST.recorded, reuse.LAST.replayed)
    full = _flops(model, False, ac="selective", selective_ac_option="2")[1]
    assert_same(fast, full)
    assert stats[1] > 0  # the kept blocks and the checkpointed ones each replayed from their own kind


def test_a_plain_module_list_checkpoints_the_nth_blocks_counted_from_one() -> None:
    blocks = nn.Sequential(*[nn.Linear(4, 4) for _ in range(5)])
    what, undo = setups.enable_checkpointing(blocks, every=2)
    assert [i for i, b in enumerate(blocks) if "forward" in vars(b)] == [1, 3]  # the 2nd and the 4th
    assert "every 2nd of the 5 blocks (2)" in what
    undo()
    assert not any("forward" in vars(b) for b in blocks)


@pytest.mark.parametrize(("kw", "words"), [
    (dict(ac="full", selective_ac_option="2"), "add --ac selective"),
    (dict(ac="selective", selective_ac_option="0"), "op or a whole number"),
    (dict(ac="selective", selective_ac_option="half"), "op or a whole number"),
])
def test_bad_options_are_refused(kw: dict[str, str], words: str) -> None:
    with pytest.raises(FootprintError, match=words):
        Training(train=True, **kw)


def test_the_option_is_a_flag_with_torchtitans_name(tmp_path: Path) -> None:
    from torch_footprint.cli import main

    model = _layers(tmp_path, 4)
    args = ["memory", model, "--input-ids", "1,16", "--train", "--ac", "selective", "--selective-ac-option", "2"]
    assert main(args) == 0
    assert main([*args[:-2], "--selective-ac-option", "x"]) == 2
    assert dataclasses.replace(Training(train=True), ac="selective").selective  # op: the per-operator policy


def test_a_plan_launches_it_with_torchtitans_option_and_megatrons_block_method() -> None:
    from types import SimpleNamespace

    from torch_footprint.estimate.plan import PlanRow, launch
    from torch_footprint.settings import Parallel

    row = PlanRow(SimpleNamespace(layout=Parallel(gpus=8, strategy="fsdp")), 1, "selective", 2048, 8,  # type: ignore[arg-type]
                  32, "2")
    out = launch(row)
    assert out["torchtitan"]["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}
    # 32 blocks, one in two recomputed: Megatron recomputes as many, the first 16
    assert {"--recompute-granularity full", "--recompute-method block", "--recompute-num-layers 16"} <= set(
        out["megatron"])
