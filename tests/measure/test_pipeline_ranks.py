"""Pipeline parallelism measured under torchrun (gloo): each rank one stage of torch's own
schedules, its peak beside fit's need for that stage; and ranks spread over two torchrun
"nodes" on this machine, meeting by torchrun's c10d rendezvous on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.cli_errors import bad_input_line
from torch_footprint import api
from torch_footprint.measure.distributed import torchrun_commands

ROOT = Path(__file__).resolve().parents[2]
LLAMA = str(ROOT / "tests" / "configs" / "llama-tiny")
FIXTURES = ROOT / "tests" / "fixtures" / "ranks.py"


def test_two_nodes_are_two_torchruns_meeting_on_loopback():
    one = torchrun_commands(2, 1, ["-m", "x"])
    assert len(one) == 1 and "--standalone" in one[0] and "--nproc-per-node=2" in one[0]
    two = torchrun_commands(4, 2, ["-m", "x"])
    assert len(two) == 2 and two[0] == two[1]  # the same command on each node, as a job's launcher runs it
    cmd = two[0]
    assert "--standalone" not in cmd and {"--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d"} <= set(cmd)
    assert any(a.startswith("--rdzv-endpoint=127.0.0.1:") for a in cmd)
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and cmd[-2:] == ["-m", "x"]


@pytest.mark.slow
def test_ddp_over_two_nodes_on_loopback_brings_back_every_rank():
    res = api.bench(f"{FIXTURES}:mlp", ["32,256"], train=True, nproc=2, nnodes=2, optimizer="adamw", steps=1,
                    warmup=0, timeout=120)
    assert [r.rank for r in res.ranks] == [0, 1] and res.settings["nnodes"] == 2
    for r in res.ranks:  # the all-reduces crossed the two torchrun processes over gloo
        assert abs(res.predicted.peak.peak_bytes - r.peak_bytes) <= 0.05 * r.peak_bytes
        assert r.collectives.get("gloo:all_reduce", 0) > 0


@pytest.mark.slow
def test_one_f_one_b_over_two_ranks_measured_beside_fits_stages():
    # tiny Llama (2 layers): rank 0 the embeddings and layer 0, rank 1 layer 1, the norm and the head; 4
    # micro-batches of 2 x 128 tokens through torch's Schedule1F1B on gloo, AdamW
    res = api.bench(LLAMA, {"input_ids": "2,128:int64"}, train=True, gpus=2, pp=2, pp_schedule="1f1b",
                    grad_accum=4, optimizer="adamw", steps=1, warmup=0, timeout=300)
    assert [r.rank for r in res.ranks] == [0, 1] and res.strategy == "pp"
    stages = res.predicted.stages
    assert [s["in_flight"] for s in stages] == [2, 1]  # 1F1B: p - r micro-batches on rank r
    for r in res.ranks:  # each rank's own peak (the allocator's records) against its own stage
        assert abs(res.predicted.peak_of(r.rank) - r.peak_bytes) <= 0.05 * r.peak_bytes


def test_a_pipeline_bench_needs_one_stage_per_rank(capsys):
    line = bad_input_line(["bench", LLAMA, "--train", "--nproc", "2", "--gpus", "2", "--pp", "2", "--strategy",
                           "fsdp"], capsys)
    assert "bench --pp runs pipeline ranks only" in line
    line = bad_input_line(["bench", LLAMA, "--train", "--nproc", "2", "--nnodes", "3"], capsys)
    assert "--nnodes 3 splits the ranks into nodes of equal size" in line
