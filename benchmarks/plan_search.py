"""``footprint plan``'s search: how many layouts it prices and how fast, and where published runs'
own layouts land in its ranking.

    python benchmarks/plan_search.py [--out benchmarks/results/plan-search.txt] [--skip-published]

1. Llama-3.1-70B (the shipped config meta-llama/Llama-3.1-70B) on 64 H100s (h100-sxm), sequence 8192,
   a global batch of 128 sequences, micro-batches of 1, 2, 4 and 8 sequences (``footprint plan``'s
   default), InfiniBand NDR between nodes: layouts evaluated (priced, and ruled out by their model
   states alone: an exact lower bound on their memory, see estimate/plan.py), traces made (each
   one's wall and CPU seconds), wall and CPU seconds of the whole search. Then the same search again
   with every trace cached (pricing alone).
2. Published large runs whose layout is stated (benchmarks/published/training.toml): the planner is
   run on the run's GPUs, sequence, global batch, FP8 recipe and network, micro-batches of one
   sequence (as every run but one); the run's own layout is
   priced from the planner's traces and ranked among the layouts that fit. Where it is not in the
   top five, the planner's pick is predicted better by the ratio printed (tokens/s per GPU).

Traces do not depend on the GPU, the GPU count, the FP8 recipe or the global batch, so the runs (all
Llama-3.1-70B at sequence 8192) share one store of traces.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from train_published_layouts import (  # noqa: E402
    fp8_recipe,
    framework_of,
    megatron_distributed_optimizer,
    model_of,
    network_of,
    tensor_parallel_extras,
)

# the rows: (row index in training.toml, why it is here)
PUBLISHED = [
    (71, "NeMo AutoModel (FSDP2), Llama-3.1-70B, 64 H100"),
    (45, "Megatron-Bridge, Llama-3.1-70B, 64 H100, FP8"),
    (30, "NeMo 24.07, Llama-3.1-70B, 64 H100, FP8"),
    (74, "torchtitan, Llama-3.1-70B, 64 A100-80GB"),
    (101, "torchtitan, Llama-3.1-70B, 256 H100"),
    (103, "torchtitan, Llama-3.1-70B, 256 H100, FP8"),
]


def _ac(row: dict[str, Any]) -> str | None:
    """The row's checkpointing as --ac names it; None where the source does not say."""
    words = row.get("activation_checkpointing")
    if words is None:
        return None
    return "full" if words.startswith("full") else "selective" if "op" in words else "none"


def _strategy(row: dict[str, Any]) -> str:
    fsdp = {"full_shard": "fsdp", "hybrid_shard": "fsdp", "shard_grad_op": "zero2"}.get(row.get("fsdp") or "")
    return fsdp or ("zero1" if row.get("zero_stage") == 1 else "ddp")


def run(store: dict[Any, Any], model: str, gpu: str, gpus: int, seq: int, gb: int, fp8: str | None,
        network: dict[str, Any], out: list[str], sizes: str = "1", traces: bool = False, **runtime: Any) -> Any:
    """One search; ``runtime``: how the run's framework runs a layout (Parallel's framework, sequence and
    vocabulary parallelism, async TP), applied to every layout searched."""
    from torch_footprint.estimate.plan import plan
    from torch_footprint.settings import Parallel, Plan, Target, Training, Workload

    wall, cpu = time.perf_counter(), time.process_time()
    res = plan(Workload(model), Training(train=True, optimizer="adamw"),
               Parallel(gpus=gpus, fp8=fp8, **network, **runtime), Target(gpu=(gpu,)),
               Plan(seq=seq, global_batch=gb, micro_batches=sizes), store=store)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    trace_cpu = sum(m[4] for m in res.cache.made)
    out.append(f"{model} on {gpus} x {gpu}, seq {seq}, global batch {gb}, micro-batches {sizes}, fp8 {fp8 or 'off'}, "
               f"{' '.join(map(str, network.values()))}: {res.evaluated} layouts evaluated of {res.considered} "
               "possible "
               f"({res.evaluated - res.bounded} priced, {res.bounded} ruled out by their model states alone; "
               f"{len(res.rows)} fit), {res.traces} new traces ({res.trace_s:.1f} s tracing, CPU {trace_cpu:.1f} s); "
               f"wall {wall:.1f} s, CPU {cpu:.1f} s")
    if traces:
        for mb, ac, p, w, c in res.cache.made:
            out.append(f"  trace: tp {p.tensor}{' sp' if p.sequence_parallel else ''}, micro-batch {mb}, --ac {ac}: "
                       f"wall {w:.1f} s, CPU {c:.1f} s")
    return res


