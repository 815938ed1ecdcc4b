"""`footprint llm --measure` on this CPU: a calibration, then GPT-2 (random weights, its own
KV cache) prefilled and decoded for real beside the prediction from the calibrated rates.

    python benchmarks/llm_measure_cpu.py

Prints predicted and measured time to first token and time per output token (the median of
every decode step) for each set-up, and the errors. Target (issue 11): within 35% on CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import torch_footprint as tfp  # noqa: E402

SETUPS = [(1, 128, 32), (1, 512, 32), (4, 128, 16)]  # batch, prompt, output


def main() -> None:
    cal, path = tfp.calibrate("cpu")
    print(f"calibration: matmul fp32 {cal['matmul_tflops']['fp32'] * 1e3:.1f} GFLOP/s, copy {cal['copy_gbs']:.1f} "
          f"GB/s, per operator {cal['op_overhead_us']:.1f} us (saved to {path})")
    print(f"{'model':8s} {'batch':>5s} {'prompt':>6s} {'output':>6s}  {'TTFT pred':>10s} {'measured':>10s} "
          f"{'error':>6s}  {'TPOT pred':>10s} {'measured':>10s} {'p90':>10s} {'error':>6s}")
    errors = []
    for batch, prompt, output in SETUPS:
        res = tfp.llm("hf:gpt2", batch=batch, prompt=prompt, output=output, measure=True)
        row, m = res.rows[0], res.measured
        e1 = (row.ttft_s - m["ttft_s"]) / m["ttft_s"]
        e2 = (row.tpot_s - m["tpot_s"]) / m["tpot_s"]
        errors += [e1, e2]
        print(f"{'gpt2':8s} {batch:5d} {prompt:6d} {output:6d}  {row.ttft_s * 1e3:8.1f}ms {m['ttft_s'] * 1e3:8.1f}ms "
              f"{100 * e1:+5.0f}%  {row.tpot_s * 1e3:8.1f}ms {m['tpot_s'] * 1e3:8.1f}ms {m['tpot_p90_s'] * 1e3:8.1f}ms "
              f"{100 * e2:+5.0f}%", flush=True)
    worst = max(errors, key=abs)
    within = sum(abs(e) <= 0.35 for e in errors)
    print(f"\nworst {100 * worst:+.0f}%; {within}/{len(errors)} within 35%  (target: within 35%)")


if __name__ == "__main__":
    main()
