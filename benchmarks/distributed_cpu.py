"""Several ranks on this CPU under torchrun (gloo): each rank's measured peak, step time and
communication time beside footprint's prediction for one rank.

    python benchmarks/distributed_cpu.py [--nproc 2] [--models resnet18,gpt2-tiny,llama-tiny] [--rounds 3]
        [--pipelines llama-tiny,llama-4l,gpt2-tiny]

Step time first: ``--rounds`` times, ``footprint calibrate --nproc N`` (this CPU's ceilings,
measured in N ranks at once on the threads each rank gets, and its gloo all-reduce link),
then DDP on each model at once, so that the calibration and the run see the same load from
whatever else runs on the machine (``others``: the cores other processes took over the
ranks' run, from /proc/stat). The calibrations are saved in ``$TORCH_FOOTPRINT_HOME``, a
temporary folder unless that is set: the user's own calibration is neither read nor
overwritten. Then every strategy on every model, after the last calibration: per-rank peaks.

Measured: ``footprint bench --nproc N --strategy S`` (torch's DistributedDataParallel,
ZeroRedundancyOptimizer, fully_shard, DTensor tensor-parallel plans), the first training
step's peak from the CPU allocator's records on each rank, from the model's construction
on; the median of the timed steps; the time in gloo's collectives (torch.profiler: it
includes waiting for the other rank, so the rank that waited least is the one compared).
Predicted: the per-rank replay of the trace (estimate/sharding.py; tensor parallelism: the
trace of one rank's share), and the roofline step on the ceilings the ranks reached plus
the collectives over the calibrated link (estimate/comm.py).

Pipelines (``footprint bench --gpus N --pp N --pp-schedule S --grad-accum M``): each rank one stage of
torch.distributed.pipelining's ScheduleGPipe, Schedule1F1B or ScheduleInterleaved1F1B, its peak over
the first two steps beside fit's need for that stage (estimate/layouts/schedule.py, the same cut).

Targets: per-rank peak within 5% of the measured one; the step-time error is
reported as it is.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from torch_footprint import api

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "configs"
MODELS = {
    "resnet18": ("resnet18", ["4,3,224,224"], ("ddp", "zero1", "zero2", "fsdp")),
    # GPT-2 keeps its projections in Conv1D modules with fused q/k/v: DTensor's plans do not split them
    "gpt2-tiny": (str(CONFIGS / "gpt2-tiny"), {"input_ids": "2,128:int64"}, ("ddp", "zero1", "zero2", "fsdp")),
    "llama-tiny": (str(CONFIGS / "llama-tiny"), {"input_ids": "2,128:int64"}, ("ddp", "zero1", "zero2", "fsdp", "tp")),
}
STEP_MODELS = ("resnet18", "gpt2-tiny")
# pipeline parallelism over every rank (--gpus N --pp N): (model, its config, schedule, --vpp, micro-batches);
# interleaving 2 chunks per rank over 2 ranks needs 4 blocks
LLAMA_4 = str(ROOT / "benchmarks" / "configs" / "llama-tiny-4layers")
PIPELINES = {
    "llama-tiny": [(str(CONFIGS / "llama-tiny"), "gpipe", 1, 4), (str(CONFIGS / "llama-tiny"), "1f1b", 1, 4)],
    "llama-4l": [(LLAMA_4, "1f1b", 1, 4), (LLAMA_4, "interleaved-1f1b", 2, 4)],
    "gpt2-tiny": [(str(CONFIGS / "gpt2-tiny"), "1f1b", 1, 4)],
}


def _bench(name: str, strategy: str, args: argparse.Namespace) -> Any:
    ref, inputs, _ = MODELS[name]
    return api.bench(ref, inputs, train=True, nproc=args.nproc, strategy=strategy, optimizer=args.optimizer,
                     steps=args.steps, warmup=2)


def _others(res: Any) -> str:
    c = res.contention
    return f"{c.others_cores:.2f}" if c is not None and c.others_cores is not None else "?"


def step_rounds(args: argparse.Namespace) -> None:
    print(f"DDP step time, {args.nproc} ranks, after `footprint calibrate --nproc {args.nproc}` (each round)")
    print(f"{'round':5s} {'model':10s} {'step ms':>8s} {'pred':>7s} {'err':>7s}   {'comm ms':>8s} {'pred':>6s}   "
          f"{'comm share':>10s} {'pred':>5s}  others")
    errs: dict[str, list[float]] = {}
    shares: dict[str, list[tuple[float, float]]] = {}
    for rnd in range(1, args.rounds + 1):
        cal = api.calibrate("cpu", nproc=args.nproc, force=True).measured
        link = cal["link"]
        print(f"{rnd:<5d} calibrated: all-reduce {link['busbw_gbs']:.3g} GB/s bus, {link['latency_us']:.0f} us/step; "
              f"per rank matmul {link['ceilings']['matmul_tflops']['fp32'] * 1e3:.1f} GFLOP/s, "
              f"other processes {cal['contention']['others_cores'] or 0:.2f} cores", flush=True)
        for name in args.models.split(","):
            if name not in STEP_MODELS:
                continue
            res = _bench(name, "ddp", args)
            st = res.predicted.step
            step = statistics.median(r.step_s for r in res.ranks)
            comm = min(r.comm_s for r in res.ranks)  # the other rank's includes waiting for this one
            err = (st.time_s - step) / step
            errs.setdefault(name, []).append(err)
            shares.setdefault(name, []).append((comm / step, st.comm_s / st.time_s))
            share, pshare = comm / step, st.comm_s / st.time_s
            print(f"{rnd:<5d} {name:10s} {step * 1e3:8.1f} {st.time_s * 1e3:7.1f} {100 * err:+6.1f}%   "
                  f"{comm * 1e3:8.1f} {st.comm_s * 1e3:6.1f}   {100 * share:9.1f}% {100 * pshare:4.1f}%"
                  f"  {_others(res)}", flush=True)
    print()
    for name, e in errs.items():
        measured, predicted = (statistics.median(x[i] for x in shares[name]) for i in (0, 1))
        print(f"DDP step time {name}: median error {100 * statistics.median(e):+.1f}% over {len(e)} rounds "
              f"(from {100 * min(e):+.1f}% to {100 * max(e):+.1f}%); communication share measured "
              f"{100 * measured:.1f}%, predicted {100 * predicted:.1f}%")
    every = [x for e in errs.values() for x in e]
    if every:
        print(f"DDP step time, all: median |error| {100 * statistics.median(abs(x) for x in every):.1f}%")
    print()


def peaks(args: argparse.Namespace) -> None:
    print(f"{'model':11s} {'strategy':8s} rank {'peak MiB':>9s} {'pred':>7s} {'err':>7s}   {'step ms':>8s} "
          f"{'pred':>7s} {'err':>7s}   {'comm ms':>8s} {'pred':>7s} {'exposed':>7s}  others")
    errs: list[float] = []
    step_errs: list[float] = []
    for name in filter(None, args.models.split(",")):
        for strategy in MODELS[name][2]:
            res = _bench(name, strategy, args)
            p = res.predicted
            st = p.step
            for r in res.ranks:
                err = (p.peak.peak_bytes - r.peak_bytes) / r.peak_bytes
                errs.append(err)
                line = (f"{name:11s} {strategy:8s} {r.rank:4d} {r.peak_bytes / 2**20:9.2f} "
                        f"{p.peak.peak_bytes / 2**20:7.2f} {100 * err:+6.1f}%   {r.step_s * 1e3:8.1f} ")
                if st is not None:
                    serr = (st.time_s - r.step_s) / r.step_s
                    step_errs.append(serr)
                    line += (f"{st.time_s * 1e3:7.1f} {100 * serr:+6.1f}%   {r.comm_s * 1e3:8.1f} "
                             f"{st.comm_s * 1e3:7.1f} {st.exposed_s * 1e3:7.1f}")
                else:
                    line += f"{'-':>7s} {'':7s}   {r.comm_s * 1e3:8.1f} {'':7s} {'':7s}"
                print(line + f"  {_others(res)}", flush=True)
    if args.pipelines:
        errs += pipelines(args)
    print()
    if not errs:
        return
    within = sum(abs(e) <= 0.05 for e in errs)
    print(f"per-rank peak within 5%: {within}/{len(errs)}; median |error| "
          f"{100 * statistics.median(abs(e) for e in errs):.1f}%, worst {100 * max(abs(e) for e in errs):.1f}%")
    if step_errs:
        print(f"step time, every strategy: median |error| {100 * statistics.median(abs(e) for e in step_errs):.1f}%, "
              f"worst {100 * max(abs(e) for e in step_errs):.1f}%")
    else:
        print("step time not predicted: run `footprint calibrate --nproc N` first")


def pipelines(args: argparse.Namespace) -> list[float]:
    """Each rank one pipeline stage: its measured peak beside fit's need for that stage."""
    errs = []
    for name in filter(None, args.pipelines.split(",")):
        for ref, schedule, vpp, m in PIPELINES[name]:
            res = api.bench(ref, {"input_ids": "2,128:int64"}, train=True, gpus=args.nproc, pp=args.nproc, vpp=vpp,
                            pp_schedule=schedule, grad_accum=m, optimizer=args.optimizer, steps=args.steps, warmup=2)
            p = res.predicted
            what = f"{schedule}{f' v{vpp}' if vpp > 1 else ''} m{m}"
            for r in res.ranks:
                err = (p.peak_of(r.rank) - r.peak_bytes) / r.peak_bytes
                errs.append(err)
                st = p.step
                need = p.peak_of(r.rank)
                line = (f"{name:11s} {what:8s} {r.rank:4d} {r.peak_bytes / 2**20:9.2f} {need / 2**20:7.2f} "
                        f"{100 * err:+6.1f}%   {r.step_s * 1e3:8.1f} ")
                if st is not None:
                    line += f"{st.time_s * 1e3:7.1f} {100 * (st.time_s - r.step_s) / r.step_s:+6.1f}%"
                print(line + f"   {r.comm_s * 1e3:8.1f}  {_others(res)}", flush=True)
    return errs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--pipelines", default=",".join(PIPELINES), help="models run as pipelines, one stage per rank "
                                                                      "(empty: none)")
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="calibrate-then-DDP rounds for the step time (0: none; "
                                                          "the peaks table then uses the saved calibration)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="footprint-home-") as tmp:
        if args.rounds:
            os.environ.setdefault("TORCH_FOOTPRINT_HOME", tmp)
            step_rounds(args)
        peaks(args)


if __name__ == "__main__":
    main()
