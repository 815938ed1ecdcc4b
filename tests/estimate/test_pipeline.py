"""Pipeline parallelism and gradient accumulation by hand on a tiny Llama (tests/configs/llama-tiny:
hidden 128, 4 heads of 32 with 2 key/value heads, MLP 344, vocab 1000, 2 layers): the bubble and the
micro-batches in flight of each schedule, the stages' split of the parameters, the step's parts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torch_footprint import api
from torch_footprint.analysis.memory import replay
from torch_footprint.estimate.layouts.pipeline import bubble_fraction, in_flight, split_blocks, stage_map
from torch_footprint.estimate.layouts.schedule import schedule_peak
from torch_footprint.estimate.workload import trace_step
from torch_footprint.settings import Parallel, Training, Workload

LLAMA = Path(__file__).resolve().parents[1] / "configs" / "llama-tiny"
IDS = {"input_ids": "2,64:int64"}
STEP = dict(train=True, optimizer="adamw", gpu=["h100-sxm"])
# per layer: q, o 128x128; k, v 128x64; gate, up, down 128x344; two norms of 128 = 181,504 parameters
LAYER = 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 344 + 2 * 128


def test_bubble_is_narayanans():
    # Narayanan et al. 2021, section 2.2: the bubble is (p-1)/m of the ideal time for 1F1B and GPipe,
    # (p-1)/(v m) interleaved; of the whole step (p-1)/(m+p-1) and ((p-1)/v)/(m+(p-1)/v)
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert bubble_fraction(4, 8, v=2) == pytest.approx(1.5 / 9.5)  # 3/16 of the ideal 8
    assert bubble_fraction(4, 8, v=2) / (1 - bubble_fraction(4, 8, v=2)) == pytest.approx(3 / 16)
    assert bubble_fraction(1, 8) == 0


def test_micro_batches_in_flight_per_schedule():
    # 1F1B over 4 ranks, 8 micro-batches: rank r runs 4-r-1 warm-up forwards and one more before its
    # first backward: 4, 3, 2, 1; never more than the micro-batches there are
    assert [in_flight("1f1b", 4, r, 8) for r in range(4)] == [4, 3, 2, 1]
    assert [in_flight("1f1b", 4, r, 2) for r in range(4)] == [2, 2, 2, 1]
    assert in_flight("gpipe", 4, 3, 8) == 8  # every forward before any backward
    # interleaved, 2 chunks a rank (Megatron-LM's warm-up: (p-r-1) x 2 + (v-1) x p chunk forwards, + 1):
    # rank 0 (3 x 2 + 4 + 1) = 11 chunks of half its layers = 5.5 micro-batches; rank 3 (0 + 4 + 1) = 2.5
    assert in_flight("interleaved-1f1b", 4, 0, 8, 2) == 5.5
    assert in_flight("interleaved-1f1b", 4, 3, 8, 2) == 2.5
    assert in_flight("interleaved-1f1b", 4, 0, 2, 2) == 2  # capped at m x v = 4 chunks


def _trace(config: Path = LLAMA):
    # gradients kept (they accumulate over the micro-batches), as fit traces a pipelined step
    return trace_step(Workload(str(config), IDS), Training(train=True, optimizer="adamw", grads="zero"))[0]


def test_stages_split_the_blocks_and_the_ends():
    sm = stage_map(_trace(), 2)
    mods = sm.modules
    # rank 0: the embedding (1000 x 128) and layer 0; rank 1: layer 1, the final norm and the head (1000 x 128)
    assert mods["model.embed_tokens"] == 0 and mods["model.layers.0.mlp"] == 0
    assert mods["model.layers.1.self_attn"] == 1 and mods["model.norm"] == 1 and mods["lm_head"] == 1
    t = _trace()
    per = [sum(q.numel for q in t.params if sm.rank(sm.chunk_of_module(q.module)) == r) for r in (0, 1)]
    assert per == [128_000 + LAYER, LAYER + 128 + 128_000]


def test_interleaved_chunks_go_round_the_ranks(tmp_path: Path):
    # 4 layers over 2 ranks x 2 chunks: chunk c on rank c mod 2, so rank 0 holds layers 0 and 2
    config = json.loads((LLAMA / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(dict(config, num_hidden_layers=4)))
    sm = stage_map(_trace(tmp_path), 2, 2)
    assert [sm.rank(sm.chunk_of_module(f"model.layers.{i}")) for i in range(4)] == [0, 1, 0, 1]


def test_a_stage_holds_its_share_and_its_micro_batches_in_flight():
    t = _trace()
    peak = replay(t, keep_timeline=True, steady=True)  # a later step: the optimizer state exists throughout
    states = sum(peak.persistent.values())
    staged, figures = schedule_peak(t, peak, states, pp=2, vpp=1, microbatches=4, schedule="1f1b")
    sm = stage_map(t, 2)
    acts = [sum(b for mod, b in peak.activations_by_module.items() if sm.rank(sm.chunk_of_module(mod)) == r)
            for r in (0, 1)]
    opt = max(h for h, e in zip(peak.highs[1:], t.events) if e.phase == "optimizer")
    assert sum(acts) > 0
    # torch.distributed.pipelining keeps a receive buffer per micro-batch for the stage boundary:
    # the activation [2, 64, 128] fp32 = 65,536 bytes into rank 1, its gradient back into rank 0; x 4
    assert figures[0]["receive buffers"] == figures[1]["receive buffers"] == 4 * 2 * 64 * 128 * 4
    # the logits [2, 64, 1000] fp32 (512,000 bytes) and their gradient live on the last rank only: rank 1's
    # operators hold more beyond their activations than rank 0's, by at least the logits
    assert figures[1]["transient"] - figures[0]["transient"] >= 2 * 64 * 1000 * 4
    # rank 0 holds 309,504 of the 619,136 parameters and 2 micro-batches in flight (p - 0); rank 1 309,632
    # and 1. Each needs the larger of its forward/backward moment (its states, its micro-batches' saved
    # activations, its own operators' transient, its receive buffers) and its share of the optimizer step's
    # live bytes with its buffers
    assert figures[0]["in_flight"] == 2 and figures[1]["in_flight"] == 1
    for r, (held, mine) in enumerate(((2, 309_504), (1, 309_632))):
        share = mine / 619_136
        f = figures[r]
        assert f["need"] == pytest.approx(max(states * share + held * acts[r] + f["transient"], opt * share)
                                          + f["receive buffers"], abs=1)
    assert staged.peak_bytes == max(f["need"] for f in figures)
    # a pipeline of one rank and one micro-batch is the step as traced
    whole, _ = schedule_peak(t, peak, states, pp=1, vpp=1, microbatches=1, schedule="1f1b")
    assert whole.peak_bytes == pytest.approx(peak.peak_bytes, abs=1)


def test_megatron_receives_into_fresh_tensors_per_micro_batch_in_flight():
    from torch_footprint.estimate.layouts.schedule import receive_buffers

    # Megatron-core's p2p_communication.py receives each boundary into a fresh torch.empty; a chunk keeps
    # its received input until that micro-batch's backward, a received gradient lives for one backward.
    # 1F1B over 2 ranks, 4 micro-batches, boundary B: rank 0 (2 in flight) receives no activation, one
    # gradient at a time: B; rank 1 (1 in flight) keeps 1 input and receives no gradient: B
    b = 65_536
    assert receive_buffers("megatron", 2, 1, 0, 4, 2.0, b) == b
    assert receive_buffers("megatron", 2, 1, 1, 4, 1.0, b) == b
    # torch.distributed.pipelining: one buffer per micro-batch per receiving chunk end: 4 B on each rank
    assert receive_buffers("torch", 2, 1, 0, 4, 2.0, b) == receive_buffers("torch", 2, 1, 1, 4, 1.0, b) == 4 * b
    # interleaved, 2 ranks x 2 chunks, 4 micro-batches: rank 0 holds chunks 0 and 2 and (2-0-1) x 2 + (2-1) x 2
    # + 1 = 5 chunk forwards = 2.5 in flight, of which chunk 2's receive: 2.5 B, + 1 gradient = 3.5 B; rank 1
    # (chunks 1 and 3) 3 chunk forwards = 1.5 in flight, both chunks receive: 3 B, + 1 gradient = 4 B
    assert in_flight("interleaved-1f1b", 2, 0, 4, 2) == 2.5 and in_flight("interleaved-1f1b", 2, 1, 4, 2) == 1.5
    assert receive_buffers("megatron", 2, 2, 0, 4, 2.5, b) == 3.5 * b
    assert receive_buffers("megatron", 2, 2, 1, 4, 1.5, b) == 4 * b
    # torch: rank 0's ends that receive: chunk 0's gradient, chunk 2's input and gradient = 3, x 4 micro-batches
    assert receive_buffers("torch", 2, 2, 0, 4, 2.5, b) == 12 * b


def test_fit_prices_the_framework_named(monkeypatch: pytest.MonkeyPatch):
    import torch_footprint.estimate.workload as workload

    # Megatron's fused kernels (tested in test_megatron_states.py) left out, and its loss (test_megatron_recompute.py:
    # the fp32 model's logits taken as they are on both): the receive buffers alone differ
    monkeypatch.setattr(workload, "fuse_like_megatron", lambda m: ([], lambda: None))
    base = dict(gpus=2, pp=2, grad_accum=4, loss="logits", **STEP)
    torch_row = api.fit(str(LLAMA), IDS, **base).rows[0]
    nemo_row = api.fit(str(LLAMA), IDS, framework="nemo", **base).rows[0]  # NeMo runs Megatron-core
    # [2, 64, 128] fp32 boundary = 65,536 B: torch keeps 4 on each rank, Megatron 1 (test above), so every
    # rank, the largest included, needs 3 boundaries less
    assert torch_row.need - nemo_row.need == 3 * 65_536
    with pytest.raises(Exception, match="unknown training framework 'deepspeed'"):
        api.fit(str(LLAMA), IDS, framework="deepspeed", **base)


def test_a_pipelined_step_by_hand():
    res = api.fit(str(LLAMA), IDS, gpus=2, pp=2, grad_accum=4, **STEP)
    step = res.rows[0].step
    assert step is not None and step.pipeline is not None
    assert step.pipeline["bubble_fraction"] == pytest.approx(1 / 5)  # (2-1)/(4+2-1)
    # 4 micro-batches of the slowest rank's forward and backward, and a bubble of (p-1) = 1 of them
    slowest = max(step.pipeline["rank_microbatch_s"])
    assert step.compute_s["micro-batches"] == pytest.approx(4 * slowest)
    assert step.compute_s["pipeline bubble"] == pytest.approx(slowest)
    # the boundary activation [2, 64, 128] fp32 = 65,536 B sent to the next rank inside the node (NVLink
    # 450 GB/s x 0.8): 65,536 / 360e9 s + a 0.6 us step + a 6.6 us call; the first micro-batch's forward and
    # the last one's gradient cross the 1 boundary: 2 sends exposed, no data parallelism to add
    send = 65_536 / 360e9 + 0.6e-6 + 6.6e-6
    assert step.exposed_s == pytest.approx(2 * send, rel=1e-9)


def test_a_schedule_run_per_local_batch_fills_and_drains_each_time():
    # --pp-microbatches 2 of --grad-accum 4: two runs of a 2-micro-batch schedule (torchtitan's and NeMo
    # AutoModel's gradient accumulation under a pipeline): a bubble of one micro-batch in each run, 2 in
    # all; each run's first forward and last gradient cross the boundary: 4 sends exposed; the torch
    # stage's receive buffers for 2 micro-batches, not 4: 2 x [2, 64, 128] fp32 a direction
    res = api.fit(str(LLAMA), IDS, gpus=2, pp=2, grad_accum=4, pp_microbatches=2, **STEP)
    one = api.fit(str(LLAMA), IDS, gpus=2, pp=2, grad_accum=4, **STEP)
    step, whole = res.rows[0].step, one.rows[0].step
    assert step is not None and step.pipeline is not None and whole is not None
    slowest = max(step.pipeline["rank_microbatch_s"])
    assert step.compute_s["micro-batches"] == pytest.approx(4 * slowest)
    assert step.compute_s["pipeline bubble"] == pytest.approx(2 * slowest)
    assert step.pipeline["bubble_fraction"] == pytest.approx(1 / 3)  # (2-1)/(2+2-1)
    assert step.exposed_s == pytest.approx(2 * whole.exposed_s, rel=1e-9)
    assert res.peak is not None and one.peak is not None
    buffers = "stage receive buffers"
    assert one.peak.breakdown[buffers] == 4 * 2 * 64 * 128 * 4
    assert res.peak.breakdown[buffers] == 2 * 2 * 64 * 128 * 4


def test_gradient_accumulation_repeats_the_micro_step_and_syncs_once():
    base = dict(gpus=2, **STEP)
    one = api.fit(str(LLAMA), IDS, grads="zero", **base).rows[0].step  # gradients kept, as from the 2nd micro-batch
    four = api.fit(str(LLAMA), IDS, grad_accum=4, **base).rows[0].step
    assert one is not None and four is not None
    # the compute of one micro-batch (its slowdown beside the hidden all-reduce apart: that is per step)
    micro = sum(v for k, v in one.compute_s.items() if k not in ("optimizer", "beside hidden collectives"))
    # 4 forwards and backwards, one optimizer step, DDP's all-reduce once (no_sync on the other three)
    assert four.compute_s["micro-batches"] == pytest.approx(4 * micro)
    assert four.compute_s["optimizer"] == pytest.approx(one.compute_s["optimizer"])
    assert four.exposed_s == pytest.approx(one.exposed_s)
    # FSDP gathers and reduce-scatters every micro-batch: 4 times one micro-batch's exposed collectives
    f1 = api.fit(str(LLAMA), IDS, grads="zero", strategy="fsdp", **base).rows[0].step
    f4 = api.fit(str(LLAMA), IDS, grad_accum=4, strategy="fsdp", **base).rows[0].step
    assert f1 is not None and f4 is not None
    assert f4.exposed_s == pytest.approx(4 * f1.exposed_s)


def test_each_pipeline_rank_gathers_its_own_blocks():
    # FSDP over 2 data-parallel ranks beside 2 pipeline ranks: rank 1's units are layer 1 (181,504 fp32
    # parameters = 726,016 B) and, outside the blocks, its final norm and head (128 + 128,000 = 128,128 x 4 B)
    from torch_footprint.estimate.layouts.schedule import _rank_trace
    from torch_footprint.estimate.layouts.sharding import root_bytes, wrap_units

    t = _trace()
    one = _rank_trace(t, stage_map(t, 2), 1)
    assert wrap_units(one) == {"model.layers.1": 4 * LAYER}
    assert root_bytes(one) == 4 * (128 + 128_000)


def test_predict_takes_the_layout_fit_takes():
    # the same step as fit's row: one rank's micro-batch by operator, the whole step beside it
    layout = dict(gpus=2, pp=2, grad_accum=4, train=True, optimizer="adamw")
    pred = api.predict(str(LLAMA), "h100-sxm", IDS, **layout)
    row = api.fit(str(LLAMA), IDS, gpu=["h100-sxm"], **layout).rows[0]
    assert pred.step is not None and row.step is not None
    assert pred.step.time_s == pytest.approx(row.step.time_s)
    assert pred.to_dict()["step"]["pipeline"]["microbatches"] == 4
    with pytest.raises(Exception, match="add --train"):
        api.predict(str(LLAMA), "h100-sxm", IDS, gpus=2)


def test_gpipe_keeps_every_micro_batchs_logits_on_the_last_rank():
    t = _trace()
    peak = replay(t, keep_timeline=True, steady=True)
    states = sum(peak.persistent.values())
    fig = {s: schedule_peak(t, peak, states, pp=2, vpp=1, microbatches=4, schedule=s)[1] for s in ("1f1b", "gpipe")}
    # the last stage holds, until each micro-batch's backward, its logits [2, 64, 1000] fp32 (512,000
    # bytes) and what its loss saved: the log-probabilities (512,000), the int64 targets (1,024) and
    # nll_loss's fp32 loss and total weight (4 + 4): GPipe all 4 (3 more than 1F1B's one); the first
    # rank never holds them (measured on 2 gloo ranks: benchmarks/results/distributed_cpu_pp.txt)
    assert fig["gpipe"][1]["transient"] - fig["1f1b"][1]["transient"] == 3 * (2 * 512_000 + 1_024 + 8)
    assert fig["gpipe"][0]["transient"] == fig["1f1b"][0]["transient"]
    assert fig["gpipe"][0]["in_flight"] == fig["gpipe"][1]["in_flight"] == 4
    # and every forward runs before the first backward: rank 0's 309,504 fp32 gradients (1,238,016 bytes,
    # set to None at the step's start) do not exist yet while its 4 micro-batches' activations do
    f = fig["gpipe"][0]
    assert f["need"] == pytest.approx(f["states"] + f["activations"] + f["transient"] + f["receive buffers"]
                                      - 309_504 * 4, abs=2)


def test_a_tied_head_gets_its_own_weight_on_the_last_stage():
    from torch_footprint.estimate.layouts.schedule import tied_head_bytes

    gpt2 = Path(__file__).resolve().parents[1] / "configs" / "gpt2-tiny"  # tie_word_embeddings: wte is the head
    t = _trace(gpt2)
    # the head's copy of the 1000 x 128 fp32 embedding on rank 1: 512,000 bytes; the untied Llama has none
    assert tied_head_bytes(t, stage_map(t, 2)) == 1000 * 128 * 4
    assert tied_head_bytes(_trace(), stage_map(_trace(), 2)) == 0
    peak = replay(t, keep_timeline=True, steady=True)
    states = sum(peak.persistent.values())
    _, figures = schedule_peak(t, peak, states, pp=2, vpp=1, microbatches=4, schedule="1f1b")
    weights = sum(q.nbytes for q in t.params)
    # rank 1's states: its own parameters and the copy, with their gradients and Adam's two moments
    mine = sum(q.nbytes for q in t.params if q.module.startswith(("transformer.h.1", "transformer.ln_f")))
    assert figures[1]["states"] == pytest.approx(states * (mine + 512_000) / weights, abs=1)


def test_torchtitans_split_weighs_the_embedding_and_the_head():
    # torchtitan's generate_llm_fqn_per_model_part, worked by hand: Llama-3.1-405B's 126 layers over
    # 8 stages with the embedding and the head as one layer each: 128 effective, 16 a stage, so the
    # first and last stages hold 15 layers; 32 layers over 8: 34 effective, 4 a stage and 2 over for
    # the first two stages: 5 - 1 = 4, 5, then 4s, and 4 - 1 = 3 on the last
    assert split_blocks(126, 8, (1, 1)) == [15, 16, 16, 16, 16, 16, 16, 15]
    assert split_blocks(32, 8, (1, 1)) == [4, 5, 4, 4, 4, 4, 4, 3]
    assert split_blocks(80, 8) == [10] * 8  # even (Megatron-LM's): must divide
    with pytest.raises(Exception, match="do not divide the model's 126 blocks"):
        split_blocks(126, 8)
    with pytest.raises(Exception, match="leaves a stage empty or over-weighted"):
        split_blocks(2, 2, (4, 1))  # 7 effective, 3 a stage: the embedding alone outweighs a stage


def test_an_uneven_split_puts_each_block_on_its_stage(tmp_path: Path):
    # 3 layers over 2 stages, torchtitan's weights 1 and 1: 5 effective, 2 a stage, one over for the
    # first: layers 0 and 1 with the embedding, layer 2 with the norm and the head
    config = json.loads((LLAMA / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(dict(config, num_hidden_layers=3)))
    p = Parallel(gpus=2, pp=2, pp_first_stage_less_layers=1, pp_last_stage_less_layers=1)
    t = trace_step(Workload(str(tmp_path), IDS), Training(train=True, optimizer="adamw", grads="zero"), p)[0]
    sm = stage_map(t, 2)
    assert [sm.chunk_of_module(f"model.layers.{i}") for i in range(3)] == [0, 0, 1]
    per = [sum(q.numel for q in t.params if sm.rank(sm.chunk_of_module(q.module)) == r) for r in (0, 1)]
    assert per == [128_000 + 2 * LAYER, LAYER + 128 + 128_000]


def test_a_pipelines_fsdp_keeps_its_parameters_gathered_and_gradients_whole():
    # FSDP2 in a pipeline holds every parameter gathered and its gradient unsharded through the step:
    # 2 x 4 bytes x (2 layers + the final norm + the embedding and the head, 1000 x 128 each) in fp32,
    # each pipeline rank its share: rank 0 the embedding and layer 0, rank 1 layer 1, the norm, the head
    from torch_footprint.estimate.layouts.sharding import pipeline_gathered, step_peak

    t = _trace()
    numel = 2 * LAYER + 128 + 2 * 128_000
    assert pipeline_gathered(t, "fsdp") == 2 * 4 * numel and pipeline_gathered(t, "zero1") == 0
    peak = step_peak(t, "fsdp", 2)
    _, figures = schedule_peak(t, peak, 0, pp=2, vpp=1, microbatches=2, schedule="1f1b",
                               kept=pipeline_gathered(t, "fsdp"))
    assert [f["gathered"] for f in figures] == [8 * (128_000 + LAYER), 8 * (LAYER + 128 + 128_000)]
