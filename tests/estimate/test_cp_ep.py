"""Context parallelism (ring attention) and expert parallelism (all-to-all dispatch and combine) by
hand: a tiny Llama (tests/configs/llama-tiny: hidden 128, 4 heads of 32 with 2 key/value heads, 2
layers) and a tiny Mixtral (hidden 64, 4 experts, top 2, 2 layers), one rank's communication
volumes and memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torch_footprint import api
from torch_footprint.estimate.layouts.comm import link_of
from torch_footprint.estimate.layouts.cp_ep import alltoall_s, kv_block_bytes, p2p_s
from torch_footprint.estimate.workload import trace_step
from torch_footprint.hardware import get
from torch_footprint.settings import Parallel, Training, Workload

transformers = pytest.importorskip("transformers")

LLAMA = Path(__file__).resolve().parents[1] / "configs" / "llama-tiny"
STEP = dict(train=True, optimizer="adamw", gpu=["h100-sxm"])


def test_context_parallel_rank_holds_its_share_of_the_sequence():
    t, notes = trace_step(Workload(str(LLAMA), {"input_ids": "2,64:int64"}), Training(train=True),
                          Parallel(gpus=2, cp=2))
    assert t.inputs[0]["shape"] == [2, 32] and any("context parallel over 2" in n for n in notes)
    # each layer's local key and value blocks: batch 2 x 2 kv heads x 32 positions x (32 + 32) x 4 B (fp32)
    assert kv_block_bytes(t) == [2 * 2 * 32 * 64 * 4] * 2 == [32_768, 32_768]


def test_ring_attention_by_hand():
    res = api.fit(str(LLAMA), {"input_ids": "2,64:int64"}, gpus=2, cp=2, **STEP)
    [row] = res.rows
    assert row.step is not None and res.peak is not None
    ring = {c.phase: c for c in row.step.collectives if c.op == "send/recv"}
    # cp - 1 = 1 hop per layer: 2 layers x 32,768 B forward; the backward passes K, V and dK, dV: twice
    assert ring["forward"].nbytes == 65_536 and ring["forward"].calls == 2
    assert ring["backward"].nbytes == 131_072
    # two ranks inside an H100 node: each hop at NVLink's rate, behind one block of attention or not
    link = link_of(get("h100-sxm"), ranks=2)
    assert link is not None
    assert ring["forward"].time_s == pytest.approx(2 * p2p_s(32_768, link))
    # the arriving block beside the one computed with: 2 x 32,768 B more at the peak
    assert res.peak.breakdown["key/value ring buffers"] == 65_536
    # each rank's attention runs once per block, cp = 2 times the traced seq/cp call's
    att = sum(o.device_s for o in row.prediction.ops if "scaled_dot_product" in o.op) if row.prediction else 0
    assert att > 0 and row.step.compute_s["context-parallel attention"] == pytest.approx(att)


def test_ring_attention_in_a_pipeline_runs_on_each_stage_and_in_the_bubble(monkeypatch):
    """Under pipeline parallelism each rank runs the ring over its own stage's layers, once per
    micro-batch, and the bubble (p - 1 of the slowest rank's micro-batch) carries it too."""
    from torch_footprint.estimate.layouts import schedule

    args = (str(LLAMA), {"input_ids": "4,64:int64"})
    kw = dict(gpus=4, cp=2, pp=2, grad_accum=4, **STEP)
    [row] = api.fit(*args, **kw).rows
    monkeypatch.setattr(schedule, "ring_prediction", lambda pred, cp: pred)  # the traced seq/cp call only
    [alone] = api.fit(*args, **kw).rows
    assert row.step is not None and alone.step is not None and row.prediction is not None
    # two layers over two ranks: rank r runs layer r's attention, cp - 1 = 1 more block of it
    for r in (0, 1):
        att = sum(o.device_s for o in row.prediction.ops
                  if "scaled_dot_product" in o.op and o.module.startswith(f"model.layers.{r}."))
        assert att > 0
        assert row.step.pipeline["rank_microbatch_s"][r] == pytest.approx(alone.step.pipeline["rank_microbatch_s"][r]
                                                                          + att)
    slowest = max(row.step.pipeline["rank_microbatch_s"])
    assert row.step.compute_s["micro-batches"] == pytest.approx(4 * slowest)
    assert row.step.compute_s["pipeline bubble"] == pytest.approx((2 - 1) * slowest)
    assert "context-parallel attention" not in row.step.compute_s  # inside the two above, not a third time


def _mixtral() -> torch.nn.Module:
    cfg = transformers.MixtralConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2, max_position_embeddings=64)
    with torch.device("meta"):
        return transformers.MixtralForCausalLM(cfg)


