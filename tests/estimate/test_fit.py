"""fit: memory per rank under DDP / ZeRO / FSDP worked by hand, largest batch, the pick."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torch_footprint as tfp
from torch_footprint.analysis.memory import MemoryPeak
from torch_footprint.cli import main
from torch_footprint.estimate.batch import Scaling, extrapolate
from torch_footprint.estimate.layouts import sharding
from torch_footprint.estimate.workload import trace_step
from torch_footprint.settings import Training, Workload

SOC = """
[[accelerator]]
id = "{id}"
name = "{id}"
vendor = "test"
kind = "soc"
memory_gb = {mem}
bandwidth_gbs = 100
tdp_w = {tdp}
tflops = {{ fp32 = {tflops} }}
source = "https://example.com/{id}"
"""


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(100, 50), nn.ReLU(), nn.Linear(50, 10))


# Psi = 100x50 + 50 + 50x10 + 10 = 5,560 parameters in fp32:
#   W = 4 Psi = 22,240 bytes, G = 22,240, Adam state OPT = 8 Psi + 4 step tensors x 4 bytes = 44,496
W, G, OPT = 22_240, 22_240, 44_496


def _adam_trace(batch: int = 4):
    return trace_step(Workload(mlp(), ["4,100"], batch=batch), Training(train=True, optimizer="adam"))[0]


def test_whole_model_states_equal_the_closed_form():
    from torch_footprint.analysis.memory import replay

    p = replay(_adam_trace()).persistent
    assert (p["weights"], p["gradients"], p["optimizer state"]) == (W, G, OPT)


@pytest.mark.parametrize("strategy, expected", [
    # ZeRO paper, figure 1, with N = 4 ranks, as torch runs the stages:
    ("ddp", W + G + OPT + G),            # + DDP's bucket copy of the gradients
    ("zero1", W + G + OPT // 4 + G),     # optimizer state sharded: 44,496 / 4 = 11,124; DDP's buckets stay
    # FSDP2 without resharding after forward: everything sharded at rest, all of W gathered in fwd/bwd
    ("zero2", W // 4 + G // 4 + OPT // 4 + W),
    # + parameters; gathered: units "0" (20,200) + "2" (2,040), the root owns none = 22,240 = W here
    ("zero3", W // 4 + G // 4 + OPT // 4 + 20_200 + 2_040),
    ("fsdp", W // 4 + G // 4 + OPT // 4 + 20_200 + 2_040),
])
def test_model_states_per_rank_by_hand(strategy, expected):
    from torch_footprint.analysis.memory import replay

    t = _adam_trace()
    assert sorted(sharding.wrap_units(t).values(), reverse=True)[:2] == [20_200, 2_040]
    assert sharding.root_bytes(t) == 0
    st = sharding.model_states(replay(t).persistent, strategy, 4, sharding.gather_bytes(t, strategy))
    assert st.total == expected


def test_rank_peak_replays_sharded_storages():
    t = _adam_trace(batch=1)  # tiny activations: the peak is in the optimizer step
    single = sharding.rank_peak(t).peak_bytes
    assert sharding.rank_peak(t).phase == "optimizer"
    # DDP adds the bucket copy of the gradients, alive throughout: the peak moves by exactly G
    assert sharding.rank_peak(t, "ddp", 4).peak_bytes == single + G
    # ZeRO-1: each rank holds a quarter of the optimizer state and steps over that quarter only,
    # so the step's temporaries (Adam's denominator of the largest tensor) are a quarter too
    z1 = sharding.rank_peak(t, "zero1", 4).peak_bytes
    inputs = 1 * 100 * 4
    temps = single - (W + G + OPT + inputs)
    # the square root of the 100x50 exp_avg_sq and its division by a Python float, which the
    # call holds as a 0-dim float64 tensor (8 bytes) cast to float32 (4)
    denominator, scalar = 2 * 100 * 50 * 4, 8 + 4
    assert temps == denominator + scalar
    assert z1 == W + G + G + inputs + (OPT + denominator) // 4 + scalar  # G again: DDP's buckets stay
    assert sharding.rank_peak(t, "zero3", 4).peak_bytes <= z1 + W  # everything sharded, plus two gathered units


def test_fsdp2_buffers_between_operators_by_hand():
    # FSDP2 on the mlp: units "0" (W0 = 100x50x4 + 50x4 = 20,200 bytes) and "2" (W2 = 50x10x4 + 10x4
    # = 2,040), the root owns none; gradients the same sizes; N = 4 ranks, traced on the CPU (gloo).
    from torch_footprint.analysis.memory import Moment

    t = _adam_trace()
    ev = t.events
    first = {(u, ph): min(i for i, e in enumerate(ev) if e.module == u and e.phase == ph)
             for u in ("0", "2") for ph in ("forward", "backward")}
    last = {(u, ph): max(i for i, e in enumerate(ev) if e.module == u and e.phase == ph)
            for u in ("0", "2") for ph in ("forward", "backward")}
    end_bwd = max(i for i, e in enumerate(ev) if e.phase == "backward")
    moments = sharding.fsdp_moments(t, "fsdp", 4)
    gathers = [(m.before, m.hold, m.spike) for m in moments if m.what == "gathered parameters"]
    # all-gather: W_u gathered, W_u more for a moment (the flat output beside the copied-out parameters)
    assert sorted(gathers) == sorted([
        (first["0", "forward"], 20_200, 20_200), (last["0", "forward"] + 1, -20_200, 0),
        (first["2", "forward"], 2_040, 2_040), (last["2", "forward"] + 1, -2_040, 0),
        # backward order: "2" first, gathered at its start; "0" prefetched when "2" starts
        (first["2", "backward"], 2_040, 2_040), (last["2", "backward"] + 1, -2_040, 0),
        (first["2", "backward"], 20_200, 20_200), (last["0", "backward"] + 1, -20_200, 0)])
    reduces = [m for m in moments if m.what == "reduce-scatter input"]
    # "2": input G2 kept, gradients to G2/4 (2,000/4 + 40/4 = 510), gloo's clone of the input a moment;
    # "0": the previous input freed, G0 kept, gradients to G0/4 = 5,050; the final callback frees it
    assert [(m.before, m.hold, sum(m.resize.values()), m.spike) for m in reduces] == [
        (last["2", "backward"] + 1, 2_040, 510, 2_040), (last["0", "backward"] + 1, 20_200 - 2_040, 5_050, 20_200),
        (end_bwd + 1, -20_200, 0, 0)]
    assert sum(m.hold for m in moments) == 0
    # zero2 keeps each unit gathered from its forward to its post-backward, gathered once
    z2 = [(m.before, m.hold) for m in sharding.fsdp_moments(t, "zero2", 4) if m.what == "gathered parameters"]
    assert sorted(z2) == sorted([(first["0", "forward"], 20_200), (last["0", "backward"] + 1, -20_200),
                                 (first["2", "forward"], 2_040), (last["2", "backward"] + 1, -2_040)])
    # after the step each rank holds a quarter of the gradients (the reduce-scatters' outputs)
    assert sharding.rank_peak(t, "fsdp", 4).persistent["gradients"] == G // 4
    assert isinstance(moments[0], Moment)


def test_a_moment_spikes_holds_and_resizes():
    from torch_footprint.analysis.memory import Moment, replay

    t = _adam_trace()
    plain = replay(t, keep_timeline=True)
    base = plain.peak_bytes
    # a spike before event 1, larger than anything in the step: the peak is what lived after event 0, plus it
    p = replay(t, moments=[Moment(1, spike=10**9)])
    assert p.peak_bytes == plain.timeline[0][1] + 10**9 and p.event == 0
    assert p.breakdown["collective buffers"] == 10**9
    # bytes held over the whole step move the peak by exactly that much
    held = replay(t, moments=[Moment(0, "gathered parameters", hold=1_000), Moment(len(t.events), hold=-1_000)])
    assert held.peak_bytes == base + 1_000 and held.breakdown["gathered parameters"] == 1_000


def test_bucket_view_removes_the_copy():
    t = _adam_trace()
    assert sharding.rank_peak(t, "ddp", 4, bucket_view=True).peak_bytes == sharding.rank_peak(t).peak_bytes


def test_largest_batch_from_two_traces_by_hand():
    # live bytes at three points, at batch 1 and 2: slopes 0, 20, 5 bytes per sample.
    # room 100: point 2 allows 1 + (100 - 30) / 20 = 4.5, point 3 1 + (100 - 20) / 5 = 17 -> 4
    p1 = MemoryPeak(30, 10, 0, "", "", "", {}, highs=[10, 30, 20])
    p2 = MemoryPeak(50, 10, 0, "", "", "", {}, highs=[10, 50, 25])
    scaling = Scaling({1: p1, 2: p2}, (1, 2))
    assert scaling.largest(100) == 4
    assert scaling.peak_at(4) == 90
    flat = MemoryPeak(30, 10, 0, "", "", "", {}, highs=[10, 30])
    assert Scaling({1: flat, 2: flat}, (1, 2)).largest(100) is None


def test_extrapolated_trace_equals_the_traced_one():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 30 * 30, 10))
    t2, t4, t9 = (trace_step(Workload(model, ["2,3,32,32"], batch=b))[0] for b in (2, 4, 9))
    x9 = extrapolate(t2, t4, 2, 4, 9)
    assert x9 is not None
    for a, b in zip(x9.events, t9.events, strict=True):
        assert (a.op, a.flops, a.macs, a.bytes_read, a.bytes_written) == \
            (b.op, b.flops, b.macs, b.bytes_read, b.bytes_written)


def test_largest_batch_checked_against_real_traces(tmp_path):
    f = tmp_path / "small.toml"
    f.write_text(SOC.format(id="small", mem=0.05, tdp=10, tflops=1.0))  # 51.2 MiB, 80% usable
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1))
    res = tfp.fit(model, "1,3,64,64", batch=2, hardware=str(f), gpu=["small"])
    [row] = res.rows
    lb = row.largest_batch
    room = 0.05 * 2**30 * 0.8
    assert lb and lb > 2
    assert tfp.memory(model, "1,3,64,64", batch=lb).peak.peak_bytes <= room
    assert tfp.memory(model, "1,3,64,64", batch=lb + 1).peak.peak_bytes > room


def test_tiny_budget_says_nothing_fits_and_why(tmp_path, capsys):
    f = tmp_path / "tiny.toml"
    f.write_text(SOC.format(id="tiny-a", mem=0.0001, tdp=5, tflops=1.0) +
                 SOC.format(id="tiny-b", mem=0.0002, tdp=5, tflops=1.0))
    res = tfp.fit("resnet18", batch=1, hardware=str(f), gpu=["tiny-a", "tiny-b"])
    assert res.pick is None
    assert "no accelerator fits" in res.why and "tiny-b" in res.why
    assert all(not r.fits and r.need > r.capacity for r in res.rows)
    code = main(["fit", "resnet18", "--hardware", str(f), "--gpu", "tiny-a", "--gpu", "tiny-b"])
    out = capsys.readouterr().out
    assert code == 0 and "pick: none" in out and "no accelerator fits" in out  # an answer: exit 0


def test_latency_target_picks_the_lowest_power_that_meets_it(tmp_path):
    f = tmp_path / "cards.toml"
    f.write_text(SOC.format(id="slow", mem=8, tdp=10, tflops=1.0) + SOC.format(id="mid", mem=8, tdp=30, tflops=4.0)
                 + SOC.format(id="fast", mem=8, tdp=90, tflops=16.0))
    free = tfp.fit("resnet18", batch=1, hardware=str(f), gpu=["slow", "mid", "fast"])
    lat = {r.accelerator.id: r.latency_s for r in free.rows}
    assert lat["slow"] > lat["mid"] > lat["fast"] and free.pick == "fast"
    target = (lat["slow"] + lat["mid"]) / 2
    res = tfp.fit("resnet18", batch=1, hardware=str(f), gpu=["slow", "mid", "fast"], latency=target)
    assert res.pick == "mid" and {r.accelerator.id: r.meets_target for r in res.rows} == \
        {"slow": False, "mid": True, "fast": True}
    none = tfp.fit("resnet18", batch=1, hardware=str(f), gpu=["slow", "mid", "fast"], latency="1us")
    assert none.pick is None and "none meets" in none.why


def test_bad_fit_input():
    with pytest.raises(tfp.FootprintError, match="strategy"):
        tfp.fit("resnet18", strategy="zero4")
    with pytest.raises(tfp.FootprintError, match="latency"):
        tfp.fit("resnet18", latency="fast")
    with pytest.raises(tfp.FootprintError, match="at least 1"):
        tfp.fit("resnet18", gpus=0)
    with pytest.raises(tfp.FootprintError, match="h100-sxm"):
        tfp.fit("resnet18", gpu=["h100-sxn"])


def test_autocast_weight_copies_are_found_and_sharded_like_weights():
    t = trace_step(Workload(mlp(), ["4,100"], batch=4, precision="bf16-mixed"),
                   Training(train=True, optimizer="adam"))[0]
    sizes = {uid: n for e in t.events for uid, n in e.allocs}
    # autocast casts each weight and bias to bf16 once: 2 bytes x 5,560 parameters
    assert sum(sizes[u] for u in t.tags["parameter casts"]) == 2 * 5_560
    f = sharding.shard_factors("zero3", 4)
    assert f["weights"] == 0.25
    # ZeRO-3 shrinks those copies too: its per-rank peak is below ZeRO-2's
    assert sharding.rank_peak(t, "zero3", 4).peak_bytes - W <= sharding.rank_peak(t, "zero2", 4).peak_bytes


def test_cli_fit_json_for_several_ranks(tmp_path, capsys):
    out = tmp_path / "fit.json"
    assert main(["fit", "resnet18", "--gpu", "t4", "--train", "--optimizer", "adamw", "--gpus", "2", "--strategy",
                 "zero2", "--json", str(out)]) == 0
    import json

    d = json.loads(out.read_text())
    st = d["model_states_per_rank"]
    # resnet18: 11,689,512 parameters in fp32; ZeRO-2 as FSDP2 runs it on 2 ranks: half the weights and
    # gradients at rest, all the weights gathered from the forward to the end of the backward
    assert st["weights"] == 2 * 11_689_512 and st["gradients"] == 2 * 11_689_512
    assert st["extra"] == 4 * 11_689_512
    assert d["pick"] == "t4" and d["rows"][0]["largest_batch"] >= 1