def published(store: dict[Any, Any], out: list[str]) -> None:
    from torch_footprint.estimate.price import price_layout
    from torch_footprint.hardware import find, load
    from torch_footprint.hardware.networks import network_for
    from torch_footprint.settings import Parallel, Target

    rows = tomllib.loads((HERE / "published" / "training.toml").read_text())["row"]
    for index, what in PUBLISHED:
        r = rows[index]
        n, tp, pp, vpp = r["n_gpus"], r.get("tp") or 1, r.get("pp") or 1, r.get("vpp") or 1
        dp = n // (tp * pp)
        mb, gb, seq = r.get("micro_batch") or 1, r["global_batch"], r["seq"]
        fp8, net = fp8_recipe(r) or None, network_of(r)
        # as the run's framework runs its layouts (train_published_layouts.py prices them the same way)
        extras = tensor_parallel_extras({**r, "tp": 2})  # what its TP would run with, for every TP searched
        runtime = {"framework": framework_of(r), **extras}
        res = run(store, model_of(r, HERE), r["gpu"], n, seq, gb, fp8, net, out, **runtime)
        strategy = _strategy(r)
        bucket = strategy == "ddp" and megatron_distributed_optimizer(r)
        strategy = "zero1" if bucket else strategy
        p = Parallel(gpus=n, tp=tp, pp=pp, vpp=vpp, pp_schedule="interleaved-1f1b" if vpp > 1 else None,
                     grad_accum=gb // (dp * mb), strategy=strategy, fp8=fp8, **net, bucket_view=bucket,
                     framework=runtime["framework"], **tensor_parallel_extras(r))
        acc = find(load(None), r["gpu"])
        # checkpointing not stated: the lightest mode under which the run's layout fits (else full)
        for ac in [_ac(r)] if _ac(r) else ["none", "selective", "full"]:
            mine = price_layout(res.cache.get(mb, ac, p), acc, p, Target(),
                                network_for(p.network, p.network_gbps, p.nics_per_node, p.gpus_per_node))
            if mine.fits:
                break
        ac = ac + ("" if _ac(r) else " (not stated: the lightest that fits)")
        tps = gb * seq / mine.time_s / n
        better = [x for x in res.rows if x.tokens_per_s_per_gpu > tps]
        best = res.rows[0] if res.rows else None
        line = (f"  row {index} ({what}; {r['source']}): tp {tp} pp {pp} vpp {vpp} dp {dp} {strategy}, micro-batch "
                f"{mb}, ac {ac}: predicted {tps:,.0f} tokens/s/GPU (printed {r['value']:,.0f}), "
                f"{'fits' if mine.fits else f'does not fit ({mine.need / 2**30:.1f} GiB)'}; ")
        line += f"rank {len(better) + 1} of {len(res.rows) + 1}" if mine.fits else "not ranked (does not fit)"
        if best is not None and (not mine.fits or len(better) >= 5):
            b, ratio = best.layout, best.tokens_per_s_per_gpu / tps
            line += (f"; the planner's pick (tp {b.tensor} pp {b.pp} vpp {b.vpp} dp {b.data} {b.sharding}, micro-batch "
                     f"{best.micro_batch}, ac {best.ac}) is predicted at {ratio:.2f}x the run's layout "
                     f"({best.tokens_per_s_per_gpu:,.0f} tokens/s/GPU)")
        out.append(line)
        print(out[-2], out[-1], sep="\n", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(HERE / "results" / "plan-search.txt"))
    ap.add_argument("--skip-published", action="store_true")
    args = ap.parse_args()
    store: dict[Any, Any] = {}
    out = ["# nice -n 10 python benchmarks/plan_search.py  (2 CPU cores shared with other work; timings are this "
           "machine's at that moment, not stable: CPU seconds are the steadier figure)"]
    n = len(out)
    ndr = {"network": "ib-ndr"}
    run(store, "hf:meta-llama/Llama-3.1-70B", "h100-sxm", 64, 8192, 128, None, ndr, out, "1,2,4,8", traces=True)
    print(*out[n:], sep="\n", flush=True)
    out.append("the same search again, every trace cached (pricing alone):")
    run(store, "hf:meta-llama/Llama-3.1-70B", "h100-sxm", 64, 8192, 128, None, ndr, out, "1,2,4,8")
    print(out[-2], out[-1], sep="\n", flush=True)
    if not args.skip_published:
        out.append("published runs (their own layout priced from the planner's traces, ranked among those that fit):")
        published(store, out)
    Path(args.out).write_text("\n".join(out) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