def test_expert_parallel_rank_accumulates_only_its_own_experts_gradients(monkeypatch):
    """Over 2 micro-batches each rank adds each micro-batch's weight gradients into the step's: under
    expert parallelism 2 only its own half of the experts' (4 experts, 2 on each rank)."""
    from torch_footprint.estimate.layouts import schedule

    model = _mixtral()
    kw = dict(gpus=2, ep=2, grad_accum=2, **STEP)
    [row] = api.fit(model, {"input_ids": "2,16:int64"}, **kw).rows
    monkeypatch.setattr(schedule, "expert_prediction", lambda trace, pred, ep: pred)  # every expert's
    [every] = api.fit(model, {"input_ids": "2,16:int64"}, **kw).rows
    assert row.step is not None and every.step is not None and row.prediction is not None
    # the accumulation: an in-place add in the backward of each expert weight's shape, [4, 192, 64] and [4, 64, 96]
    adds = [o for o in row.prediction.ops if o.phase == "backward" and o.op.startswith("aten.add_")
            and o.module.endswith("mlp.experts") and o.flops in (4 * 192 * 64, 4 * 64 * 96)]
    assert len(adds) == 2 * 2  # two layers, two weights each
    half = sum(o.device_s for o in adds) / 2
    assert every.step.compute_s["micro-batches"] - row.step.compute_s["micro-batches"] == pytest.approx(2 * half)


def test_expert_parallel_all_to_alls_of_a_pipeline_stage_by_hand():
    """Two layers over two pipeline ranks: each rank dispatches and combines for its own layer, each of
    4 micro-batches, and the bubble's one slot waits for one micro-batch's all-to-alls too."""
    res = api.fit(_mixtral(), {"input_ids": "2,16:int64"}, gpus=4, ep=2, pp=2, grad_accum=4, **STEP)
    [row] = res.rows
    assert row.step is not None and row.step.pipeline is not None
    a2a = {c.phase: c for c in row.step.collectives if c.op == "all-to-all"}
    # 32 tokens x top 2 x hidden 64 x 4 B = 16,384 B each way, 1 layer, 4 micro-batches
    assert a2a["forward"].calls == 2 * 1 * 4 and a2a["forward"].nbytes == 2 * 16_384 * 4
    link = link_of(get("h100-sxm"), ranks=2)
    assert link is not None
    one = alltoall_s(16_384, 2, link)
    assert row.step.exposed_s >= 4 * 4 * one  # dispatch and combine, forward and backward, each micro-batch
    slowest = max(row.step.pipeline["rank_microbatch_s"])
    assert row.step.compute_s["pipeline bubble"] == pytest.approx((2 - 1) * (slowest + 4 * one))


def test_a_model_held_in_bf16_dispatches_bf16_hidden_states():
    res = api.fit(_mixtral().to(torch.bfloat16), {"input_ids": "2,16:int64"}, gpus=2, ep=2, precision="bf16", **STEP)
    [row] = res.rows
    assert row.step is not None
    a2a = {c.phase: c for c in row.step.collectives if c.op == "all-to-all"}
    # per layer: 32 tokens x top 2 x hidden 64 x 2 B (bf16) = 8,192 B dispatched and as much combined; 2 layers
    assert a2a["forward"].nbytes == 2 * 2 * 8_192


