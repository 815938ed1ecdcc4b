"""footprint's timer against torch.utils.benchmark.Timer, alternating, in one run.

This machine is shared and noisy, so the two timers are compared pair by pair: each pair
times the same model and inputs with footprint's timer and with Timer.blocked_autorange
(alternating which goes first, both after the same warm-up rule, at the same thread
count), and the ratio of their medians is printed per pair. Then
footprint's harness against a bare timed loop (the same calls, one perf_counter around
the whole loop), alternating the same way.

    python benchmarks/timer_agreement.py [--pairs 25] [--model resnet18] [--seconds 0.5]

Targets: median ratio within 0.95-1.05; footprint's run-to-run spread no larger
than the Timer's; harness overhead over the bare loop under 2%.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torchvision
from torch.utils.benchmark import Timer

from torch_footprint.measure.timer import CpuClock, measure, warm_up


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=25)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=40, help="alternating blocks for the overhead measurement")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = torchvision.models.get_model(args.model).eval()
    x = torch.randn(1, 3, 224, 224)

    def fn() -> None:
        with torch.inference_mode():
            model(x)

    for _ in range(10):  # the process's first calls (allocator, thread pool) before anything is timed
        fn()
    print(f"{args.model} batch 1, {torch.get_num_threads()} threads, {args.pairs} pairs of {args.seconds:g} s each")
    ours, theirs, ratios, ours_mean = [], [], [], []
    for i in range(args.pairs):
        def run_ours() -> float:
            st = measure(fn, CpuClock(), min_seconds=args.seconds)
            ours_mean.append(st.mean)
            return st.median

        def run_theirs() -> float:
            warm_up(fn, CpuClock())  # the same warm-up footprint's timer does, so both time a warm model
            return Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()).blocked_autorange(
                min_run_time=args.seconds).median

        if i % 2 == 0:
            a, b = run_ours(), run_theirs()
        else:
            b, a = run_theirs(), run_ours()
        ours.append(a)
        theirs.append(b)
        ratios.append(a / b)
        print(f"pair {i + 1}: footprint {a * 1e3:8.2f} ms   Timer {b * 1e3:8.2f} ms   ratio {a / b:.3f}", flush=True)

    print("\nharness overhead: blocks of calls timed by footprint's per-call clock, alternating with blocks "
          "of the same calls in a bare loop; total time of each kind compared")
    clock = CpuClock()
    samples: list[float] = []
    harness_total = bare_total = 0.0
    block = 5
    for r in range(args.rounds):
        for kind in (("harness", "bare") if r % 2 == 0 else ("bare", "harness")):
            t = time.perf_counter()
            if kind == "harness":
                for _ in range(block):
                    token = clock.start()
                    fn()
                    samples.append(clock.stop(token))
                harness_total += time.perf_counter() - t
            else:
                for _ in range(block):
                    fn()
                bare_total += time.perf_counter() - t
    overhead = harness_total / bare_total - 1
    print(f"{args.rounds} rounds of {block} calls each way: footprint {harness_total:.2f} s, bare loop "
          f"{bare_total:.2f} s, overhead {100 * overhead:+.2f}%")
    mean_ratios = [a / b for a, b in zip(ours_mean, theirs)]

    print()
    print(f"{'':34s} {'value':>10s}  target")
    print(f"{'median ratio footprint / Timer':34s} {statistics.median(ratios):10.3f}  0.95-1.05")
    print(f"{'run-to-run spread (CV), footprint':34s} {100 * cv(ours):9.1f}%  <= Timer's")
    print(f"{'run-to-run spread (CV), Timer':34s} {100 * cv(theirs):9.1f}%")
    print(f"{'median ratio, footprint mean / Timer':34s} {statistics.median(mean_ratios):10.3f}  (Timer's median is "
          "over block means)")
    print(f"{'harness overhead':34s} {100 * overhead:+9.2f}%  < 2%")


if __name__ == "__main__":
    main()
