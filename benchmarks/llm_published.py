"""`footprint llm`'s predictions against published measurements of serving engines.

Reads benchmarks/published/llm_serving_early.toml (every point cited: engine, GPU, precision,
batch, prompt and output lengths, the measured figure and where it was published), predicts
each point with the same code as `footprint llm` (the datasheet and the documented serving
defaults; no fitting to these points) and prints predicted, measured and the error, and
the median |error|.

    python benchmarks/llm_published.py

Points whose weight format torch-footprint does not model (int4 with groups of 32, MLC's
q4f16_1, ExLlamaV2's exl2) or whose model it has no config for are listed as skipped.
Target: median |error| within 25%.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from torch_footprint.errors import FootprintError  # noqa: E402
from torch_footprint.estimate.llm.pricing import Priced, serve  # noqa: E402
from torch_footprint.estimate.llm.quantization import weight_scheme  # noqa: E402
from torch_footprint.estimate.llm.trace import trace_serving  # noqa: E402
from torch_footprint.hardware.catalog import get  # noqa: E402

DATA = ROOT / "benchmarks" / "published"
CONFIGS = ROOT / "benchmarks" / "configs"
# the model each published point ran, as torch-footprint builds it (same shapes)
MODELS = {
    "meta-llama/Llama-2-7b-hf": "hf:meta-llama/Llama-2-7b-hf",
    "meta-llama/Llama-2-7b-chat-hf": "hf:meta-llama/Llama-2-7b-hf",
    "huggyllama/llama-7b": "hf:meta-llama/Llama-2-7b-hf",
    "meta-llama/Llama-2-13b-hf": str(CONFIGS / "meta-llama--Llama-2-13b-hf"),
    "meta-llama/Llama-2-70b-hf": str(CONFIGS / "meta-llama--Llama-2-70b-hf"),
    "codellama/CodeLlama-7b-hf": str(CONFIGS / "codellama--CodeLlama-7b-hf"),
    "meta-llama/Llama-3.1-8B": "hf:meta-llama/Llama-3.1-8B",
    "meta-llama/Meta-Llama-3-8B-Instruct": "hf:meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "hf:meta-llama/Llama-3.1-70B",
}
SCHEMES = {"fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "int8": "int8", "int4-g128": "int4-g128",
           "gguf-f16": "fp16", "gguf-q8_0": "q8_0", "gguf-q4_0": "q4_0", "gguf-q6_k": "q6_k"}
UNKNOWN_PROMPT = 128  # where the source gives no prompt length


def predict(point: dict, traces: dict) -> float:
    model = MODELS.get(point["model"])
    scheme_name = SCHEMES.get(point["weights"])
    if model is None or scheme_name is None:
        raise KeyError(model is None and f"no config for {point['model']}" or f"format {point['weights']}")
    scheme = weight_scheme(scheme_name)
    prompt = point["prompt"] if point["prompt"] > 0 else (1 if point["metric"].startswith("decode") else
                                                            UNKNOWN_PROMPT)
    output = max(point["output"], 1)
    dtype = scheme.name if scheme.name in ("bf16", "fp16") else scheme.sixteen
    key = (model, prompt, dtype)
    if key not in traces:
        traces[key] = trace_serving(model, batch=1, prompt=prompt, dtype=dtype)
    st = traces[key]
    tp = point.get("tp", 1) or 1
    s = Priced(batch=point["batch"], prompt=prompt, output=output, weights=scheme, gpus=point.get("n_gpus", 1), tp=tp)
    row = serve(st, s, [get(point["gpu"])], max_context=None).rows[0]
    metric = point["metric"]
    if metric == "ttft_ms":
        return row.ttft_s * 1e3
    if metric == "decode_tokens_per_s_per_request":
        return 1 / row.tpot_s
    if metric == "prefill_tokens_per_s":
        return s.batch * s.prompt / row.ttft_s
    if metric == "tpot_ms":
        return row.tpot_s * 1e3
    if metric == "e2e_latency_ms":
        return (row.ttft_s + output * row.tpot_s) * 1e3
    raise KeyError(f"metric {metric}")


def main() -> None:
    points = tomllib.loads((DATA / "llm_serving_early.toml").read_text())["point"]
    traces: dict = {}
    errors = []
    print(f"{'model':26s} {'gpu':14s} {'engine':12s} {'weights':10s} {'B':>2s} {'prompt':>6s} {'metric':10s} "
          f"{'predicted':>10s} {'measured':>10s} {'error':>7s}")
    skipped = []
    for p in points:
        try:
            pred = predict(p, traces)
        except (KeyError, FootprintError) as e:
            skipped.append(f"{p['model']} {p['gpu']} {p['engine']} {p['weights']} {p['metric']}: {e}")
            continue
        err = (pred - p["value"]) / p["value"]
        errors.append(err)
        metric = {"ttft_ms": "TTFT ms", "decode_tokens_per_s_per_request": "decode t/s",
                  "prefill_tokens_per_s": "prefill t/s", "e2e_latency_ms": "e2e ms", "tpot_ms": "TPOT ms"}
        print(f"{p['model'].split('/')[-1][:26]:26s} {p['gpu']:14s} {p['engine'][:12]:12s} {p['weights'][:10]:10s} "
              f"{p['batch']:2d} {p['prompt']:6d} {metric[p['metric']]:10s} {pred:10.1f} {p['value']:10.1f} "
              f"{100 * err:+6.0f}%", flush=True)
    print()
    for s in skipped:
        print("skipped:", s)
    if errors:
        med = statistics.median(abs(e) for e in errors)
        signed = statistics.median(errors)
        print(f"\n{len(errors)} points: median |error| {100 * med:.1f}%, signed median {100 * signed:+.1f}%, "
              f"worst {100 * max(errors, key=abs):+.0f}%  (target: median |error| <= 25%)")


if __name__ == "__main__":
    main()
