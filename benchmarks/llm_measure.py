"""`footprint llm --measure` on this machine: a calibration of the device, then language models
(random weights, their own KV cache) prefilled and decoded for real beside the prediction
from the calibrated rates.

    python benchmarks/llm_measure.py [--device cpu|cuda] [--out results.json]

Prints predicted and measured time to first token and time per output token (the median of
every decode step) for each set-up, and the errors. Targets: within 35% on CPU,
20% on a CUDA GPU. On CPU: GPT-2; on CUDA also a 1.1B Llama (TinyLlama's published shape,
benchmarks/configs/llama-1.1b) in bf16.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import torch_footprint as tfp  # noqa: E402

SETUPS = [(1, 128, 32), (1, 512, 32), (4, 128, 16)]  # batch, prompt, output
LLAMA = str(ROOT / "benchmarks" / "configs" / "llama-1.1b")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", help="write every point as JSON")
    args = ap.parse_args()
    models = [("hf:gpt2", None, SETUPS)]
    if args.device.startswith("cuda"):
        models.append((LLAMA, "bf16", [*SETUPS, (8, 512, 32), (1, 1536, 32)]))
    done = tfp.calibrate(args.device, force=True)  # a busy machine is said in the output, not refused
    cal, path = done.measured, done.path
    print(f"calibration: matmul fp32 {cal['matmul_tflops']['fp32'] * 1e3:.1f} GFLOP/s, copy {cal['copy_gbs']:.1f} "
          f"GB/s, per operator {cal['op_overhead_us']:.1f} us (saved to {path})")
    print(f"{'model':10s} {'batch':>5s} {'prompt':>6s} {'output':>6s}  {'TTFT pred':>10s} {'measured':>10s} "
          f"{'error':>6s}  {'TPOT pred':>10s} {'measured':>10s} {'p90':>10s} {'error':>6s}")
    errors = []
    points = []
    for model, weights, setups in models:
        for batch, prompt, output in setups:
            res = tfp.llm(model, batch=batch, prompt=prompt, output=output, quant=weights, measure=True,
                          device=args.device)
            row, m = res.rows[0], res.measured
            e1 = (row.ttft_s - m["ttft_s"]) / m["ttft_s"]
            e2 = (row.tpot_s - m["tpot_s"]) / m["tpot_s"]
            errors += [e1, e2]
            points.append({"model": model, "device": args.device, "accelerator": row.accelerator.id, "batch": batch,
                           "prompt": prompt, "output": output, "ttft_predicted_s": row.ttft_s,
                           "tpot_predicted_s": row.tpot_s, "measured": m, "ttft_error": e1, "tpot_error": e2})
            name = Path(model).name if "/" in model and not model.startswith("hf:") else model.removeprefix("hf:")
            print(f"{name[:10]:10s} {batch:5d} {prompt:6d} {output:6d}  {row.ttft_s * 1e3:8.2f}ms "
                  f"{m['ttft_s'] * 1e3:8.2f}ms {100 * e1:+5.0f}%  {row.tpot_s * 1e3:8.2f}ms {m['tpot_s'] * 1e3:8.2f}ms "
                  f"{m['tpot_p90_s'] * 1e3:8.2f}ms {100 * e2:+5.0f}%", flush=True)
    worst = max(errors, key=abs)
    within = sum(abs(e) <= 0.35 for e in errors)
    within20 = sum(abs(e) <= 0.20 for e in errors)
    print(f"\nworst {100 * worst:+.0f}%; {within}/{len(errors)} within 35%, {within20}/{len(errors)} within 20%  "
          "(targets: 35% on CPU, 20% on a CUDA GPU)")
    if args.out:
        Path(args.out).write_text(json.dumps({"calibration": cal, "points": points}, indent=1, default=str))


if __name__ == "__main__":
    main()
