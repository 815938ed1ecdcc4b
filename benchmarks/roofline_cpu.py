"""Predicted against measured latency on this CPU: `footprint calibrate`, then the roofline.

For each model and batch size: footprint's roofline prediction on the local CPU (ceilings
from a calibration run at the start of the script, as `footprint calibrate` makes them),
next to the latency footprint's bench timer measures (warm-up until two windows agree,
median of the timed calls, inference_mode, random weights). The error is predicted /
measured - 1. The calibration runs again at the end to show how far the machine drifted.

    python benchmarks/roofline_cpu.py [--models resnet18,resnet50,mobilenet_v2,vit_b_16] [--batches 1,16]

Target: median absolute error within 35% on CPU. Results are written to
benchmarks/results/roofline_cpu.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("KINETO_LOG_LEVEL", "5")

import torch  # noqa: E402

import torch_footprint as tfp  # noqa: E402
from torch_footprint.estimate.kernels.roofline import estimate_latency as predict  # noqa: E402
from torch_footprint.hardware.local import local_cpu  # noqa: E402
from torch_footprint.measure.calibrate import calibrate  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,vit_b_16")
    ap.add_argument("--batches", default="1,16")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    t0 = time.perf_counter()
    cal = calibrate("cpu")
    cpu = replace(local_cpu(), calibrated=cal, bandwidth_gbs=round(cal["copy_gbs"], 1))
    print(f"{cal['name']}, {cal['threads']} threads, torch {torch.__version__}; calibration: matmul fp32 "
          f"{cal['matmul_tflops']['fp32'] * 1e3:.1f} GFLOP/s, copy {cal['copy_gbs']:.1f} GB/s, "
          f"call {cal['op_overhead_us']:.2f} us ({cal['seconds']:.1f} s)")
    rows = []
    header = f"{'model':14s} {'batch':>5s} {'predicted':>11s} {'lower bd':>10s} {'measured':>11s} {'spread':>7s} " \
             f"{'error':>7s}  bound"
    print(header)
    print("-" * len(header))
    for name in args.models.split(","):
        for b in batches:
            prof = tfp.profile(name, f"{b},3,224,224")
            pred = predict(prof.trace, cpu)
            res = tfp.bench(name, f"{b},3,224,224", device="cpu", min_reps=20 if b == 1 else 5,
                            min_time=2.0 if b == 1 else 0.0)
            st = res.points[0].stats
            err = pred.time_s / st.median - 1
            rows.append({"model": name, "batch": b, "predicted_s": pred.time_s, "lower_bound_s": pred.lower_bound_s,
                         "measured_median_s": st.median, "measured_spread": st.spread, "reps": st.reps,
                         "error": err, "bound": pred.bound, "time_by_bound_s": pred.time_by_bound()})
            print(f"{name:14s} {b:5d} {pred.time_s * 1e3:8.1f} ms {pred.lower_bound_s * 1e3:7.1f} ms "
                  f"{st.median * 1e3:8.1f} ms {st.spread:6.1%} {err:+7.1%}  {pred.bound}", flush=True)
    end = calibrate("cpu")
    abs_err = [abs(r["error"]) for r in rows]
    summary = {"median_abs_error": statistics.median(abs_err),
               "median_error": statistics.median(r["error"] for r in rows),
               "within_35pct": sum(e <= 0.35 for e in abs_err), "cases": len(rows)}
    drift = end["matmul_tflops"]["fp32"] / cal["matmul_tflops"]["fp32"] - 1
    print(f"\nmedian |error| {summary['median_abs_error']:.1%} (signed median {summary['median_error']:+.1%}); "
          f"{summary['within_35pct']}/{summary['cases']} within 35%  [target: median within 35%]")
    print(f"machine drift: matmul fp32 {cal['matmul_tflops']['fp32'] * 1e3:.1f} GFLOP/s at the start, "
          f"{end['matmul_tflops']['fp32'] * 1e3:.1f} at the end ({drift:+.1%}); copy {cal['copy_gbs']:.1f} -> "
          f"{end['copy_gbs']:.1f} GB/s; {time.perf_counter() - t0:.0f} s in all")
    RESULTS.mkdir(exist_ok=True)
    from torch_footprint.files import write_json

    write_json(RESULTS / "roofline_cpu.json", {"calibration_start": cal, "calibration_end": end, "rows": rows,
                                               "summary": summary, "torch": torch.__version__})
    print(f"wrote {RESULTS / 'roofline_cpu.json'}")


if __name__ == "__main__":
    main()
