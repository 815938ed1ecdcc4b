"""The training-layout flags (torchtitan's and Megatron-LM's names): what they mean, and bad
input refused with one line and exit code 2 before any figure is given."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_errors import bad_input_line

from torch_footprint.cli import main
from torch_footprint.errors import FootprintError
from torch_footprint.settings import Parallel, Training

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
LLAMA = str(CONFIGS / "llama-tiny")  # 2 decoder layers
MOE = str(CONFIGS / "qwen3-moe-tiny")  # 2 decoder layers, 4 experts per layer
FIT = ["fit", LLAMA, "--input-ids", "2,32", "--train", "--gpu", "h100-sxm"]

BAD = [
    # the model's own shape: 2 blocks, 4 experts
    ([*FIT, "--gpus", "3", "--pp", "3"], "--pp 3 = 3 stages do not divide the model's 2 blocks (model.layers)"),
    ([*FIT, "--gpus", "2", "--pp", "2", "--pp-first-stage-less-layers", "4"],
     "torchtitan's split of 2 blocks (model.layers) with the embedding as 4 and the head as 1 leaves a stage empty"),
    ([*FIT, "--pp-last-stage-less-layers", "1"], "--pp-last-stage-less-layers splits a pipeline: add --pp 2 or more"),
    ([*FIT, "--gpus", "2", "--pp", "2", "--pp-first-stage-less-layers", "-1"],
     "--pp-first-stage-less-layers must be at least 0, got -1"),
    ([*FIT, "--gpus", "4", "--pp", "2", "--vpp", "2"], "--pp 2 x --vpp 2 = 4 stages do not divide the model's 2"),
    (["fit", MOE, "--input-ids", "2,32", "--train", "--gpu", "h100-sxm", "--gpus", "3", "--ep", "3"],
     "--ep 3 does not divide the model's 4 experts per layer"),
    ([*FIT, "--gpus", "2", "--ep", "2"], "--ep 2 splits the experts of mixture-of-experts layers: this model has none"),
    # conflicting layouts: 8 GPUs are not 3 x 2 x 1 replicas' worth
    ([*FIT, "--gpus", "8", "--tp", "2", "--pp", "3"], "--tp 2 x --pp 3 x --cp 1 = 6 GPUs per model replica does "
                                                       "not divide --gpus 8"),
    ([*FIT, "--gpus", "8", "--tp", "2", "--cp", "2", "--pp", "2", "--ep", "8"],
     "--ep 8 must divide the data- x context-parallel ranks, 1 x 2 = 2 (--gpus / (--tp x --pp)), or, folded over "
     "the tensor-parallel ranks too, 2 x 2 = 4"),
    ([*FIT, "--gpus", "2", "--ep", "2", "--overlap-moe-expert-parallel-comm"],
     "--overlap-moe-expert-parallel-comm hides one micro-batch's all-to-alls behind another's compute: add --ep 2 "
     "or more and --grad-accum 2 or more"),
    ([*FIT, "--gpus", "2", "--overlap-moe-expert-parallel-comm", "--grad-accum", "2"],
     "--overlap-moe-expert-parallel-comm hides one micro-batch's all-to-alls"),
    ([*FIT, "--gpus", "8", "--tp", "2", "--ep", "3"], "--ep 3 must divide the data- x context-parallel ranks, 4 x 1"),
    ([*FIT, "--gpus", "8", "--strategy", "tp", "--pp", "2"], "--strategy tp puts every GPU in one tensor-parallel"),
    ([*FIT, "--gpus", "8", "--strategy", "fsdp", "--dp-shard", "4", "--dp-replicate", "4"],
     "--dp-shard 4 x --dp-replicate 4 must be the 8 data-parallel ranks"),
    ([*FIT, "--gpus", "8", "--strategy", "fsdp", "--dp-shard", "3"], "--dp-shard 3 must divide the 8 data-parallel"),
    ([*FIT, "--gpus", "8", "--dp-shard", "4"], "--dp-shard sets up FSDP: add --strategy fsdp (it is --strategy ddp)"),
    ([*FIT, "--gpus", "8", "--fsdp-param-dtype", "bf16"], "--fsdp-param-dtype sets up FSDP: add --strategy fsdp"),
    ([*FIT, "--gpus", "8", "--pp-microbatches", "2"], "--pp-microbatches 2 runs a pipeline's schedule: add --pp 2"),
    ([*FIT, "--gpus", "8", "--pp", "2", "--grad-accum", "4", "--pp-microbatches", "3"],
     "--pp-microbatches 3 must divide --grad-accum 4"),
    ([*FIT, "--gpus", "8", "--grad-reduce-dtype", "bf16"],
     "--grad-reduce-dtype sets Megatron-core's gradient buffer: add --framework megatron"),
    ([*FIT, "--gpus", "8", "--strategy", "fsdp", "--fsdp-param-dtype", "fp8"], "unknown FSDP parameter dtype 'fp8'"),
    # pipeline schedules
    ([*FIT, "--gpus", "2", "--pp-schedule", "gpipe"], "--pp-schedule gpipe schedules a pipeline: add --pp 2 or more"),
    ([*FIT, "--gpus", "2", "--vpp", "2"], "--vpp 2 interleaves a pipeline: add --pp 2 or more"),
    ([*FIT, "--gpus", "2", "--pp", "2", "--vpp", "2", "--pp-schedule", "1F1B"],
     "--pp-schedule 1f1b runs one stage per rank: --vpp 2 needs interleaved-1f1b"),
    ([*FIT, "--gpus", "2", "--pp", "2", "--pp-schedule", "zb"], "unknown pipeline schedule 'zb'"),
    ([*FIT, "--grad-accum", "0"], "--grad-accum must be at least 1, got 0"),
    (["fit", LLAMA, "--input-ids", "2,32", "--gpu", "h100-sxm", "--gpus", "2", "--pp", "2"],
     "--grad-accum and --pp price a training step: add --train"),
    # networks and checkpointing
    ([*FIT, "--gpus", "16", "--network-gbps", "0"], "--network-gbps must be more than 0, got 0.0"),
    ([*FIT, "--gpus", "16", "--nics-per-node", "4"], "--nics-per-node describes a network between nodes: add"),
    ([*FIT, "--ac", "partial"], "unknown activation checkpointing mode 'partial': use none, full, selective"),
    # context and expert parallelism split what the model has: a sequence, experts
    ([*FIT, "--gpus", "2", "--cp", "3"], "--tp 1 x --pp 1 x --cp 3 = 3 GPUs per model replica does not divide"),
    ([*FIT, "--gpus", "6", "--cp", "3"], "--cp 3 does not divide the sequence length 32"),
    ([*FIT, "--gpus", "2", "--ep", "2"], "--ep 2 splits the experts of mixture-of-experts layers: this model has none"),
    ([*FIT, "--ac", "none", "--checkpointing"], "--ac none contradicts --checkpointing"),
    (["memory", LLAMA, "--ac", "full"], "--ac full only changes training memory: add --train"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a[5:])[:70] for a, _ in BAD])
def test_a_bad_layout_is_one_line_and_exit_code_2(argv: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    err = bad_input_line(argv, capsys)
    assert message in err, err


def test_the_degrees_multiply_to_the_gpus() -> None:
    # 64 GPUs = tp 2 x pp 4 x cp 2 x dp 4; HSDP over those 4: 2 groups of 2 sharding ranks
    p = Parallel(gpus=64, tp=2, pp=4, cp=2, strategy="fsdp", dp_replicate=2)
    assert (p.tensor, p.pp, p.cp, p.data, p.shard_group) == (2, 4, 2, 4, 2)
    assert Parallel(gpus=16, pp=2, vpp=2).schedule == "interleaved-1f1b"
    assert Parallel(gpus=16, pp=2).schedule == "1f1b"
    assert Parallel(gpus=16, pp=2, pp_schedule="Interleaved1F1B").schedule == "interleaved-1f1b"  # torchtitan's
    assert Parallel(gpus=8, strategy="fsdp", fsdp_param_dtype="bfloat16").fsdp_param_dtype == "bf16"


def test_ac_full_is_checkpointing() -> None:
    assert Training(train=True, ac="full").checkpointing
    assert not Training(train=True, ac="none").checkpointing
    with pytest.raises(FootprintError, match="contradicts"):
        Training(train=True, ac="none", checkpointing=True)


def test_micro_batch_is_the_batch_megatron_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    # --micro-batch (Megatron's --micro-batch-size) is the batch one forward and backward run at
    assert main(["fit", LLAMA, "--input-ids", "1,32", "--train", "--gpu", "h100-sxm", "--micro-batch", "3"]) == 0
    assert "input 3x32:int64" in capsys.readouterr().out