def test_expert_parallel_dispatch_and_combine_by_hand():
    model = _mixtral()
    ids = {"input_ids": "2,16:int64"}
    one = api.fit(model, ids, gpus=2, **STEP)
    res = api.fit(model, ids, gpus=2, ep=2, **STEP)
    [row] = res.rows
    assert row.step is not None
    a2a = {c.phase: c for c in row.step.collectives if c.op == "all-to-all"}
    # per layer: 32 tokens x top 2 x hidden 64 x 4 B = 16,384 B dispatched and as much combined; 2 layers
    assert a2a["forward"].nbytes == 2 * 2 * 16_384 and a2a["forward"].calls == 4
    assert a2a["backward"].nbytes == 65_536
    link = link_of(get("h100-sxm"), ranks=2)
    assert link is not None  # half of each leaves the rank
    assert a2a["forward"].time_s == pytest.approx(4 * alltoall_s(16_384, 2, link))
    assert alltoall_s(16_384, 2, link) == pytest.approx(8_192 / link.bandwidth + link.latency + link.base)
    # ddp: each rank holds 2 of the 4 experts: half the experts' weights, gradients and Adam state
    experts = 2 * 4 * 3 * 64 * 96 * 4  # 2 layers x 4 experts x gate, up, down of 64 x 96, fp32
    total = sum(p.numel() for p in model.parameters()) * 4
    assert one.peak is not None and res.peak is not None
    for cat in ("weights", "gradients", "optimizer state"):
        held = one.peak.breakdown[cat]
        assert res.peak.breakdown[cat] == pytest.approx(held - held * experts / total / 2, abs=2)


def test_expert_parallel_states_under_a_pipeline():
    model = _mixtral()
    ids = {"input_ids": "2,16:int64"}
    one = api.fit(model, ids, gpus=4, pp=2, grad_accum=2, **STEP)
    res = api.fit(model, ids, gpus=4, pp=2, ep=2, grad_accum=2, **STEP)
    assert one.states is not None and res.states is not None
    experts = 2 * 4 * 3 * 64 * 96 * 4  # as above: half of them on the other expert-parallel rank
    total = sum(p.numel() for p in model.parameters()) * 4
    for cat in ("weights", "gradients", "optimizer"):
        held = getattr(one.states, cat)
        assert getattr(res.states, cat) == pytest.approx(held * (1 - experts / total / 2), abs=2)
    # the largest pipeline rank holds less by its share of the experts now on the other rank
    assert one.peak is not None and res.peak is not None and res.peak.peak_bytes < one.peak.peak_bytes


def test_fsdp_in_a_pipeline_gathers_only_the_ranks_own_experts():
    model = _mixtral()
    ids = {"input_ids": "2,16:int64"}
    layout = dict(gpus=8, pp=2, grad_accum=2, strategy="fsdp", **STEP)
    one = api.fit(model, ids, **layout)
    res = api.fit(model, ids, ep=2, **layout)
    key = "parameters gathered, gradients whole (FSDP in a pipeline)"
    assert one.peak is not None and res.peak is not None
    # every parameter gathered and its gradient whole: twice the fp32 parameters; with ep 2 the other
    # rank's half of the experts (2 layers x 4 experts x 3 matrices of 64 x 96, fp32) neither
    experts = 2 * 4 * 3 * 64 * 96 * 4
    total = sum(p.numel() for p in model.parameters()) * 4
    assert one.peak.breakdown[key] > 0
    assert res.peak.breakdown[key] == pytest.approx(one.peak.breakdown[key] * (2 * total - experts) / (2 * total),
                                                    abs=2)


def test_expert_parallel_folded_over_the_tensor_parallel_ranks_by_hand():
    """Two GPUs, --tp 2 --ep 2: one data-parallel rank, so the experts' group is the tensor-parallel
    pair (Megatron-core's MoE parallel folding); under sequence parallelism each rank dispatches its
    half of the tokens."""
    model = _mixtral()
    ids = {"input_ids": "2,16:int64"}
    one = api.fit(model, ids, gpus=2, tp=2, sequence_parallel=True, **STEP)
    res = api.fit(model, ids, gpus=2, tp=2, sequence_parallel=True, ep=2, **STEP)
    [row] = res.rows
    assert row.step is not None
    a2a = {c.phase: c for c in row.step.collectives if c.op == "all-to-all"}
    # per layer: 32 tokens / tp 2 = 16 a rank x top 2 x hidden 64 x 4 B = 8,192 B dispatched and as much combined
    assert a2a["forward"].nbytes == 2 * 2 * 8_192 and a2a["forward"].calls == 4
    link = link_of(get("h100-sxm"), ranks=2)  # the pair inside one node
    assert link is not None and a2a["forward"].time_s == pytest.approx(4 * alltoall_s(8_192, 2, link))
    # each rank holds 2 of the 4 experts, whole: half the experts' gradients (2 layers x 4 experts x gate, up,
    # down of 64 x 96, fp32) fewer; the attention's linears are split by tp, the experts are not
    experts = 2 * 4 * 3 * 64 * 96 * 4
    total = sum(p.numel() for p in model.parameters()) * 4
    assert one.peak is not None and res.peak is not None
    held = one.peak.breakdown["gradients"]
    assert experts < held < total
    assert res.peak.breakdown["gradients"] == pytest.approx(held - experts / 2, abs=2)


