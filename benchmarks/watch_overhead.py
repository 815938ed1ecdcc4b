"""What sampling costs bench: the same bench run with and without sampling, alternating.

Each round runs footprint's bench loop (``run_bench``: warm-up, then timed calls) on one
model twice, once with the sampling thread (memory, per-thread CPU, energy and, on a GPU,
NVML every ``--interval`` seconds) and once without, swapping which goes first every round.
The ratio of the two medians is printed per round; the verdict is the median of the
per-round ratios (a shared, noisy machine moves both runs of a round together, so pairing
them cancels most of it), with the ratio of the best round's medians beside it (the least
disturbed run of each kind). Then the cost of one reading: the in-process probe bench uses
and the probe ``footprint watch`` uses (a process and its children, the CPUs), in
microseconds, and as a share of one core at the interval.

    python benchmarks/watch_overhead.py [--model resnet18] [--batch 1] [--rounds 10] [--seconds 1]
        [--interval 0.1] [--device cpu] [--threads N]

Target (issue: watch a real run): bench figures with and without sampling within 2%.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
import torchvision

from torch_footprint.measure.devices import Processes, Rapl
from torch_footprint.measure.runner import run_bench
from torch_footprint.measure.sampling import CpuDevice, Probe, RunSampling


def reading_cost(probe: Probe, n: int = 200) -> float:
    """Seconds per reading (median of ``n``)."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        probe.read()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=1.0, help="timed seconds per bench run")
    ap.add_argument("--interval", type=float, default=0.1, help="sampling interval (bench's default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch's CPU threads (default: torch's own)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = torchvision.models.get_model(args.model).eval().to(args.device)

    def inputs(b: int) -> tuple[tuple[torch.Tensor, ...], dict[str, object]]:
        return (torch.randn(b, 3, 224, 224, device=args.device),), {}

    def bench(interval: float | None) -> tuple[float, float, dict | None]:
        res = run_bench(model, inputs, name=args.model, device=args.device, batches=[args.batch],
                        default_batch=args.batch, min_reps=10, min_seconds=args.seconds, sample_interval=interval)
        p = res.points[0]
        return p.stats.median, p.samples_per_second, p.sampling

    bench(None)  # the process's first calls (allocator, thread pool) before anything is compared
    print(f"{args.model} batch {args.batch} on {args.device}, {torch.get_num_threads()} threads, {os.cpu_count()} "
          f"CPUs; {args.rounds} rounds of {args.seconds:g} s timed per run; sampling every {args.interval:g} s")
    print(f"{'round':>5} {'first':>7} {'median off':>11} {'median on':>10} {'on / off':>9} {'samples':>8}")
    ratios, offs, ons = [], [], []
    for i in range(args.rounds):
        order = [None, args.interval] if i % 2 == 0 else [args.interval, None]
        got = {}
        for interval in order:
            got[interval] = bench(interval)
        off, on = got[None][0], got[args.interval][0]
        offs.append(off)
        ons.append(on)
        ratios.append(on / off)
        first = "off" if order[0] is None else "on"
        print(f"{i + 1:>5} {first:>7} {off * 1e3:>8.3f} ms {on * 1e3:>7.3f} ms {on / off:>9.4f} "
              f"{got[args.interval][2]['samples']:>8}")
    med = statistics.median(ratios)
    best = min(ons) / min(offs)
    print(f"median of per-round ratios (on / off): {med:.4f} ({(med - 1) * 100:+.2f}%); ratio of the medians "
          f"{statistics.median(ons) / statistics.median(offs):.4f}; of the best rounds {best:.4f} "
          f"({(best - 1) * 100:+.2f}%); per-round ratios from {min(ratios):.4f} to {max(ratios):.4f}")
    print(f"target: within 2% -> {'met' if abs(med - 1) <= 0.02 else 'NOT met'} (median of per-round ratios)")

    inproc = RunSampling(args.device, args.interval).probe
    cost = reading_cost(inproc)
    print(f"one in-process reading (bench): {cost * 1e6:.0f} µs = {cost / args.interval:.2%} of one core at "
          f"{args.interval:g} s")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        watched = Probe(processes=Processes(child.pid), cpu=CpuDevice(Rapl()))
        cost = reading_cost(watched)
    finally:
        child.kill()
        child.wait()
    print(f"one reading of footprint watch (a process, the CPUs): {cost * 1e6:.0f} µs = {cost / 1.0:.3%} of one core "
          f"at its default 1 s")


if __name__ == "__main__":
    main()
