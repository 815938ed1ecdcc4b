"""Speed of the serving simulation: 10,000 requests of Llama-3.1-70B (the shipped config) on
8 H100 SXM (tensor parallel 8) under vLLM's rules, in each of three set-ups: fixed lengths
(1,024 + 256) from 256 clients, lengths drawn from Azure's conversation trace at an infinite
rate (every request at once: the largest batches), and the same at 20 requests/s. The time
counted is the simulation's own (its priced steps included), apart from tracing the model:
wall and CPU seconds, beside the whole command's.

    python benchmarks/serving_sim_speed.py [--requests 10000]

Target: each simulation in at most 10 s on this machine. The machine's other load moves
these figures; read them as an order of magnitude.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from torch_footprint import api
from torch_footprint.estimate.llm import pricing

CASES = {
    "fixed 1024+256, 256 clients": {"concurrency": 256},
    "azure-conv, rate inf": {"lengths": "azure-conv", "request_rate": "inf"},
    "azure-conv, 20 req/s": {"lengths": "azure-conv", "request_rate": "20"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000)
    args = ap.parse_args()
    inner = pricing.simulate_serving
    spent: list[tuple[float, float]] = []

    def timed(*a: Any, **kw: Any) -> dict[str, Any]:
        w, c = time.perf_counter(), time.process_time()
        out = inner(*a, **kw)
        spent.append((time.perf_counter() - w, time.process_time() - c))
        return out

    pricing.simulate_serving = timed  # type: ignore[assignment]
    print(f"{args.requests:,} requests of meta-llama/Llama-3.1-70B on 8 x h100-sxm, tp 8, vLLM")
    print(f"{'case':<30} {'sim wall s':>10} {'sim CPU s':>10} {'command s':>10} {'iterations':>11} "
          f"{'out tok/s':>10} {'TTFT p50':>9} {'TPOT p50':>9}")
    for name, extra in CASES.items():
        spent.clear()
        t0 = time.perf_counter()
        res = api.llm("hf:meta-llama/Llama-3.1-70B", gpu=("h100-sxm",), gpus=8, tp=8, engine="vllm", simulate=True,
                      num_prompts=args.requests, **extra)
        whole = time.perf_counter() - t0
        m = res.rows[0].simulation or {}
        wall, cpu = spent[0]
        print(f"{name:<30} {wall:>10.2f} {cpu:>10.2f} {whole:>10.1f} {m['iterations']:>11,} "
              f"{m['output_tokens_per_s']:>10,.0f} {m['ttft_s']['p50'] * 1e3:>7.0f}ms "
              f"{m['tpot_s']['p50'] * 1e3:>7.1f}ms")
        assert m["requests"] == args.requests, m["requests"]


if __name__ == "__main__":
    main()
