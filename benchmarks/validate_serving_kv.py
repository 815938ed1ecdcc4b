"""Engines' KV-cache capacity as their start-up logs print it, against `footprint llm --engine`.

Reads the ``[[kv_capacity]]`` rows of benchmarks/published/serving.toml (each an engine's log
line with its address and the figure as printed: "GPU KV cache size: N tokens", "# GPU
blocks: N", SGLang's "KV Cache is allocated. #tokens: N", TensorRT-LLM's "Allocate N bytes
for k/v cache", "the rest of the memory reserved for KV Cache is N GiB") and sizes the same
cache by the engine's rule (hardware/engines/NAME.toml) on the same set-up: the model's
config traced on meta tensors, the device's total memory as the log prints it where it does
(else the database's figure), the knobs the row states and the engine's defaults of the
row's version otherwise. Prints each line's error and the median; rows that cannot be
expressed (an engine without a profile, a model without a config, no figure) are listed with
the reason.

The version's default that differs from today's profile is stated here, not fitted: vLLM's
V0 engine without chunked prefill profiles one batch of max(max_model_len, 2048) tokens
(vllm/config.py SchedulerConfig, before V1), where V1 profiles max_num_batched_tokens.

    .venv/bin/python benchmarks/validate_serving_kv.py
"""

from __future__ import annotations

import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from torch_footprint.errors import FootprintError  # noqa: E402
from torch_footprint.estimate.llm.pricing import Priced, serve  # noqa: E402
from torch_footprint.estimate.llm.quantization import checkpoint_scheme  # noqa: E402
from torch_footprint.estimate.llm.trace import trace_serving  # noqa: E402
from torch_footprint.hardware.catalog import get  # noqa: E402

DATA = ROOT / "benchmarks" / "published" / "serving.toml"
CONFIGS = ROOT / "benchmarks" / "configs"
ENGINES = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm", "llama.cpp": "llamacpp"}
KNOBS = {"gpu_memory_utilization": "gpu_memory_utilization", "mem_fraction_static": "mem_fraction_static",
         "kv_cache_free_gpu_mem_fraction": "kv_cache_free_gpu_memory_fraction", "block_size": "block_size",
         "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens",
         "max_num_tokens": "max_num_batched_tokens"}
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def model_path(name: str) -> str | None:
    """The config torch-footprint builds for ``hf:org/name``: benchmarks/configs, else shipped."""
    if not name.startswith("hf:"):
        return None
    local = CONFIGS / name[3:].replace("/", "--")
    return str(local) if (local / "config.json").exists() else name


def v0_without_chunking(row: dict[str, Any]) -> bool:
    """A vLLM V0 engine that profiles the whole longest request (no chunked prefill)."""
    version = str(row.get("engine_version", ""))
    if "V1" in version:
        return False
    found = re.search(r"0\.(\d+)", version)
    minor = int(found.group(1)) if found else 0
    # V0 turned chunked prefill on by default for max_model_len of 32K and more from 0.5
    return not (minor >= 5 and (row.get("max_model_len") or 0) >= 32768) and not row.get("enable_chunked_prefill")


def expected(row: dict[str, Any]) -> tuple[str, float] | None:
    """The figure the log printed, the most precise first."""
    for key in ("kv_tokens", "num_gpu_blocks", "kv_cache_bytes", "kv_cache_gib"):
        if row.get(key):
            return key, float(row[key])
    return None


def predict(row: dict[str, Any], traces: dict[tuple[str, str], Any]) -> tuple[str, float, float]:
    engine = ENGINES.get(row["engine"])
    if row.get("approximate_claim"):
        raise KeyError("a prose statement of capacity, not a log line")
    if engine is None:
        raise KeyError(f"no profile for engine {row['engine']!r}")
    model = model_path(row["model"])
    if model is None:
        raise KeyError(f"no config for {row['model']!r}")
    figure = expected(row)
    if figure is None:
        raise KeyError("no KV figure printed")
    dtype = DTYPES.get(row.get("dtype", ""), "bfloat16")
    key = (model, dtype)
    if key not in traces:
        traces[key] = trace_serving(model, batch=1, prompt=8, dtype=dtype)
    st = traces[key]
    quant = getattr(st.config, "quantization_config", None)
    if quant is not None and checkpoint_scheme(st.config) is None:
        method = quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", "?")
        raise KeyError(f"the checkpoint is stored in {method}, a scheme footprint does not price")
    acc = get(row["gpu"])
    if row.get("gpu_total_memory_gib"):  # the total the engine saw, as its log prints it
        acc = replace(acc, cuda_memory_mib=float(row["gpu_total_memory_gib"]) * 1024)
    knobs = {KNOBS[k]: float(v) for k, v in row.items() if k in KNOBS}
    max_len = row.get("max_model_len") or st.max_context
    if engine == "vllm" and "max_num_batched_tokens" not in knobs and v0_without_chunking(row):
        knobs["max_num_batched_tokens"] = max(max_len, 2048)
    if engine == "trtllm" and "max_num_batched_tokens" not in knobs and row.get("max_batch_size"):
        # TensorRT-LLM before the PyTorch back end: the engine's buffers were built for
        # max_batch_size x max_input_len tokens (build.py's max_input_len default 1024)
        knobs["max_num_batched_tokens"] = float(row["max_batch_size"]) * row.get("max_input_len", 1024)
        knobs.setdefault("max_num_seqs", float(row["max_batch_size"]))
    tp = int(row.get("tp", 1))
    kv = 1 if row.get("kv_dtype") == "fp8" else None
    s = Priced(batch=1, prompt=8, output=8, gpus=tp, tp=tp, engine=engine, knobs=knobs, max_model_len=max_len,
               kv_bytes=kv, weights=checkpoint_scheme(st.config))
    cache = serve(st, s, [acc], max_context=None).rows[0].vllm
    assert cache is not None
    name, value = figure
    got = {"kv_tokens": cache.tokens, "num_gpu_blocks": cache.blocks, "kv_cache_bytes": cache.capacity_bytes,
           "kv_cache_gib": cache.capacity_bytes / 2**30}[name]
    return name, value, float(got)


def main() -> None:
    rows = tomllib.loads(DATA.read_text()).get("kv_capacity", [])
    traces: dict[tuple[str, str], Any] = {}
    errors: list[float] = []
    skipped: list[str] = []
    print(f"{'engine':8s} {'model':34s} {'gpu':14s} {'tp':>2s} {'figure':15s} {'printed':>12s} {'predicted':>12s} "
          f"{'error':>7s}")
    for row in rows:
        label = f"{row['engine'][:8]:8s} {row['model'].removeprefix('hf:')[:34]:34s} {row['gpu'][:14]:14s} " \
                f"{row.get('tp', 1):>2}"
        try:
            name, printed, got = predict(row, traces)
        except (KeyError, FootprintError) as e:
            skipped.append(f"{label.split()[0]} {row['model']} on {row['gpu']}: {str(e).strip(chr(39))}")
            continue
        err = (got - printed) / printed
        errors.append(err)
        print(f"{label} {name:15s} {printed:12,.2f} {got:12,.2f} {100 * err:+6.1f}%  {row['source']}")
    if errors:
        abs_err = sorted(abs(e) for e in errors)
        print(f"\n{len(errors)} log lines: median |error| {100 * statistics.median(abs_err):.1f}%, "
              f"within 1%: {sum(e <= 0.01 for e in abs_err)}, within 5%: {sum(e <= 0.05 for e in abs_err)}, "
              f"worst {100 * abs_err[-1]:.1f}%")
    for s in skipped:
        print(f"not expressed: {s}")


if __name__ == "__main__":
    main()
