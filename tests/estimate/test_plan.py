"""The planner on a tiny Llama (tests/configs/llama-tiny: hidden 128, 4 heads with 2 key/value heads,
2 layers): one trace priced under many layouts gives what ``footprint fit`` prints for each; the search
covers the layouts 8 GPUs allow and ranks those that fit; the launch configuration says the layout."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from torch_footprint import api
from torch_footprint.cli import main
from torch_footprint.estimate.kernels.sdpa import sm_of
from torch_footprint.estimate.plan import TraceCache
from torch_footprint.estimate.price import price_layout
from torch_footprint.hardware import find, load
from torch_footprint.settings import Parallel, Training, Workload

LLAMA = Path(__file__).resolve().parents[1] / "configs" / "llama-tiny"
SEQ = 64


def _fit_row(tmp_path: Path, flags: list[str]) -> dict:
    out = tmp_path / "fit.json"
    code = main(["fit", str(LLAMA), "--input-ids", f"1,{SEQ}", "--train", "--optimizer", "adamw", "--precision",
                 "bf16-mixed", "--ac", "full", "--gpu", "h100-sxm", *flags, "--json", str(out)])
    assert code == 0
    return json.loads(out.read_text())["rows"][0]  # type: ignore[no-any-return]


# three layouts of one trace key: tensor parallel 2, full checkpointing, gradients kept (several
# micro-batches a step); they differ in sharding, pipeline split, schedule and GPU count
LAYOUTS = [
    (dict(gpus=8, tp=2, pp=2, grad_accum=4, strategy="fsdp"),
     ["--gpus", "8", "--tp", "2", "--pp", "2", "--grad-accum", "4", "--strategy", "fsdp"]),
    (dict(gpus=8, tp=2, pp=2, grad_accum=4, strategy="zero1", pp_schedule="gpipe"),
     ["--gpus", "8", "--tp", "2", "--pp", "2", "--grad-accum", "4", "--strategy", "zero1", "--pp-schedule", "gpipe"]),
    (dict(gpus=4, tp=2, grad_accum=2, strategy="ddp"),
     ["--gpus", "4", "--tp", "2", "--grad-accum", "2", "--strategy", "ddp"]),
]


def test_one_cached_trace_prices_each_layout_as_fit_does(tmp_path: Path) -> None:
    acc = find(load(None), "h100-sxm")
    # traced for the GPU as plan and fit trace it (its attention kernel, torch.optim's default there)
    cache = TraceCache(Workload(str(LLAMA), {"input_ids": f"1,{SEQ}:int64"}, precision="bf16-mixed"),
                       Training(train=True, optimizer="adamw"), cuda_sm=sm_of(acc))
    for kw, flags in LAYOUTS:
        p = Parallel(**kw)  # type: ignore[arg-type]
        priced = price_layout(cache.get(1, "full", p), acc, p)
        row = _fit_row(tmp_path, flags)
        assert priced.time_s == row["latency_s"], kw
        assert priced.need == row["need_bytes"], kw
        assert priced.fits == row["fits"], kw
    assert len(cache.store) == 1  # one trace for the three layouts


def _plan(tmp_path: Path, *flags: str) -> dict:
    out = tmp_path / "plan.json"
    code = main(["plan", str(LLAMA), "--gpu", "h100-sxm", "--gpus", "8", "--seq", str(SEQ), "--global-batch", "16",
                 *flags, "--json", str(out)])
    assert code == 0
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def test_the_search_covers_the_layouts_and_ranks_those_that_fit(tmp_path: Path) -> None:
    d = _plan(tmp_path, "--micro-batches", "1,2")
    rows = d["rows"]
    assert d["kind"] == "plan" and not d["nothing_fits"] and d["layouts_evaluated"] >= len(rows) > 0
    # 8 GPUs: tp 1 or 2 (2 key/value heads), pp 1 or 2 (2 layers); each layout's degrees make up the 8
    # GPUs and its micro-batches the global batch of 16 sequences
    for r in rows:
        assert r["dp"] * r["tp"] * r["pp"] == 8
        assert r["dp"] * r["micro_batch"] * r["grad_accum"] == 16
        assert r["need_bytes"] <= r["capacity_bytes"]
        # tokens/s per GPU = 16 x 64 tokens a step / the step / 8 GPUs
        assert r["tokens_per_s_per_gpu"] == pytest.approx(16 * SEQ / r["step_s"] / 8)
    assert {(r["tp"], r["pp"]) for r in rows} == {(1, 1), (1, 2), (2, 1), (2, 2)}
    assert {r["micro_batch"] for r in rows} == {1, 2}
    speeds = [r["tokens_per_s_per_gpu"] for r in rows]
    assert speeds == sorted(speeds, reverse=True)


def test_the_best_layout_is_priced_as_fit_prices_it(tmp_path: Path) -> None:
    best = _plan(tmp_path, "--ac", "full")["rows"][0]
    flags = ["--gpus", "8", "--tp", str(best["tp"]), "--pp", str(best["pp"]), "--grad-accum",
             str(best["grad_accum"]), "--strategy", best["strategy"]]
    if best["pp"] > 1:
        flags += ["--pp-schedule", best["schedule"], "--vpp", str(best["vpp"])]
    if best["dp_shard"] is not None:
        flags += ["--dp-shard", str(best["dp_shard"])]
    row = _fit_row(tmp_path, flags + ["--batch", str(best["micro_batch"])])
    assert best["step_s"] == row["latency_s"] and best["need_bytes"] == row["need_bytes"]


def test_a_megatron_plans_selective_recompute_is_megatrons_default(tmp_path: Path) -> None:
    # Megatron-core's selective granularity has no per-operator policy: its default recomputes the core attention
    # (--recompute-modules core_attn), which is what a Megatron plan prices and what its launch flags ask for
    acc = find(load(None), "h100-sxm")
    cache = TraceCache(Workload(str(LLAMA), {"input_ids": f"1,{SEQ}:int64"}, precision="bf16-mixed"),
                       Training(train=True, optimizer="adamw"), cuda_sm=sm_of(acc))
    p = Parallel(gpus=8, grad_accum=2, framework="megatron")
    priced = price_layout(cache.get(1, "selective", p), acc, p)
    out = tmp_path / "fit.json"
    assert main(["fit", str(LLAMA), "--input-ids", f"1,{SEQ}", "--train", "--optimizer", "adamw", "--precision",
                 "bf16-mixed", "--recompute-modules", "core_attn", "--gpu", "h100-sxm", "--gpus", "8",
                 "--grad-accum", "2", "--framework", "megatron", "--json", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert priced.time_s == row["latency_s"] and priced.need == row["need_bytes"]
    # under torch.distributed it stays torchtitan's per-operator policy
    torch_p = Parallel(gpus=8, grad_accum=2)
    assert cache.get(1, "selective", torch_p).training.ac == "selective"
    mega = _plan(tmp_path, "--ac", "selective", "--framework", "megatron")["rows"][0]["launch"]["megatron"]
    assert {"--recompute-granularity selective", "--recompute-modules core_attn"} <= set(mega)


def test_the_launch_configuration_says_the_layout(tmp_path: Path) -> None:
    rows = _plan(tmp_path, "--ac", "selective")["rows"]
    for r in rows:
        mega = r["launch"]["megatron"]
        assert f"--tensor-model-parallel-size {r['tp']}" in mega
        assert f"--pipeline-model-parallel-size {r['pp']}" in mega
        assert f"--micro-batch-size {r['micro_batch']}" in mega and "--global-batch-size 16" in mega
        assert "--recompute-granularity selective" in mega
        titan = r["launch"]["torchtitan"]
        if r["strategy"] == "zero1":
            assert titan is None  # torchtitan has no ZeRO-1
            continue
        par = titan["parallelism"]
        assert par["tensor_parallel_degree"] == r["tp"] and par["pipeline_parallel_degree"] == r["pp"]
        assert par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"] == r["dp"]
        assert titan["activation_checkpoint"]["mode"] == "selective"
        # torchtitan's local batch is the pipeline's micro-batches on a rank with pp, one micro-batch without
        local = r["micro_batch"] * (r["grad_accum"] if r["pp"] > 1 else 1)
        assert titan["training"] == {"local_batch_size": local, "global_batch_size": 16, "seq_len": SEQ}


def test_the_launch_configuration_carries_the_fp8_recipe_priced() -> None:
    # torchtitan's model converters (torchao's float8, tensorwise by default, or MX) and Megatron-LM's --fp8-format
    # and --fp8-recipe as Megatron-Bridge's mixed-precision presets set them (HYBRID, but e4m3 for MXFP8); a recipe
    # a framework does not have gives no configuration for it rather than a wrong one
    import tomllib

    from torch_footprint.estimate.launch import launch
    from torch_footprint.estimate.plan import PlanRow
    from torch_footprint.report.plan import toml

    def out(fp8: str) -> dict:
        row = PlanRow(SimpleNamespace(layout=Parallel(gpus=8, strategy="fsdp", fp8=fp8)), 1, "none", 64, 8, 2)
        return launch(row)  # type: ignore[arg-type]

    mx = out("mxfp8")
    assert tomllib.loads(toml(mx["torchtitan"]))["model"] == {"converters": ["mx"]}
    assert mx["torchtitan"]["mx"] == {"recipe_name": "mxfp8"}
    assert mx["megatron"][-2:] == ["--fp8-format e4m3", "--fp8-recipe mxfp8"]
    tensorwise = out("tensorwise")
    assert tensorwise["torchtitan"]["model"] == {"converters": ["float8"]} and "float8" not in tensorwise["torchtitan"]
    assert tensorwise["megatron"][-2:] == ["--fp8-format hybrid", "--fp8-recipe tensorwise"]
    assert out("rowwise")["megatron"] is None and out("rowwise")["torchtitan"]["float8"] == {"recipe_name": "rowwise"}
    assert out("delayed")["torchtitan"] is None and out("delayed")["megatron"][-1] == "--fp8-recipe delayed"
    assert out("rowwise_with_gw_hp")["torchtitan"]["float8"] == {"recipe_name": "rowwise_with_gw_hp"}
    row = PlanRow(SimpleNamespace(layout=Parallel(gpus=8, tp=2, async_tp=True)), 1, "none", 64, 8, 2)
    overlapped = launch(row)  # type: ignore[arg-type]
    assert overlapped["torchtitan"]["parallelism"]["enable_async_tensor_parallel"] is True
    assert "--tp-comm-overlap" in overlapped["megatron"]


@pytest.mark.parametrize(("gpu", "fp8", "message"), [
    ("a100-sxm-80gb", "tensorwise", "--fp8 tensorwise: a100-sxm-80gb has no fp8 units"),
    ("h100-sxm", "mxfp8", "--fp8 mxfp8: h100-sxm has no block-scaled (MX) matmul units"),
])
def test_plan_refuses_an_fp8_recipe_the_gpu_cannot_run(gpu: str, fp8: str, message: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", str(LLAMA), "--gpu", gpu, "--gpus", "8", "--seq", str(SEQ), "--global-batch", "16",
                 "--fp8", fp8])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_ctrl_c_keeps_the_best_found_so_far() -> None:
    calls = []

    def progress(message: str, fraction: float | None = None) -> None:
        calls.append(message)
        if len([c for c in calls if "micro-batch" in c]) == 2:
            raise KeyboardInterrupt

    res = api.plan(str(LLAMA), gpu=["h100-sxm"], gpus=8, seq=SEQ, global_batch=16, progress=progress)
    assert res.interrupted and res.rows  # the first trace key's layouts were priced before the interrupt
    assert res.to_dict()["interrupted"] is True
    assert gc.get_freeze_count() == 0  # what the search set aside from the collector is given back


def test_the_search_gives_back_what_it_set_aside_from_the_collector_and_leaves_the_callers_alone() -> None:
    # the search freezes what lives once each trace is made (gc.freeze) and unfreezes at its end; where
    # the caller froze objects of its own, it freezes nothing, and theirs stay frozen
    import gc as collector

    kept = [[i] for i in range(100)]
    calls = []
    real = collector.freeze
    collector.freeze = lambda: (calls.append(collector.get_freeze_count()), real())[1]  # type: ignore[assignment]
    try:
        api.plan(str(LLAMA), gpu=["h100-sxm"], gpus=2, seq=SEQ, global_batch=4)
        assert calls and collector.get_freeze_count() == 0
        calls.clear()
        real()
        frozen = collector.get_freeze_count()
        api.plan(str(LLAMA), gpu=["h100-sxm"], gpus=2, seq=SEQ, global_batch=4)
        assert calls == [] and 0 < collector.get_freeze_count() <= frozen  # (frozen objects that died leave it)
    finally:
        collector.freeze = real  # type: ignore[assignment]
        collector.unfreeze()
    assert kept


def test_states_bound_is_below_every_priced_need() -> None:
    # the bound (each parameter's weight, gradient and optimizer shard, over the pipeline degree) is
    # what the rank holds at the end of its backward: never more than the priced need
    from torch_footprint.estimate.layouts.sharding import pipeline_gathered
    from torch_footprint.estimate.plan import layouts, states_bound
    from torch_footprint.sources import prepare

    acc = find(load(None), "h100-sxm")
    # traced for the GPU as plan and fit trace it (its attention kernel, torch.optim's default there)
    cache = TraceCache(Workload(str(LLAMA), {"input_ids": f"1,{SEQ}:int64"}, precision="bf16-mixed"),
                       Training(train=True, optimizer="adamw"), cuda_sm=sm_of(acc))
    model = prepare(str(LLAMA), f"1,{SEQ}:int64").built.model
    seen = set()
    for p, mb in layouts(model, Parallel(gpus=8), 16, (1, 2)):
        need = price_layout(cache.get(mb, "none", p), acc, p).need
        bound = states_bound(cache.get(mb, "none", p), p)
        assert bound is not None and 0 <= bound <= need, p
        if p.sharding == "fsdp" and p.pp > 1:  # its stage gathered and its gradients whole all step
            kept = pipeline_gathered(cache.get(mb, "none", p).trace, "fsdp")
            assert bound >= kept // p.pp - 2**20 > 0, p
        seen.add((p.sharding, p.pp, p.vpp))
    # every sharding, with and without a pipeline (2 layers: no virtual stages; 8 ranks in one node:
    # no HSDP)
    assert seen == {(s, pp, 1) for s in ("ddp", "zero1", "zero2", "fsdp") for pp in (1, 2)}


def test_layouts_ruled_out_by_their_states_do_not_fit() -> None:
    # Llama-3-70B's shapes (tests/configs/llama3-70b) on 16 H100s, 32 tokens a sequence: 70.6e9
    # parameters x 16 bytes (fp32 weights and gradients, AdamW's two moments) = 1.13 TB of states;
    # DDP over 16 ranks keeps them whole on each rank (over the pipeline degree at most 16: 70 GB
    # per rank, with the weights' bf16 copies and activations on top); every layout ruled out, priced
    # anyway, needs more than the 80 GB
    res = api.plan(str(Path(__file__).resolve().parents[1] / "configs" / "llama3-70b"), gpu=("h100-sxm",), gpus=16,
                   seq=32, global_batch=16, micro_batches="1", ac="full")
    assert res.bounded > 0 and res.bounded == len(res.ruled_out)
    assert res.evaluated >= res.bounded + len(res.rows)
    acc = find(load(None), "h100-sxm")
    for bound, p in res.ruled_out:
        priced = price_layout(res.cache.get(1, "full", p), acc, p)
        assert not priced.fits and priced.need >= bound > acc.memory_bytes, p
    assert {p.sharding for _, p in res.ruled_out} >= {"ddp", "zero1"}
    assert gc.get_freeze_count() == 0  # traces asked of the cache after the search are not set aside


def test_the_search_folds_expert_parallelism_over_the_tensor_parallel_ranks() -> None:
    # tests/configs/qwen3-moe-tiny: 4 experts a layer, 2 heads of keys and values. On 4 GPUs at tp 2 there are
    # 2 data-parallel ranks: expert parallelism 2 takes them, 4 takes the tensor-parallel pairs too (folded)
    from torch_footprint.estimate.launch import launch
    from torch_footprint.estimate.plan import PlanRow, layouts
    from torch_footprint.sources import prepare

    model = prepare(str(Path(__file__).resolve().parents[1] / "configs" / "qwen3-moe-tiny"), "1,32:int64").built.model
    base = Parallel(gpus=4)
    found = {(p.tensor, p.pp, p.ep, p.ep_folded) for p, _ in layouts(model, base, 8, (1,))}
    assert (2, 1, 4, True) in found and (2, 1, 2, False) in found
    assert (1, 1, 4, False) in found  # 4 data-parallel ranks hold one expert each
    assert not any(ep > 4 or ep == 3 for _, _, ep, _ in found)  # never more ranks than experts, nor uneven
    folded = next(p for p, _ in layouts(model, base, 8, (1,)) if p.ep_folded)
    row = PlanRow(SimpleNamespace(layout=folded), 1, "none", 32, 8, 2)  # type: ignore[arg-type]
    out = launch(row)
    assert {"--expert-model-parallel-size 4", "--expert-tensor-parallel-size 1"} <= set(out["megatron"])
    assert out["torchtitan"] is None or out["torchtitan"]["parallelism"]["expert_tensor_parallel_degree"] == 1
