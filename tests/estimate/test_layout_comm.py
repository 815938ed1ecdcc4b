"""Communication priced where it runs, worked by hand: tensor-parallel all-reduces on the GPUs'
own link when the group sits in a node, rings between nodes at their share of the node's NICs,
FSDP2's gathers and reduce-scatters in its mixed-precision dtypes, HSDP's replica all-reduce.

Ring volumes (Thakur et al. 2005; NCCL's "Performance reported by NCCL tests"): an all-gather or
a reduce-scatter moves (n-1)/n of the whole buffer per rank, an all-reduce 2(n-1)/n of it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from torch import nn

from torch_footprint import api
from torch_footprint.estimate.layouts import comm
from torch_footprint.estimate.workload import trace_step
from torch_footprint.hardware import get
from torch_footprint.hardware.networks import network_for
from torch_footprint.settings import Parallel, Training, Workload

LLAMA = str(Path(__file__).resolve().parents[1] / "configs" / "llama-tiny")
LINK = comm.Link(bandwidth=1e6, latency=0.0, source="test")  # 1 MB/s, no latency: times are bytes / 1e6
FAST = comm.Link(bandwidth=1e9, latency=0.0, source="test")  # 1 GB/s
PHASES = {"forward": 1.0, "loss": 0.0, "backward": 2.0, "optimizer": 0.4}


def _mlp_trace():
    # 100x50 + 50 and 50x10 + 10: 5,560 fp32 parameters, W = G = 22,240 bytes; FSDP's units "0" (5,050
    # parameters, 20,200 B) and "2" (510 parameters, 2,040 B)
    model = nn.Sequential(nn.Linear(100, 50), nn.ReLU(), nn.Linear(50, 10))
    return trace_step(Workload(model, ["4,100"], batch=4), Training(train=True, optimizer="adam"))[0]


def test_fsdp_gathers_in_the_param_dtype_and_reduces_in_the_reduce_dtype():
    t = _mlp_trace()
    assert comm.fsdp_bytes(t, "bf16", "fp32") == (5_560 * 2, 5_560 * 4)
    f = comm.step_time(t, PHASES, "fsdp", 2, LINK, param_dtype="bf16", reduce_dtype="fp32")
    gather, again, scatter = f.collectives
    # all-gather of the bf16 parameters over 2 ranks: 1/2 x 11,120 B at 1 MB/s = 5.56 ms, forward and backward
    assert gather.nbytes == again.nbytes == 11_120 and gather.time_s == pytest.approx(5.56e-3)
    # reduce-scatter of the fp32 gradients: 1/2 x 22,240 B = 11.12 ms
    assert scatter.nbytes == 22_240 and scatter.time_s == pytest.approx(11.12e-3)
    # both in bf16 (FSDP2 reduces in param_dtype when reduce_dtype is not given): 3 x 5.56 ms
    both = comm.step_time(t, PHASES, "fsdp", 2, LINK, param_dtype="bf16", reduce_dtype="bf16")
    assert both.comm_s == pytest.approx(3 * 5.56e-3)
    # neither: as stored, fp32 (what the step cost before these settings): 3 x 11.12 ms
    assert comm.step_time(t, PHASES, "fsdp", 2, LINK).comm_s == pytest.approx(3 * 11.12e-3)


def test_hsdp_all_reduces_each_gradient_shard_across_the_replicas():
    t = _mlp_trace()
    h = comm.step_time(t, PHASES, "fsdp", 2, LINK, replicas=2, replica_link=LINK)
    assert h.ranks == 4 and [c.op for c in h.collectives][-1] == "all-reduce"
    # each unit's gradient shard (half the unit) all-reduced over 2 replicas: 2 x 1/2 x (20,200 + 2,040) / 2 B
    # = 11.12 ms, on top of FSDP's 3 x 11.12 ms
    assert h.collectives[-1].time_s == pytest.approx(11.12e-3)
    assert h.comm_s == pytest.approx(4 * 11.12e-3)
    # hidden behind 1 s of forward and 2 s of backward but the first unit's gather (10.1 ms) and, at the
    # end of the backward, its reduce-scatter (10.1 ms) and its shard's all-reduce (2 x 1/2 x 10,100 B = 10.1 ms)
    assert h.exposed_s == pytest.approx(3 * 10.1e-3)
    # the sharded optimizer steps 1/2 of the parameters: the shard group's, not all 4 ranks'
    assert h.compute_s["optimizer"] == pytest.approx(0.2)


def test_tensor_parallel_all_reduces_go_over_their_own_link():
    half = trace_step(Workload(LLAMA, {"input_ids": "2,64:int64"}), Training(train=True, optimizer="adamw"),
                      Parallel(gpus=2, tp=2))[0]
    # 14 all-reduces of [2, 64, 128] fp32 = 65,536 B over 2 ranks: 2 x 1/2 x 65,536 B at 1 GB/s = 65.536 us
    # each on the tensor-parallel link, whatever the data-parallel ring's link
    step = comm.step_time(half, {"forward": 1.0, "backward": 1.0}, "ddp", 1, LINK, 2, tp_link=FAST)
    assert step.exposed_s == pytest.approx(14 * 65.536e-6)


def test_rings_between_nodes_share_the_nodes_nics():
    a100 = get("a100-sxm-80gb")  # NVLink 300 GB/s x 0.8 = 240 GB/s
    hdr = network_for("ib-hdr")  # DGX A100: 8 x 200 Gb/s = 8 x 25 GB/s per node
    assert hdr is not None
    # a ring of 16 ranks 2 apart (the FSDP group beside --tp 2): 4 of its ranks on each node, and the node's
    # other tensor-parallel rank's ring beside it: half the node's NICs, 4 x 25 x 0.8 = 80 GB/s
    ring = comm.link_of(a100, ranks=8, per_node=8, network=hdr, stride=2)
    assert ring is not None and ring.bandwidth == pytest.approx(80e9)
    # the tensor-parallel pair sits in one node: NVLink
    pair = comm.link_of(a100, ranks=2, per_node=8, network=hdr)
    assert pair is not None and pair.bandwidth == pytest.approx(240e9)
    # a network given by its speed: 4 NICs of 200 Gb/s per node of 8 GPUs, 12.5 GB/s per GPU; a ring of all
    # 16 ranks, 8 per node, gets the node's 4 x 25 GB/s = 100 GB/s x 0.8 = 80 GB/s
    given = network_for(None, 200, 4, 8)
    assert given is not None and given.per_gpu(8) == pytest.approx(12.5e9)
    ring = comm.link_of(a100, ranks=16, per_node=8, network=given)
    assert ring is not None and ring.bandwidth == pytest.approx(80e9)
    faster = network_for("ib-hdr", 400)  # HDR's row at 400 Gb/s a port
    assert faster is not None and faster.per_gpu(8) == pytest.approx(50e9)


def test_fit_prices_tp_on_nvlink_and_the_fsdp_ring_on_the_network():
    res = api.fit(LLAMA, {"input_ids": "2,64:int64"}, train=True, optimizer="adamw", gpus=16, tp=2,
                  strategy="fsdp", network="ib-hdr", gpu=["a100-sxm-80gb"])
    step = res.rows[0].step
    assert step is not None and step.link is not None and step.link.bandwidth == pytest.approx(80e9)
    rows = next(c for c in step.collectives if c.what == "row-parallel outputs")
    # 4 all-reduces of 65,536 B over the NVLink pair: 2 x 1/2 x 65,536 / 240e9 s + 2 steps x 0.6 us (NCCL's
    # NVLink ring step) + 6.6 us a call = 8.0731 us each
    assert rows.time_s == pytest.approx(4 * (65_536 / 240e9 + 2 * 0.6e-6 + 6.6e-6), rel=1e-9)


def test_hsdp_shards_the_model_states_over_its_shard_group():
    base = dict(train=True, optimizer="adamw", strategy="fsdp", gpu=["h100-sxm"])
    hsdp = api.fit(LLAMA, {"input_ids": "2,64:int64"}, gpus=8, dp_shard=4, **base)
    # the tiny Llama's 2 x 1000 x 128 + 128 + 4 x 128 + 2 x 181,248 = 619,136 fp32 parameters; AdamW keeps two
    # moments and a 4-byte step count per tensor (21 tensors: 9 per layer, the embedding, the head and the
    # final norm): 8 x 619,136 + 84 B of optimizer state, a quarter of it on each of the 4 ranks of a shard group
    assert hsdp.states is not None and hsdp.states.optimizer == (8 * 619_136 + 21 * 4) // 4
    assert hsdp.states.weights == 4 * 619_136 // 4
    step = hsdp.rows[0].step
    assert step is not None and step.ranks == 8
    assert step.collectives[-1].what == "gradient shards across replicas"


def test_compute_beside_hidden_collectives_runs_slower_on_a_gpu():
    """A hidden collective's NCCL kernels take SMs from the compute it overlaps: 18.9% slower on
    average as measured (arXiv:2507.03114), over the time the collectives and the compute overlap."""
    h100 = get("h100-sxm")
    cpu = dataclasses.replace(h100, kind="cpu")
    step = comm.StepTime("fsdp", 2, {"forward": 1.0, "backward": 2.0, "optimizer": 0.4}, [
        comm.Collective("parameters", "all-gather", 0, 1, "forward", True, 0.5),
        comm.Collective("gradients", "reduce-scatter", 0, 1, "backward", True, 0.3),
        comm.Collective("updated shards", "all-gather", 0, 1, "optimizer", False, 0.4),
        comm.Collective("row-parallel outputs", "all-reduce", 0, 1, "forward", True, 0.6, copy_engines=True)],
        0.0, LINK)
    # 0.5 + 0.3 s hidden behind 3 s of forward and backward (the exposed 0.4 s takes no compute's time,
    # async TP's 0.6 s on the copy engines none of its SMs)
    assert comm.contention_s(step, h100) == pytest.approx(0.189 * 0.8)
    # collectives longer than the compute: only the compute there is runs slower (0.189 x 3 s)
    step.collectives[0].time_s = 5.0
    assert comm.contention_s(step, h100) == pytest.approx(0.189 * 3.0)
    # gloo beside CPU compute: not measured, not priced
    assert comm.contention_s(step, cpu) == 0.0
    # through fit: FSDP over 2 H100s prices it as its own line of the step
    row = api.fit(LLAMA, {"input_ids": "2,64:int64"}, train=True, gpus=2, strategy="fsdp", gpu=["h100-sxm"]).rows[0]
    assert row.step is not None
    hidden = sum(c.time_s for c in row.step.collectives if c.overlapped)
    assert row.step.compute_s["beside hidden collectives"] == pytest.approx(0.189 * hidden)


def test_a_modules_output_bytes_are_read_once_for_a_trace_and_its_slices():
    # the MLP's forward: Linear(100, 50) on 4 rows outputs 4 x 50 fp32 = 800 bytes, the ReLU the same,
    # Linear(50, 10) 4 x 10 x 4 = 160; a slice of the trace (a pipeline rank's, dataclasses.replace)
    # shares its events, and the pass over them is made once for both, and let go with them
    import gc

    from torch_footprint.estimate.layouts import memo

    t = _mlp_trace()
    part = dataclasses.replace(t, params=t.params[:2])
    assert [comm.activation_bytes(x, m) for x in (t, part) for m in ("0", "1", "2", "9")] == [800, 800, 160, 0] * 2
    assert len([k for k, v in memo._SHARED.items() if v[0] is t.events]) == 1
    key = id(t.events)
    del t, part
    gc.collect()
    assert key not in memo._SHARED


def test_checkpointed_blocks_run_their_tensor_parallel_collectives_again():
    # full checkpointing over the tiny Llama's 2 blocks: torch's checkpoint stops once the backward's
    # tensors are back, so each block's down projection is not run again: 2 x 6 of the 15 forward linears
    # (2 x 7 and the head) run again in the backward, and with them 12/15 of the forward's collectives
    link = comm.Link(100e9, 0.0, "by hand")
    phases = {"forward": 1e-9, "backward": 1e-9}

    def step(ac):
        t, _ = trace_step(Workload(LLAMA, {"input_ids": "2,64:int64"}, precision="bf16-mixed"),
                          Training(train=True, optimizer="adamw", ac=ac),
                          Parallel(gpus=2, tp=2, sequence_parallel=True))
        return t, comm.step_time(t, phases, "ddp", 1, link, 2)

    t, full = step("full")
    assert comm.recomputed_share(t) == pytest.approx(12 / 15)
    forward = next(c for c in full.collectives if c.what == "row-parallel outputs")
    again = next(c for c in full.collectives if c.what == "row-parallel outputs, recomputed")
    assert again.phase == "backward" and again.time_s == pytest.approx(forward.time_s * 12 / 15)
    _, plain = step(None)
    assert not any("recomputed" in c.what for c in plain.collectives)
    # not overlapped (no async TP): all of it exposed
    assert full.exposed_s == pytest.approx(plain.exposed_s + again.time_s)


def test_pytorchs_async_tp_leaves_a_summed_input_gradients_reduce_scatter_exposed():
    # Inductor's micro-pipeline pass fuses a reduce-scatter only with the one matmul that makes its input;
    # the attention's and the MLP's input gradients are sums over q, k, v and gate, up: 2 modules a block x 2
    # blocks, each reduce-scatter of the [2, 64, 128] bf16 activation left exposed. Megatron-core overlaps them.
    link = comm.Link(100e9, 0.0, "by hand")
    t, _ = trace_step(Workload(LLAMA, {"input_ids": "2,64:int64"}, precision="bf16-mixed"),
                      Training(train=True, optimizer="adamw"), Parallel(gpus=2, tp=2, sequence_parallel=True))
    phases = {"forward": 1.0, "backward": 1.0}  # compute enough to hide whatever can be hidden
    torch_async = comm.step_time(t, phases, "ddp", 1, link, 2, tp_overlap=True, tp_overlap_sums=False)
    megatron_async = comm.step_time(t, phases, "ddp", 1, link, 2, tp_overlap=True)
    size = 2 * 64 * 128 * 2
    [rs] = [c for c in torch_async.collectives if c.what == "summed input gradients, not fused"]
    assert rs.calls == 4 and not rs.overlapped
    assert rs.time_s == pytest.approx(4 * comm.gather_s(size, 2, link))
    assert torch_async.exposed_s == pytest.approx(megatron_async.exposed_s + rs.time_s)
    assert not any("not fused" in c.what for c in megatron_async.collectives)
    # the rest of the backward's collectives: the same volume, less the unfused reduce-scatters
    total = {s.what: s.time_s for s in megatron_async.collectives}["column-parallel input gradients"]
    rest = {s.what: s.time_s for s in torch_async.collectives}["column-parallel input gradients"]
    assert rest == pytest.approx(total - rs.time_s)