def test_expert_parallel_all_to_alls_overlapped_with_other_micro_batches():
    """--overlap-moe-expert-parallel-comm: the all-to-alls of two micro-batches (4 a layer, 2 layers, each
    of 16,384 B as above) run beside the step's compute; exposed only where they outlast it."""
    model = _mixtral()
    ids = {"input_ids": "2,16:int64"}
    plain = api.fit(model, ids, gpus=2, ep=2, grad_accum=2, **STEP)
    over = api.fit(model, ids, gpus=2, ep=2, grad_accum=2, overlap_moe_expert_parallel_comm=True, **STEP)
    [a], [b] = plain.rows, over.rows
    assert a.step is not None and b.step is not None
    link = link_of(get("h100-sxm"), ranks=2)
    assert link is not None
    a2a = 2 * 2 * 4 * alltoall_s(16_384, 2, link)  # two micro-batches x (forward, backward) x 4 calls
    assert sum(c.time_s for c in b.step.collectives if c.op == "all-to-all") == pytest.approx(a2a)
    assert all(c.overlapped for c in b.step.collectives if c.op == "all-to-all")
    compute = sum(v for k, v in b.step.compute_s.items() if k != "pipeline bubble")
    assert b.step.exposed_s == pytest.approx(a.step.exposed_s - a2a + max(0.0, a2a - compute))
    assert b.step.time_s < a.step.time_s


def test_fsdp_gathers_and_reduces_only_the_ranks_own_experts():
    """FSDP over 2 GPUs at --ep 2, gradients not kept between steps: a layer's gathered parameters and
    its reduce-scatter input hold only the rank's 2 of the 4 experts (each 3 matrices of 64 x 96,
    fp32), and the root's embedding and head stay whole."""
    from torch_footprint.estimate.layouts.sharding import fsdp_moments

    model = _mixtral()
    w = Workload(model, {"input_ids": "2,16:int64"})
    t = Training(train=True, optimizer="adamw")

    def moments(ep: int) -> dict[str, list[int]]:
        trace, _ = trace_step(w, t, Parallel(gpus=2, strategy="fsdp", ep=ep))
        out: dict[str, list[int]] = {}
        for m in fsdp_moments(trace, "fsdp", 2):
            if m.hold > 0:
                out.setdefault(m.what, []).append(m.hold)
        return out

    one, two = moments(1), moments(2)
    half = 4 * 3 * 64 * 96 * 4 // 2  # the other rank's experts of one layer, fp32
    root = 2 * 128 * 64 * 4  # embedding and head, 128 x 64 each, fp32
    # the root first (whole either way), then each layer's forward and backward gathers
    assert one["gathered parameters"][0] == two["gathered parameters"][0] == root + 64 * 4  # and the final norm
    assert [a - b for a, b in zip(one["gathered parameters"][1:], two["gathered parameters"][1:], strict=True)] \
        == [half] * 4
    # the first layer reduced in the backward (the last one): its gradients, less the other rank's experts'
    assert one["reduce-scatter input"][0] - two["reduce-scatter input"][0] == half


