"""Several ranks: the ring formulas and each strategy's collectives worked by hand, the
tensor-parallel share of a model counted by hand, and real runs of 2 ranks under torchrun
(gloo): measured per-rank peaks beside the prediction, a failing rank, a hung rank and
Ctrl-C, each leaving no process behind."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torch_footprint import api
from torch_footprint.cli import main
from torch_footprint.errors import FootprintError
from torch_footprint.estimate.layouts import comm
from torch_footprint.estimate.workload import trace_step
from torch_footprint.measure.distributed import RanksFailed
from torch_footprint.settings import Parallel, Training, Workload

ROOT = Path(__file__).resolve().parents[2]
LLAMA = str(ROOT / "tests" / "configs" / "llama-tiny")
FIXTURES = ROOT / "tests" / "fixtures" / "ranks.py"
LINK = comm.Link(bandwidth=1e6, latency=0.0, source="test")  # 1 MB/s, no latency: times are bytes / 1e6


def test_ring_collectives_by_hand():
    # all-reduce moves 2(N-1)/N x S per rank; all-gather and reduce-scatter (N-1)/N x S
    assert comm.all_reduce_s(1e6, 4, LINK) == pytest.approx(1.5)
    assert comm.gather_s(1e6, 4, LINK) == pytest.approx(0.75)
    assert comm.all_reduce_s(1e6, 1, LINK) == 0.0
    slow = comm.Link(1e6, 1e-3, "test")  # plus 2(N-1) and (N-1) steps of 1 ms
    assert comm.all_reduce_s(1e6, 4, slow) == pytest.approx(1.5 + 0.006)
    assert comm.gather_s(1e6, 4, slow) == pytest.approx(0.75 + 0.003)


def test_small_all_reduce_latency_is_nccls_own_model():
    """NCCL's tuning constants (src/graph/tuning.cc): ring LL, 6.6 us a call + 0.6 us a step over
    NVLink, 1.0 us over PCIe. 8 ranks, 8 bytes: 6.6 + 14 x 0.6 = 15.0 us; PCIe 6.6 + 14 = 20.6 us;
    an all-gather 6.6 + 7 x 0.6 = 10.8 us (the bytes' share is below a nanosecond)."""
    from torch_footprint.hardware import get

    nvl = comm.link_of(get("h100-sxm"))
    assert nvl is not None
    assert comm.all_reduce_s(8, 8, nvl) == pytest.approx(15.0e-6, abs=1e-9)
    assert comm.gather_s(8, 8, nvl) == pytest.approx(10.8e-6, abs=1e-9)
    pcie = comm.link_of(get("l4"))
    assert pcie is not None and pcie.source.startswith("PCIe")
    assert comm.all_reduce_s(8, 8, pcie) == pytest.approx(20.6e-6, abs=1e-9)


def test_ddp_buckets_are_one_mib_then_25():
    # (size, count) in order: 1 MiB, two of 25 MiB, the 9 MiB left
    assert comm.ddp_buckets(60 * 2**20) == [(2**20, 1), (25 * 2**20, 2), (9 * 2**20, 1)]
    assert comm.ddp_buckets(26 * 2**20) == [(2**20, 1), (25 * 2**20, 1)]
    assert comm.ddp_buckets(1000) == [(1000, 1)]
    assert comm.ddp_buckets(0) == []


def _mlp_trace():
    from torch import nn

    def mlp():
        return nn.Sequential(nn.Linear(100, 50), nn.ReLU(), nn.Linear(50, 10))

    return trace_step(Workload(mlp(), ["4,100"], batch=4), Training(train=True, optimizer="adam"))[0]


# Psi = 5,560 fp32 parameters: W = G = 22,240 bytes; units "0" = 20,200 and "2" = 2,040 bytes
W = 22_240
PHASES = {"forward": 1.0, "loss": 0.0, "backward": 2.0, "optimizer": 0.4}


def test_collectives_per_strategy_by_hand():
    t = _mlp_trace()
    ddp = comm.step_time(t, PHASES, "ddp", 2, LINK)
    # one bucket (under 1 MiB) all-reduced: 2 x 1/2 x 22,240 B at 1 MB/s = 22.24 ms, the last bucket: all exposed
    assert ddp.comm_s == pytest.approx(0.02224) and ddp.exposed_s == pytest.approx(0.02224)
    assert ddp.time_s == pytest.approx(3.4 + 0.02224)
    z1 = comm.step_time(t, PHASES, "zero1", 2, LINK)
    # + the updated shards all-gathered after the step (1/2 x 22,240 B), exposed; the step on half the parameters
    assert z1.exposed_s == pytest.approx(0.02224 + 0.01112) and z1.compute_s["optimizer"] == pytest.approx(0.2)
    f = comm.step_time(t, PHASES, "fsdp", 2, LINK)
    ag = 0.5 * (20_200 + 2_040) / 1e6
    # all-gather in the forward and again in the backward, reduce-scatter of the gradients
    assert [c.op for c in f.collectives] == ["all-gather", "all-gather", "reduce-scatter"]
    assert f.comm_s == pytest.approx(3 * ag)
    # hidden behind 1 s of forward and 2 s of backward but for unit "0"'s gather and its reduce-scatter
    assert f.exposed_s == pytest.approx(2 * 0.5 * 20_200 / 1e6)
    z2 = comm.step_time(t, PHASES, "zero2", 2, LINK)
    assert z2.comm_s == pytest.approx(2 * ag)  # gathered once: no all-gather in the backward


def test_tensor_parallel_share_and_all_reduces_by_hand():
    whole = trace_step(Workload(LLAMA, {"input_ids": "2,64:int64"}), Training(train=True, optimizer="adamw"))[0]
    half = trace_step(Workload(LLAMA, {"input_ids": "2,64:int64"}), Training(train=True, optimizer="adamw"),
                      Parallel(gpus=2, tp=2))[0]
    # hidden 128, 4 heads of 32 (2 key/value heads), MLP 344, vocab 1000, 2 layers. Per layer: q, o 128x128;
    # k, v 128x64; gate, up, down 128x344; two norms of 128. Embedding and head 1000x128 each, final norm 128.
    linears = 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 344  # 181,248 per layer
    rest = 2 * 1000 * 128 + 128 + 2 * 2 * 128
    assert sum(p.nbytes for p in whole.params) == 4 * (rest + 2 * linears)
    # tensor parallel over 2: every attention and MLP linear halved, the rest replicated
    assert sum(p.nbytes for p in half.params) == 4 * (rest + linears)
    tp = comm.step_time(half, {"forward": 1.0, "backward": 1.0}, "ddp", 1, LINK, tp=2)
    # per layer 2 row-parallel outputs all-reduced in the forward, 5 column-parallel inputs' gradients in the
    # backward (DTensor reduces each one's): 14 all-reduces of [2, 64, 128] fp32 = 65,536 B, each 65.536 ms
    assert [c.calls for c in tp.collectives] == [4, 10]
    assert tp.exposed_s == pytest.approx(14 * 0.065536)


def test_sequence_parallel_splits_the_sequence_between_the_split_linears_by_hand():
    # The same tiny Llama (hidden 128, 2 layers, vocab 1000) at 2 x 64 tokens over tp 2 with
    # sequence parallelism (Korthikanti et al. 2022, 4.2.2): between the blocks' split linears each
    # rank holds 64 / 2 = 32 tokens; the attention and the MLP gather all 64 for their column-parallel
    # linears; each row-parallel output is reduce-scattered back to 32; the head gathers all 64.
    sp = trace_step(Workload(LLAMA, {"input_ids": "2,64:int64"}), Training(train=True, optimizer="adamw"),
                    Parallel(gpus=2, tp=2, sequence_parallel=True))[0]
    fwd = [e for e in sp.events if e.phase == "forward"]
    norms = [e for e in fwd if e.module.endswith("input_layernorm") and e.op == "aten.mul.Tensor"]
    assert norms and all(e.out_shapes[0] == [2, 32, 128] for e in norms)
    q = [e for e in fwd if e.module.endswith("self_attn.q_proj") and e.kind == "matrix"]
    assert q and all(e.out_shapes[0] == [128, 64] for e in q)  # 2 x 64 rows gathered, 128 / 2 features
    # each row-parallel output: all 64 tokens, then the reduce-scatter's 32 (a copy of its own)
    o = [i for i, e in enumerate(fwd) if e.module.endswith("self_attn.o_proj") and e.kind == "matrix"]
    assert len(o) == 2 and all(fwd[i].out_shapes[0] == [128, 128] for i in o)
    assert all([e.out_shapes[0] for e in fwd[i + 1:i + 5] if e.op == "aten.clone.default"] == [[2, 32, 128]]
               for i in o)
    [head] = [e for e in fwd if e.module == "lm_head" and e.kind == "matrix"]
    assert head.out_shapes[0][0] == 2 * 64  # the head sees the whole sequence
    # the same weights as tensor parallelism alone, and less alive when the forward ends (its
    # norms and residuals hold half the tokens)
    tp_only = trace_step(Workload(LLAMA, {"input_ids": "2,64:int64"}), Training(train=True, optimizer="adamw"),
                         Parallel(gpus=2, tp=2))[0]
    assert sum(p.nbytes for p in sp.params) == sum(p.nbytes for p in tp_only.params)
    from torch_footprint.estimate.layouts.sharding import rank_peak

    def forward_end(t):
        last = max(i for i, e in enumerate(t.events) if e.phase == "forward")
        return rank_peak(t).highs[last]

    assert forward_end(sp) < forward_end(tp_only)


def test_sequence_parallel_rank_trains_every_parameter():
    # run for real (random weights, CPU): the hooks and the shard-keeping linear leave no parameter
    # without a gradient, and the logits cover the whole sequence
    import torch
    import transformers

    from torch_footprint.estimate.layouts.tensor_parallel import apply_sequence_parallel, shrink_for_tp

    cfg = transformers.AutoConfig.from_pretrained(LLAMA)
    cfg.use_cache = False
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    apply_sequence_parallel(model, 2, shrink_for_tp(model, 2))
    out = model(input_ids=torch.randint(0, 100, (2, 64)))
    assert out.logits.shape == (2, 64, 1000)
    out.logits.sum().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


def test_sequence_parallel_needs_tp_and_a_divisible_sequence(capsys):
    assert main(["fit", str(LLAMA), "--input-ids", "1,64", "--train", "--sequence-parallel"]) == 2
    assert "add --tp 2 or more" in capsys.readouterr().err
    assert main(["fit", str(LLAMA), "--input-ids", "1,63", "--train", "--gpus", "2", "--tp", "2",
                 "--sequence-parallel", "--gpu", "h100-sxm"]) == 2
    err = capsys.readouterr().err.strip()
    assert "the sequence length 63 is not a multiple of --tp 2" in err and "\n" not in err


def test_tp_that_does_not_divide_the_heads_is_one_line(capsys):
    assert main(["fit", LLAMA, "--input-ids", "2,64", "--train", "--gpus", "3", "--tp", "3", "--gpu", "h100-sxm"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "footprint: error: --tp 3 does not divide the model's 4 attention heads"
    with pytest.raises(FootprintError, match="found no attention or MLP linears"):
        api.bench("resnet18", train=True, nproc=2, strategy="tp")


def test_nproc_beyond_this_machine_is_one_line(capsys):
    assert main(["bench", "resnet18", "--train", "--nproc", "100000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--nproc 100000 is more than the" in err[0]
    assert main(["bench", "resnet18", "--train", "--nproc", "2", "--strategy", "pp"]) == 2
    assert "unknown strategy 'pp'" in capsys.readouterr().err


def test_fit_times_communication_over_the_link():
    res = api.fit(LLAMA, {"input_ids": "2,64:int64"}, train=True, optimizer="adamw", gpus=8, strategy="fsdp",
                  gpu=["h100-sxm", "h100-pcie"])
    rows = {r.accelerator.id: r for r in res.rows}
    nvlink, pcie = rows["h100-sxm"].step, rows["h100-pcie"].step
    assert nvlink is not None and pcie is not None
    # the same bytes over 80% of 450 GB/s and of 64 GB/s
    assert nvlink.link.bandwidth == pytest.approx(0.8 * 450e9) and pcie.link.bandwidth == pytest.approx(0.8 * 64e9)
    assert rows["h100-sxm"].latency_s == pytest.approx(nvlink.time_s)
    assert rows["h100-sxm"].throughput is not None


def _gone(pids: list[int]) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{p}").exists() and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
                   != "Z" for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_gloo_ranks_measured_peak_matches_prediction(strategy):
    # DDP and FSDP2 over gloo (benchmarks/distributed_cpu.py runs every strategy on larger models); under
    # FSDP2 the gloo worker thread or the caller frees the reduce-scatter's clone, by chance: both ranks agree
    res = api.bench(f"{FIXTURES}:mlp", ["32,256"], train=True, nproc=2, strategy=strategy, optimizer="adamw",
                    steps=1, warmup=0, timeout=300)
    assert [r.rank for r in res.ranks] == [0, 1]
    for r in res.ranks:  # the allocator's own records on each rank, from the model's construction on
        assert abs(res.predicted.peak.peak_bytes - r.peak_bytes) <= 0.05 * r.peak_bytes
        assert r.step_s > 0 and r.comm_s > 0 and any(k.startswith("gloo:") for k in r.collectives)


@pytest.mark.slow
def test_a_failing_rank_is_named_and_nothing_is_left():
    # rank 1 fails while building the model; rank 0, waiting for its peer, may be stopped before it writes
    # its own error: the "then" clause names it only where it did
    with pytest.raises(RanksFailed, match=r"^rank 1 failed: .*boom on rank 1( \(then rank 0: its peer was gone\))?$") \
            as e:
        api.bench(f"{FIXTURES}:fails_on_rank1", ["4,8"], train=True, nproc=2, steps=1, warmup=0, timeout=120)
    assert len(e.value.pids) == 2 and _gone(e.value.pids)


@pytest.mark.slow
def test_a_hung_rank_is_stopped_and_reported():
    with pytest.raises(RanksFailed, match=r"rank\(s\) 0, 1 did not finish within 5 s of connecting \(hung\?\)") as e:
        api.bench(f"{FIXTURES}:hangs_on_rank1", ["4,8"], train=True, nproc=2, steps=1, warmup=0, timeout=5)
    assert len(e.value.pids) == 2 and _gone(e.value.pids)  # the ranks' own processes, stopped


@pytest.mark.slow
def test_ctrl_c_stops_every_rank(tmp_path):
    env = dict(os.environ, FOOTPRINT_TEST_PIDS=str(tmp_path), PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([sys.executable, "-m", "torch_footprint", "bench", f"{FIXTURES}:hangs_on_rank1",
                             "--input", "4,8", "--train", "--nproc", "2", "--steps", "1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("rank*.pid"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = [int(f.read_text()) for f in tmp_path.glob("rank*.pid")]
    assert len(pids) == 2
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the command
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err
    assert _gone(pids)


def test_rank_ceilings_measured_in_the_ranks_replace_the_share():
    from torch_footprint.estimate.layouts.ranks import rank_device
    from torch_footprint.hardware.catalog import get

    cpu = get("cpu")
    machine = {"threads": 2, "matmul_tflops": {"fp32": 0.06}, "copy_gbs": 18.0,
               "link": {"nproc": 2, "threads": 1, "busbw_gbs": 1.0, "latency_us": 5.0,
                        "ceilings": {"threads": 1, "matmul_tflops": {"fp32": 0.04}, "copy_gbs": 9.0}}}
    acc = dataclasses.replace(cpu, calibrated=machine)
    # 2 ranks of 1 thread, as calibrated: what each rank reached, whole (0.04, not 0.06 x 1/2 = 0.03)
    one, share, where = rank_device(acc, 2, 1)
    assert share == 1.0 and one.calibrated["matmul_tflops"]["fp32"] == 0.04 and one.calibrated["copy_gbs"] == 9.0
    assert one.calibrated["link"]["busbw_gbs"] == 1.0 and "measured in 2 ranks" in where
    # a rank count it was not calibrated for: the machine's ceilings x the rank's share of their threads
    other, share, where = rank_device(acc, 4, 1)
    assert other is acc and share == 0.5 and "calibrate --nproc 4" in where


@pytest.mark.slow
def test_calibrate_nproc_measures_each_rank_at_once(monkeypatch):
    from torch_footprint.measure import calibrate as calibration
    from torch_footprint.measure.distributed import usable_cores

    # this process's own calibration is test_calibrate.py's; here, what --nproc adds: the ranks, each
    # started by torchrun in a process of its own, all-reduce and calibrate for real
    monkeypatch.setattr(calibration, "calibrate", lambda device, **_: {"device": device})
    cal = api.calibrate("cpu", quick=True, save=False, nproc=2)
    link = cal.measured["link"]
    assert cal.path is None and link["nproc"] == 2 and link["backend"] == "gloo" and link["busbw_gbs"] > 0
    # each rank calibrated on the threads bench --nproc 2 gives it: its share of the cores
    assert link["threads"] == max(1, usable_cores() // 2) == link["ceilings"]["threads"]
    assert {"matmul_tflops", "conv_fp32_by_batch_k", "copy_gbs", "op_overhead_us"} <= set(link["ceilings"])
    assert "when" not in link["ceilings"]


def test_rings_across_nodes_run_at_the_networks_share_per_gpu_by_hand():
    # DGX H100 nodes (8 GPUs, eight 400 Gb/s NDR ports: 50 GB/s per GPU, the BasePOD reference
    # architecture). NCCL runs one ring per channel, each leaving the node by its own NIC, so a ring of
    # all 16 ranks (8 on each node) crosses between nodes on all eight NICs: 8 x 50 x 0.8 = 320 GB/s,
    # under NVLink's 450 x 0.8 = 360 GB/s (nccl-tests' multi-node all-reduce bus bandwidth on H100 + NDR
    # is quoted at 400-450 GB/s, https://saturncloud.io/blog/crusoe-nccl-cluster-validation, not one
    # port's 50). An all-reduce of 1 GB over 16 ranks: 2 x 15/16 x 1e9 / 320e9 = 5.859375 ms, + 30 steps
    # x 2.7 us (NCCL's network ring LL step) + 6.6 us a call. Eight ranks stay on one node: NVLink's.
    from torch_footprint.hardware import get
    from torch_footprint.hardware.networks import get_network

    h100, ndr = get("h100-sxm"), get_network("ib-ndr")
    across = comm.link_of(h100, ranks=16, per_node=8, network=ndr)
    assert across is not None and across.bandwidth == pytest.approx(320e9)
    assert comm.all_reduce_s(1e9, 16, across) == pytest.approx(5.859375e-3 + 30 * 2.7e-6 + 6.6e-6, rel=1e-12)
    inside = comm.link_of(h100, ranks=8, per_node=8, network=ndr)
    assert inside is not None and inside.bandwidth == pytest.approx(450e9 * 0.8)
    # a data-parallel ring of 2 ranks 8 apart (--tp 8 inside each node): one rank per node, while the
    # node's 8 such rings share its NICs: each GPU's own share, 50 x 0.8 = 40 GB/s
    one_each = comm.link_of(h100, ranks=2, per_node=8, network=ndr, stride=8)
    assert one_each is not None and one_each.bandwidth == pytest.approx(40e9)
    with pytest.raises(FootprintError, match="unknown network 'ib-xyz': use ib-edr, ib-hdr, ib-ndr"):
        get_network("ib-xyz")
    assert main(["fit", str(LLAMA), "--input-ids", "1,64", "--train", "--gpus", "16", "--network", "ib-xyz",
                 "--gpu", "h100-sxm"]) == 2


def test_fit_across_nodes_says_which_network_carries_the_rings(capsys):
    res = api.fit(LLAMA, {"input_ids": "1,64:int64"}, train=True, optimizer="adamw", gpus=16, strategy="fsdp",
                  gpu=["h100-sxm"], network="ib-ndr")
    assert any("16 GPUs span 2 nodes of 8: their rings cross InfiniBand NDR" in n for n in res.notes)
    res = api.fit(LLAMA, {"input_ids": "1,64:int64"}, train=True, optimizer="adamw", gpus=16, strategy="fsdp",
                  gpu=["h100-sxm"])
    assert any("no --network given" in n for n in res.notes)

