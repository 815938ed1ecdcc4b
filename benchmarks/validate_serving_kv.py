"""Engines' KV-cache capacity as their start-up logs print it, against `footprint llm --engine`.

Reads the ``[[kv_capacity]]`` rows of benchmarks/published/serving.toml (each an engine's log
line with its address and the figure as printed: "GPU KV cache size: N tokens", "# GPU
blocks: N", SGLang's "KV Cache is allocated. #tokens: N", TensorRT-LLM's "Using N tokens in
paged KV cache", vLLM's "the rest of the memory reserved for KV Cache is N GiB") and sizes the
same cache two ways:

* from the config: the engine's rule at the row's engine_version (hardware/engines/NAME.toml,
  its ``[[eras]]``) on the same set-up: the model's config traced on meta tensors, the
  device's total memory as the log prints it where it does (else as CUDA reports it, from the
  accelerator database), the knobs the row states and the version's defaults otherwise;
* from the log's own figures: where the log prints the memory the engine held back (weights,
  memory outside PyTorch, the profile run's peak) or gave the cache, the same rule's last step
  (blocks of block_size tokens of the model's per-token cache, per rank) on those figures: a
  check of the cache layout and the block arithmetic apart from the held-back estimates.

Prints each line's error, the median, and the rows that cannot be expressed with the reason.
A row whose set-up the log leaves open says so (``context_missing``): its error is printed and
counted, with the reason beside it. A row whose source's own figures contradict each other says
so with the arithmetic (``inconsistent``): its error is printed and kept apart. The memory
outside PyTorch per rank of each vLLM era is read from one log's printed "non_torch_memory"; a
row from that same source is in-sample, so it is also priced with the newest era's figure (read
from other logs): the leave-one-source-out error.

    .venv/bin/python benchmarks/validate_serving_kv.py
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from torch_footprint.errors import FootprintError  # noqa: E402
from torch_footprint.estimate.llm.pricing import Priced, kv_per_rank, serve  # noqa: E402
from torch_footprint.estimate.llm.quantization import SCHEMES, checkpoint_scheme  # noqa: E402
from torch_footprint.estimate.llm.trace import trace_serving  # noqa: E402
from torch_footprint.hardware import engines  # noqa: E402
from torch_footprint.hardware.catalog import get  # noqa: E402

DATA = ROOT / "benchmarks" / "published" / "serving.toml"
CONFIGS = ROOT / "benchmarks" / "configs"
ENGINES = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm", "llama.cpp": "llamacpp"}
KNOBS = {"gpu_memory_utilization": "gpu_memory_utilization", "mem_fraction_static": "mem_fraction_static",
         "kv_cache_free_gpu_mem_fraction": "kv_cache_free_gpu_memory_fraction", "block_size": "block_size",
         "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens",
         "max_num_tokens": "max_num_batched_tokens"}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
GIB = 2**30


def model_path(name: str) -> str | None:
    """The config torch-footprint builds for ``hf:org/name``: benchmarks/configs, else shipped."""
    if not name.startswith("hf:"):
        return None
    local = CONFIGS / name[3:].replace("/", "--")
    return str(local) if (local / "config.json").exists() else name


def expected(row: dict[str, Any]) -> tuple[str, float] | None:
    """The figure the log printed that is compared: the row's ``compare`` field, else the most
    precise one printed."""
    if row.get("compare"):
        return row["compare"], float(row[row["compare"]])
    for key in ("kv_tokens", "num_gpu_blocks", "kv_cache_bytes", "kv_cache_gib"):
        if row.get(key):
            return key, float(row[key])
    return None


def in_sample(row: dict[str, Any]) -> bool:
    """Whether the row's vLLM era reads its memory outside PyTorch from this row's own source."""
    got = engines.release(str(row.get("engine_version", "")))
    if ENGINES.get(row["engine"]) != "vllm" or got is None:
        return False
    era = next((e for e in engines.profile("vllm").eras if got <= engines.release(e["until"])), None)  # type: ignore[operator]
    return era is not None and era.get("non_torch_from") == row["source"]


def figure_of(name: str, blocks: int, block: int, capacity: int) -> float:
    return {"kv_tokens": blocks * block, "num_gpu_blocks": blocks, "kv_cache_bytes": capacity,
            "kv_cache_gib": capacity / GIB}[name]


def from_log(row: dict[str, Any], name: str, per_block: int, block: int, total: float | None) -> float | None:
    """The rule's last step on the log's own printed memory figures (None where it prints too few)."""
    if name == "kv_cache_gib":
        return None  # the printed bytes are themselves the compared figure
    capacity: float | None = None
    if row.get("kv_cache_gib"):
        capacity = row["kv_cache_gib"] * GIB
    elif row.get("k_size_gib") and row.get("v_size_gib"):
        capacity = (row["k_size_gib"] + row["v_size_gib"]) * GIB
    elif total and row.get("gpu_memory_utilization") and row.get("non_torch_gib") is not None:
        budget = total * row["gpu_memory_utilization"]
        if row.get("peak_torch_gib"):
            capacity = (budget - row["peak_torch_gib"] - row["non_torch_gib"]) * GIB
        elif row.get("weights_gib") and row.get("activation_peak_gib") is not None:
            capacity = (budget - row["weights_gib"] - row["non_torch_gib"] - row["activation_peak_gib"]) * GIB
    if capacity is None:
        return None
    blocks = int(capacity // per_block)
    return float(figure_of(name, blocks, block, int(capacity)))


def predict(row: dict[str, Any], traces: dict[tuple[str, str], Any],
            overrides: dict[str, Any] | None = None) -> tuple[str, float, float, float | None, Any]:
    """(figure, printed, from the config, from the log's figures, the engine's cache);
    ``overrides``: fields of the row's era of the engine's profile replaced (leave-one-source-out)."""
    engine = ENGINES.get(row["engine"])
    if row.get("approximate_claim"):
        raise KeyError("a prose statement of capacity, not a log line")
    if engine is None:
        raise KeyError(f"no profile for engine {row['engine']!r}")
    model = model_path(row["model"])
    if model is None:
        raise KeyError(f"no config for {row['model']!r}")
    if row.get("not_priced"):
        raise KeyError(row["not_priced"])
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
    if engine == "trtllm" and "max_num_batched_tokens" not in knobs and row.get("max_batch_size"):
        # TensorRT-LLM before the PyTorch back end: the engine's buffers were built for
        # max_batch_size x max_input_len tokens (examples/llama/build.py of that release: --max_input_len 2048
        # by default, https://github.com/NVIDIA/TensorRT-LLM/blob/027cd518e3b63809a5c5799187991e7f1164fb12/examples/llama/build.py)
        knobs["max_num_batched_tokens"] = float(row["max_batch_size"]) * row.get("max_input_len", 2048)
        knobs.setdefault("max_num_seqs", float(row["max_batch_size"]))
    tp = int(row.get("tp", 1))
    kv = 1 if row.get("kv_dtype") == "fp8" else None
    scheme = SCHEMES[row["weights"]] if row.get("weights") else checkpoint_scheme(st.config)
    s = Priced(batch=1, prompt=8, output=8, gpus=tp, tp=tp, engine=engine, knobs=knobs, max_model_len=max_len,
               kv_bytes=kv, weights=scheme)
    era = engines.profile(engine).at(row.get("engine_version"))  # the rule of the row's release
    saved = engines.profiles()[engine]
    engines.profiles()[engine] = replace(era, eras=(), **(overrides or {}))
    try:
        cache = serve(st, s, [acc], max_context=None).rows[0].vllm
    finally:
        engines.profiles()[engine] = saved
    assert cache is not None
    name, value = figure
    got = figure_of(name, cache.blocks, cache.block, cache.capacity_bytes)
    per_block = kv_per_rank(st, cache.block, tp, kv) - kv_per_rank(st, 0, tp, kv)
    total = row.get("gpu_total_memory_gib")
    return name, value, float(got), from_log(row, name, per_block, cache.block, total), cache


def v1(row: dict[str, Any]) -> bool:
    """A vLLM row of the newest rule (V1, after the last era)."""
    got = engines.release(str(row.get("engine_version", "")))
    last = engines.release(engines.profile("vllm").eras[-1]["until"])
    return ENGINES.get(row["engine"]) == "vllm" and got is not None and last is not None and got > last


def points(rows: list[dict[str, Any]], traces: dict[tuple[str, str], Any]) -> list[tuple[str, str, float]]:
    """What the newest vLLM rule's constants are fitted to, each (source, constant, value): bytes
    per logit of the sampler run where the log's printed profile peak is above the forward pass's
    (the sampler set it), and memory outside PyTorch as printed, at tp 1 and over NVLink."""
    out = []
    for row in rows:
        if not v1(row) or row.get("activation_peak_gib") is None:
            continue
        try:
            cache = predict(row, traces, {"sampler_bytes_per_logit": 0.0})[4]
        except (KeyError, FootprintError):
            continue
        printed = row["activation_peak_gib"] * GIB
        config = traces[(model_path(row["model"]), DTYPES.get(row.get("dtype", ""), "bfloat16"))].config
        wide = 2 if row.get("dtype") == "fp32" else 0  # as estimate/llm/engines.py sampler_run
        if printed > 1.1 * cache.held_back["activations"]:
            out.append((row["source"], "sampler_bytes_per_logit",
                        printed / (cache.knobs["max_num_seqs"] * config.vocab_size) - wide))
        name = "non_torch_gib" if int(row.get("tp", 1)) == 1 else "non_torch_tp_gib"
        out.append((row["source"], name, row["non_torch_gib"]))
    return out


def fitted(found: list[tuple[str, str, float]], leave: str = "") -> dict[str, float]:
    """Each constant: the median of its points, the source ``leave`` left out."""
    names = sorted({n for _, n, _ in found})
    return {n: round(statistics.median(v for s, k, v in found if k == n and s != leave), 2) for n in names
            if any(k == n and s != leave for s, k, _ in found)}


def _pct(got: float, printed: float) -> float:
    return (got - printed) / printed


def _summary(label: str, errors: list[float]) -> str:
    a = sorted(abs(e) for e in errors)
    return (f"{label}: {len(a)} log lines, median |error| {100 * statistics.median(a):.1f}%, within 1%: "
            f"{sum(e <= 0.01 for e in a)}, within 5%: {sum(e <= 0.05 for e in a)}, worst {100 * a[-1]:.1f}%")


def main() -> None:
    rows = tomllib.loads(DATA.read_text()).get("kv_capacity", [])
    traces: dict[tuple[str, str], Any] = {}
    errors: list[float] = []
    loso: list[float] = []
    found = points(rows, traces)
    logged: list[float] = []
    apart: list[float] = []
    skipped: list[str] = []
    print(f"{'engine':8s} {'version':8s} {'model':30s} {'gpu':13s} {'tp':>2s} {'figure':14s} {'printed':>11s} "
          f"{'config':>11s} {'error':>7s} {'LOSO':>7s} {'log fig.':>8s}")
    for row in rows:
        ver = engines.release(str(row.get("engine_version", "")))
        label = (f"{row['engine'][:8]:8s} {'.'.join(map(str, ver)) if ver else '?':8s} "
                 f"{row['model'].removeprefix('hf:')[:30]:30s} {row['gpu'][:13]:13s} {row.get('tp', 1):>2}")
        try:
            name, printed, got, logged_got, _ = predict(row, traces)
            if v1(row):
                out = predict(row, traces, fitted(found, leave=row["source"]))[2]
            elif in_sample(row):
                newest = engines.profile("vllm")
                out = predict(row, traces, {"non_torch_gib": newest.non_torch_gib,
                                            "non_torch_tp_gib": newest.non_torch_tp_gib})[2]
            else:
                out = got
        except (KeyError, FootprintError) as e:
            skipped.append(f"{row['engine']} {row['model']} on {row['gpu']}: {str(e).strip(chr(39))}")
            continue
        err, err_out = _pct(got, printed), _pct(out, printed)
        if row.get("inconsistent"):
            apart.append(err)
        else:
            errors.append(err)
            loso.append(err_out)
        log_txt = "" if logged_got is None else f"{100 * _pct(logged_got, printed):+7.2f}%"
        if logged_got is not None:
            logged.append(_pct(logged_got, printed))
        print(f"{label} {name:14s} {printed:11,.2f} {got:11,.2f} {100 * err:+6.1f}% {100 * err_out:+6.1f}% "
              f"{log_txt:>8s}  {row['source']}")
        if row.get("inconsistent"):
            print(f"{'':9s}inconsistent, kept apart: {row['inconsistent']}")
        elif row.get("context_missing"):
            print(f"{'':9s}the log leaves open: {row['context_missing']}")
    print()
    newest = engines.profile("vllm")
    fit = fitted(found)
    print("newest vLLM rule's constants fitted to the logs' printed figures (all sources): "
          + ", ".join(f"{k} {v} (profile: {getattr(newest, k)})" for k, v in fit.items()))
    if errors:
        print(_summary("from the config (consistent lines)", errors))
        print(_summary("from the config, leave-one-source-out (constants refitted without the row's source)", loso))
    if apart:
        print(_summary("with the lines whose sources contradict themselves", errors + apart))
    if logged:
        print(_summary("from the log's own memory figures (layout and block arithmetic)", logged))
    for s in skipped:
        print(f"not expressed: {s}")


if __name__ == "__main__":
    main()
