"""Weight bytes per storage scheme against the file sizes of public quantized checkpoints.

Reads benchmarks/published/quantized_checkpoints.toml (each checkpoint cited: repository, files,
exact bytes where the source prints them, else the size Hugging Face displays, rounded to
3 significant digits) and prices the base model's parameters in the checkpoint's scheme
with `footprint llm`'s code. Files carry a little more than the weights (a GGUF file's
tokenizer and metadata, a safetensors header), so the prediction is expected a little low.

    python benchmarks/llm_quantized.py

Target: within 2% of the file size.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from torch_footprint.estimate.llm.pricing import weight_bytes  # noqa: E402
from torch_footprint.estimate.llm.quantization import weight_scheme  # noqa: E402
from torch_footprint.estimate.llm.trace import trace_serving  # noqa: E402

MODELS = {"meta-llama/Llama-2-7b-hf": "hf:meta-llama/Llama-2-7b-hf",
          "mistralai/Mistral-7B-v0.1": "hf:mistralai/Mistral-7B-v0.1",
          "mistralai/Mixtral-8x7B-v0.1": "hf:mistralai/Mixtral-8x7B-v0.1",
          "meta-llama/Llama-3.1-8B-Instruct": "hf:meta-llama/Llama-3.1-8B",
          "meta-llama/Meta-Llama-3-8B-Instruct": "hf:meta-llama/Llama-3.1-8B"}
SCHEMES = {"int4-g128-gptq": "int4-g128", "int4-g128-awq": "int4-g128-awq", "gguf-q4_0": "q4_0",
           "gguf-q4_k_m": "q4_k_m", "gguf-q5_k_m": "q5_k_m", "gguf-q6_k": "q6_k", "gguf-q8_0": "q8_0",
           "fp8": "fp8", "int8": "int8", "nf4": "nf4"}


def file_bytes(c: dict) -> tuple[float, str]:
    if "bytes" in c:
        return float(c["bytes"]), "exact"
    total = sum(float(x) for x in re.findall(r"([\d.]+)\s*GB", c["size_text"].split("=")[-1]))
    return total * 1e9, "shown " + c["size_text"].split("=")[-1].strip()


def main() -> None:
    cps = tomllib.loads((ROOT / "benchmarks" / "published" / "quantized_checkpoints.toml").read_text())["checkpoint"]
    traces: dict = {}
    errors = []
    print(f"{'checkpoint':46s} {'scheme':15s} {'predicted':>14s} {'file':>14s} {'':18s} {'error':>7s}")
    for c in cps:
        model = MODELS.get(c["base_model"])
        if model is None:
            print(f"skipped {c['repo']}: no config for {c['base_model']}")
            continue
        if model not in traces:
            traces[model] = trace_serving(model, batch=1, prompt=1)
        scheme = weight_scheme(SCHEMES[c["scheme"]])
        pred = sum(weight_bytes(traces[model], scheme))
        size, how = file_bytes(c)
        err = (pred - size) / size
        errors.append(err)
        print(f"{c['repo'][:46]:46s} {c['scheme']:15s} {pred:14,.0f} {size:14,.0f} {how[:18]:18s} {100 * err:+6.2f}%",
              flush=True)
    print(f"\n{len(errors)} checkpoints: median |error| {100 * statistics.median(abs(e) for e in errors):.2f}%, "
          f"worst {100 * max(errors, key=abs):+.2f}%  (target: within 2%)")


if __name__ == "__main__":
    main()
