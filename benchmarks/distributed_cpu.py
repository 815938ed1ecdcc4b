"""Several ranks on this CPU under torchrun (gloo): each rank's measured peak, step time and
communication time beside footprint's prediction for one rank.

    footprint calibrate --nproc 2          # once: this CPU's ceilings and its gloo all-reduce link
    python benchmarks/distributed_cpu.py [--nproc 2] [--models resnet18,gpt2-tiny,llama-tiny]

Measured: ``footprint bench --nproc N --strategy S`` (torch's DistributedDataParallel,
ZeroRedundancyOptimizer, fully_shard, DTensor tensor-parallel plans), the first training
step's peak from the CPU allocator's records on each rank, from the model's construction
on; the median of the timed steps; the time in gloo's collectives (torch.profiler).
Predicted: the per-rank replay of the trace (estimate/sharding.py; tensor parallelism: the
trace of one rank's share), and the roofline step on the calibrated CPU (each rank gets
its share of the cores) plus the collectives over the calibrated link (estimate/comm.py).

Targets (issue 14): per-rank peak within 5% of the measured one.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from torch_footprint import api

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "configs"
MODELS = {
    "resnet18": ("resnet18", ["4,3,224,224"], ("ddp", "zero1", "zero2", "fsdp")),
    # GPT-2 keeps its projections in Conv1D modules with fused q/k/v: DTensor's plans do not split them
    "gpt2-tiny": (str(CONFIGS / "gpt2-tiny"), {"input_ids": "2,128:int64"}, ("ddp", "zero1", "zero2", "fsdp")),
    "llama-tiny": (str(CONFIGS / "llama-tiny"), {"input_ids": "2,128:int64"}, ("ddp", "zero1", "zero2", "fsdp", "tp")),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    print(f"{'model':11s} {'strategy':8s} rank {'peak MiB':>9s} {'pred':>7s} {'err':>7s}   {'step ms':>8s} "
          f"{'pred':>7s} {'err':>7s}   {'comm ms':>8s} {'pred':>7s} {'exposed':>7s}")
    errs: list[float] = []
    step_errs: list[float] = []
    for name in args.models.split(","):
        ref, inputs, strategies = MODELS[name]
        for strategy in strategies:
            res = api.bench_ranks(ref, inputs, nproc=args.nproc, strategy=strategy, optimizer=args.optimizer,
                                  steps=args.steps, warmup=2)
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
                    line += f"{'-':>7s} {'':7s}   {r.comm_s * 1e3:8.1f}"
                print(line, flush=True)
    print()
    within = sum(abs(e) <= 0.05 for e in errs)
    print(f"per-rank peak within 5%: {within}/{len(errs)}; median |error| "
          f"{100 * statistics.median(abs(e) for e in errs):.1f}%, worst {100 * max(abs(e) for e in errs):.1f}%")
    if step_errs:
        print(f"step time: median |error| {100 * statistics.median(abs(e) for e in step_errs):.1f}%, "
              f"worst {100 * max(abs(e) for e in step_errs):.1f}%")
    else:
        print("step time not predicted: run `footprint calibrate --nproc N` first")


if __name__ == "__main__":
    main()
