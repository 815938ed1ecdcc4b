"""``footprint plan --serve``'s search as a whole process: a serving fleet for Llama-3.1-70B at 20
requests/s of Azure's conversation mix, TTFT <= 2 s and TPOT <= 100 ms for 90% of requests, over
every accelerator with a price and vLLM, SGLang and TensorRT-LLM. Printed: candidates, points
simulated, wall and CPU seconds, and the best fleets.

    python benchmarks/plan_serve.py [--out benchmarks/results/plan-serve.txt] [--rate 20]

What the ranking rests on is the serving simulation and the engines' rules (checked against
published serving figures by validate_serving.py and validate_serving_kv.py); this script measures
the search itself.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--rate", default="20")
    ap.add_argument("--model", default="hf:meta-llama/Llama-3.1-70B")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fleet.json"
        cmd = [sys.executable, "-m", "torch_footprint", "plan", args.model, "--serve", "--request-rate", args.rate,
               "--lengths", "azure-conv", "--slo-ttft", "2s", "--slo-tpot", "100ms", "--top", "5", "--json", str(out)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"})
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if run.returncode != 0:
            print(run.stderr, file=sys.stderr)
            return run.returncode
        d = json.loads(out.read_text())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [f"# python benchmarks/plan_serve.py --rate {args.rate}  (2 shared CPU cores; load average "
             f"{os.getloadavg()[0]:.1f}; timings are this machine's, not stable)",
             f"$ footprint {' '.join(cmd[3:-2])}",
             f"{d['candidates']} replica set-ups ({d['pruned']} cut short), {d['simulations']} simulated points; "
             f"wall {wall:.1f} s, CPU {cpu:.1f} s (the whole process: imports, one trace, the search)"]
    for i, r in enumerate(d["rows"], 1):
        knobs = "".join(f", {k} {v:g}" for k, v in r["knobs"].items())
        lines.append(f"  {i}. {r['replicas']} x ({r['accelerator']} x {r['tp']}, {r['engine']}{knobs}): "
                     f"{r['gpus']} GPUs, ${r['usd_per_hour']:,.2f}/h, TTFT p90 {r['ttft_s']['p90'] * 1e3:.0f} ms, "
                     f"TPOT p90 {r['tpot_s']['p90'] * 1e3:.1f} ms, {r['attainment']:.0%} met")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