@pytest.mark.parametrize("strategy", ["fsdp", "ddp"])
def test_data_parallel_collectives_carry_only_the_ranks_own_experts(strategy: str) -> None:
    """FSDP's all-gathers and reduce-scatters, DDP's gradient all-reduce, at --ep 2 over 4 GPUs: a rank
    holds 2 of each layer's 4 experts (3 matrices of 64 x 96, fp32), so the collectives carry half the
    experts' bytes less than at --ep 1; the rest of the model (embedding, head, attention, norms, routers)
    is the same."""
    model = _mixtral()
    ids = {"input_ids": "2,16:int64"}
    layout = dict(gpus=4, strategy=strategy, **STEP)
    one, two = (api.fit(model, ids, ep=ep, **layout).rows[0].step for ep in (1, 2))
    assert one is not None and two is not None
    total = sum(p.numel() for p in model.parameters()) * 4
    half = 2 * 4 * 3 * 64 * 96 * 4 // 2  # the other rank's experts, 2 layers, fp32
    data = [(a, b) for a, b in zip(one.collectives, two.collectives, strict=False)
            if a.op in ("all-gather", "reduce-scatter", "all-reduce")]
    assert len(data) == (3 if strategy == "fsdp" else 1)
    for a, b in data:
        assert (a.what, a.nbytes, b.nbytes) == (b.what, total, total - half)


def test_an_all_to_all_across_nodes_runs_at_each_gpus_share_of_its_nodes_nics():
    from torch_footprint.estimate.layouts.comm import alltoall_link
    from torch_footprint.hardware.networks import network_for

    acc, ndr = get("b200"), network_for("ib-ndr", None, None, 8)  # 8 x 400 Gb/s per node of 8 GPUs
    # 64 ranks on 8 nodes: 56 of every 64 bytes leave the node, through the GPU's own 50 GB/s (x 0.8)
    link = alltoall_link(acc, ranks=64, per_node=8, network=ndr)
    assert alltoall_s(64e6, 64, link) == pytest.approx(56e6 / 40e9 + 63 * link.latency + link.base)
    # a ring over the same ranks leaves a node through all 8 NICs: an all-to-all's bytes cannot
    assert link_of(acc, ranks=64, per_node=8, network=ndr).bandwidth == 320e9
    # inside a node: the GPUs' own link, as a ring's
    assert alltoall_link(acc, ranks=8, per_node=8, network=ndr) == link_of(acc, ranks=8, per_node=8, network=ndr)


def test_deepep_sends_a_token_to_each_other_node_once():
    from math import comb

    from torch_footprint.estimate.layouts.cp_ep import deepep_share

    # gpt-oss-120b's 128 experts, top 4, over 8 nodes of 16: a node holds none of a token's 4 with
    # probability C(112, 4) / C(128, 4); the distinct nodes over 4 copies
    expected = 8 * (1 - comb(112, 4) / comb(128, 4)) / 4
    assert deepep_share({"top_k": 4, "experts": 128, "hidden": 1}, 64, 8) == pytest.approx(expected)
    assert expected == pytest.approx(0.8356, abs=1e-4)  # 1 - 149,059,680 / 256,032,000, x 8 / 4
    # DeepSeek-V3: 256 experts, top 8, at most 4 of its 8 groups (one a node here): 4 nodes of 8 copies
    v3 = {"top_k": 8, "experts": 256, "n_group": 8, "topk_group": 4, "hidden": 1}
    assert deepep_share(v3, 64, 8) == 0.5
    assert deepep_share(v3, 8, 8) == 1.0  # one node: nothing crosses
    # DeepEP's kernels at the NICs' whole 50 GB/s (its README: 51 GB/s at EP 64), half the bytes crossing
    from torch_footprint.estimate.layouts.comm import alltoall_link
    from torch_footprint.hardware.networks import network_for

    link = alltoall_link(get("h100-sxm"), ranks=64, per_node=8, network=network_for("ib-ndr", None, None, 8),
                         remote_share=0.5, nic_efficiency=1.0)
    assert alltoall_s(64e6, 64, link) == pytest.approx(56e6 * 0.5 / 50e9 + 63 * link.latency + link.base)
    # the tiny Mixtral's 4 experts, top 2, over 2 nodes of 2 GPUs: 2 x (1 - C(2, 2) / C(4, 2)) / 2 = 5/6
    res = api.fit(_mixtral(), {"input_ids": "2,16:int64"}, gpus=4, ep=4, moe_dispatcher="deepep",
                  gpus_per_node=2, network="ib-ndr", **STEP)
    assert any("DeepEP: a token crosses to another node once, 83%" in n for n in res.rows[0].step.notes)
