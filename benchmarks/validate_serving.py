"""`footprint llm`'s serving predictions against the published runs of serving engines.

Reads the ``[[run]]`` rows of benchmarks/published/serving.toml (each a figure as its source
printed it, with the address) and predicts each one the way a user of `footprint llm` would:
the model's config traced on meta tensors, priced on the row's GPU with the row's engine
(``--engine``: its memory rule and its speed defaults, hardware/engines/NAME.toml, at the row's
release where it names one: ``--engine-version``, which picks that release's rules), weights
and cache in the row's schemes, tensor parallelism as the row states, the engine knobs the row
states and the engine's defaults otherwise:

* ``static_batch``: the priced prefill and decode of the batch (time to first token, then
  output - 1 decode steps at the mean step's time);
* ``single_stream``: the same at batch 1 (llama.cpp's eval rate = 1 / time per output token,
  prompt eval = prompt / time to first token);
* ``offline_max_throughput`` and ``request_rate`` = inf: the continuous-batching simulation
  (``--simulate``) with every request queued at once;
* ``request_rate`` at a finite rate: the simulation fed a Poisson process at that rate
  (``--request-rate``, seeded), split evenly over the row's data-parallel replicas;
* a dataset's rows draw their lengths from the shipped histogram of that dataset
  (``--lengths``), where one ships with its published source;
* rows that need what is not shipped (a dataset's histogram) or a scheme torch-footprint does
  not price are listed as "not expressed" with what they need.

Prints per row the printed and predicted figure and the error, then the median, p90, worst,
the medians per source, engine and scenario, the batch-1 decode median, and for every constant
fitted to published measurements (hardware/engines/*.toml's speed figures) a leave-one-source-
out refit: each source's rows predicted with the constant fitted on the other sources only
(by GPU where one source alone holds the rows a constant is fitted on), and the held-out
errors' median over all rows and per source. The engines' other speed figures (vLLM, SGLang,
TensorRT-LLM) come from outside this database and stand as shipped.

    .venv/bin/python benchmarks/validate_serving.py [--no-loso]
    # in shards (one source each), then the report of them all:
    .venv/bin/python benchmarks/validate_serving.py --source H100vsA100 --save a.jsonl --no-loso
    .venv/bin/python benchmarks/validate_serving.py --load a.jsonl,b.jsonl,...

Targets: median <= 12%, each source's median <= 20%, leave-one-source-out median <= 15%,
batch-1 decode median <= 15%.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from validate_serving_kv import model_path  # noqa: E402

from torch_footprint.errors import FootprintError  # noqa: E402
from torch_footprint.estimate.llm.pricing import Priced, serve  # noqa: E402
from torch_footprint.estimate.llm.quantization import activation_dtype, kv_scheme, weight_scheme  # noqa: E402
from torch_footprint.estimate.llm.requests import distributions  # noqa: E402
from torch_footprint.estimate.llm.serving_sim import Asked  # noqa: E402
from torch_footprint.estimate.llm.trace import ServingTrace, trace_serving  # noqa: E402
from torch_footprint.hardware.catalog import get  # noqa: E402
from torch_footprint.hardware.engines import profiles, release  # noqa: E402

DATA = ROOT / "benchmarks" / "published" / "serving.toml"
ENGINES = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm", "llama.cpp": "llamacpp"}
KNOBS = {"gpu_memory_utilization": "gpu_memory_utilization", "mem_fraction_static": "mem_fraction_static",
         "kv_cache_free_gpu_mem_fraction": "kv_cache_free_gpu_memory_fraction", "max_num_seqs": "max_num_seqs",
         "max_batch_size": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens",
         "max_num_tokens": "max_num_batched_tokens", "num_scheduler_steps": "num_scheduler_steps",
         "enable_chunked_prefill": "enable_chunked_prefill"}
WEIGHTS = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp4": "nvfp4", "gguf-q4_0": "q4_0", "ggml-q4_1": "q4_1",
           "gguf-f16": "fp16",
           "gguf-q8_0": "q8_0"}
# llama.cpp's ./main runs of SOURCE 7 (README "Usage"): a ~400-token prompt, -n 1024 generated
LLAMACPP_PROMPT = 400
LLAMACPP_OUTPUT = 1024
# TensorRT-LLM's batch-1 generation rows print no output length: the table's other rows' 128
BATCH1_OUTPUT = 128
# a dataset's rows draw their lengths from the shipped histogram of that name (estimate/llm/lengths.toml)
DATASETS: dict[str, str] = {"mlperf-openorca-24576": "mlperf-openorca", "sharegpt": "sharegpt"}
SIM_REQUESTS = 3000  # offline runs of more requests are simulated on their first 3,000 (steady state)


class NotExpressed(Exception):
    """The row needs something the prediction does not take (said in the message)."""


@dataclass
class Predicted:
    row: dict[str, Any]
    value: float

    @property
    def error(self) -> float:
        return (self.value - self.row["value"]) / self.row["value"]


def source_of(row: dict[str, Any]) -> str:
    """A short name for the row's source (its address up to the file or thread)."""
    src = row["source"]
    parts = src.split("/")
    if "github.com" in src:
        repo = "/".join(parts[3:5])
        if "/blob/" in src:
            return f"{repo}:{parts[7]}@{parts[6][:7]}" if "docs" not in src else f"{repo}:{parts[-1]}@{parts[6][:7]}"
        return f"{repo}#{parts[-1]}"
    return src


def _trace(model: str, prompt: int, dtype: str | None, traces: dict[Any, ServingTrace]) -> ServingTrace:
    key = (model, prompt, dtype)
    if key not in traces:
        traces[key] = trace_serving(model, batch=1, prompt=prompt, dtype=dtype)
    return traces[key]


def priced_of(row: dict[str, Any]) -> tuple[str, Priced, str]:
    """(model path, the set-up priced, what is read off the result)."""
    engine = ENGINES.get(row["engine"])
    if engine is None:
        raise NotExpressed(f"no profile for engine {row['engine']}")
    model = model_path(row["model"])
    if model is None:
        raise NotExpressed(f"no config for {row['model']}")
    if row["weights"] not in WEIGHTS:
        raise NotExpressed(f"needs a {row['weights']} weight scheme")
    scheme = weight_scheme(WEIGHTS[row["weights"]])
    kv = None if row["kv"] == "auto" else kv_scheme(row["kv"])
    tp = int(row.get("tp", 1))
    knobs = {KNOBS[k]: float(v) for k, v in row.items() if k in KNOBS}
    version = str(row["engine_version"]) if release(str(row.get("engine_version", ""))) else None  # its rules
    scenario, metric = row["scenario"], row["metric"]
    lengths = "fixed"
    if scenario in ("offline_max_throughput", "request_rate") and row.get("dataset") not in (None, "synthetic-fixed",
                                                                                            "random"):
        lengths = DATASETS.get(row["dataset"], "")
        if lengths not in distributions():
            raise NotExpressed(f"no shipped histogram of the {row['dataset']} dataset's lengths (a histogram needs "
                               "its published source: the dataset's own length statistics with their address)")
    if scenario == "single_stream":
        prompt, output = LLAMACPP_PROMPT, LLAMACPP_OUTPUT
        if row.get("output_len"):
            output = int(row["output_len"])
        s = Priced(batch=1, prompt=prompt, output=output, weights=scheme, kv_bytes=kv, gpus=tp, tp=tp, engine=engine,
                   engine_version=version)
        return model, s, metric
    table = distributions().get(lengths, {})  # a data set's rows: traced at its median lengths, simulated drawn
    prompt = int(row.get("input_len") or table["median_prompt"])
    output = int(row.get("output_len") or table.get("median_output") or BATCH1_OUTPUT)
    if scenario == "static_batch":
        s = Priced(batch=int(row["batch"]), prompt=prompt, output=output, weights=scheme, kv_bytes=kv, gpus=tp,
                   tp=tp, engine=engine, knobs=knobs, engine_version=version)
        return model, s, metric
    sim = min(int(row.get("num_prompts") or SIM_REQUESTS), SIM_REQUESTS)
    rate = float(row.get("request_rate", math.inf))
    # a finite rate: Poisson arrivals (seeded), the rate split evenly over the row's data-parallel replicas
    rates = [rate / float(row.get("dp", 1))] if scenario == "request_rate" and math.isfinite(rate) else None
    s = Priced(batch=1, prompt=prompt, output=output, weights=scheme, kv_bytes=kv, gpus=tp, tp=tp, engine=engine,
               knobs=knobs, engine_version=version, simulate=(sim, sim),
               sim=Asked(prompt, output, sim, sim, rates=rates, lengths=lengths))
    return model, s, metric


def predict(row: dict[str, Any], traces: dict[Any, ServingTrace], efficiency: dict[str, float] | None = None) -> float:
    model, s, metric = priced_of(row)
    st = _trace(model, s.prompt, activation_dtype(s.weights), traces)
    out = serve(st, s, [get(row["gpu"])], max_context=None, efficiency=efficiency).rows[0]
    per = float(row.get("dp", 1)) / (row["n_gpus"] if metric.endswith("_per_gpu") else 1)
    if row["scenario"] in ("single_stream", "static_batch"):
        whole = out.ttft_s + (s.output - 1) * out.tpot_s
        if metric == "decode_tokens_per_s" or (metric == "output_tokens_per_s" and not row.get("output_len")):
            return 1 / out.tpot_s
        if metric == "prefill_tokens_per_s":
            return s.batch * s.prompt / out.ttft_s
        if metric == "ttft_ms_mean":
            return out.ttft_s * 1e3
        if metric == "e2e_latency_s_mean":
            return whole
        if metric.startswith("output_tokens_per_s"):
            return s.batch * s.output / whole * per
        raise NotExpressed(f"metric {metric}")
    sim = out.simulation
    if sim is None:
        raise NotExpressed("the engine's cache holds no request")
    if metric.startswith("output_tokens_per_s"):
        return sim["output_tokens_per_s"] * per
    if metric == "requests_per_s":
        return sim["requests"] / sim["duration_s"] * per
    name, _, stat = metric.rpartition("_")  # ttft_ms_p50: the ttft figure's p50
    if name.endswith("_ms"):
        # TensorRT-LLM's mean inter-token latency is per request, (end - first token) / (output - 1): TPOT's mean
        key = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "tpot_s", "e2e_latency": "e2e_s"}.get(name[:-3])
        if key is not None and stat in sim[key]:
            return sim[key][stat] * 1e3
    raise NotExpressed(f"metric {metric}")


def run_all(rows: list[dict[str, Any]], traces: dict[Any, ServingTrace],
            efficiency: Callable[[dict[str, Any]], dict[str, float] | None] | None = None,
            verbose: bool = True, save: Path | None = None) -> tuple[list[Predicted], list[str]]:
    got: list[Predicted] = []
    skipped: list[str] = []
    for row in rows:
        try:
            value = predict(row, traces, efficiency(row) if efficiency else None)
        except (NotExpressed, FootprintError) as e:
            skipped.append(f"{row['engine']} {row['model'].removeprefix('hf:')} {row['gpu']} {row['scenario']} "
                           f"{row['metric']}: {e}")
            if save:
                with save.open("a") as f:
                    f.write(json.dumps({"index": row.get("index"), "skip": skipped[-1]}) + "\n")
            continue
        got.append(Predicted(row, value))
        if save:
            with save.open("a") as f:
                f.write(json.dumps({"index": row.get("index"), "value": value}) + "\n")
        if verbose:
            print(f"  {row['engine']} {row['model']} {row['gpu']} {row['metric']}: {row['value']} -> {value:.2f}",
                  file=sys.stderr, flush=True)
    return got, skipped


def _med(xs: list[float]) -> float:
    return statistics.median(abs(x) for x in xs) if xs else float("nan")


def _p(xs: list[float], q: float) -> float:
    s = sorted(abs(x) for x in xs)
    return s[min(int(q * len(s)), len(s) - 1)] if s else float("nan")


def report(got: list[Predicted], skipped: list[str]) -> None:
    print(f"{'#':>3s} {'engine':12s} {'model':26s} {'gpu':13s} {'tp':>2s} {'scenario':10s} {'in/out':>11s} "
          f"{'metric':28s} {'printed':>11s} {'predicted':>11s} {'error':>7s}")
    for i, p in enumerate(got):
        r = p.row
        lens = f"{r.get('input_len') or '-'}/{r.get('output_len') or '-'}"
        b = f" b{r['batch']}" if r.get("batch") and r["scenario"] == "static_batch" else ""
        print(f"{i:3d} {r['engine'][:12]:12s} {r['model'].removeprefix('hf:').split('/')[-1][:26]:26s} "
              f"{r['gpu'][:13]:13s} {r['tp']:2d} {r['scenario'][:10]:10s} {lens + b:>11s} {r['metric'][:28]:28s} "
              f"{r['value']:11.2f} {p.value:11.2f} {100 * p.error:+6.1f}%")
    errs = [p.error for p in got]
    print(f"\n{len(got)} rows predicted, {len(skipped)} not expressed")
    if not errs:
        for s in skipped:
            print(f"not expressed: {s}")
        return
    print(f"median |error| {100 * _med(errs):.1f}%, p90 {100 * _p(errs, 0.9):.1f}%, worst "
          f"{100 * max(errs, key=abs):+.1f}%, signed median {100 * statistics.median(errs):+.1f}%")
    for title, key in (("source", source_of), ("engine", lambda r: r["engine"]),
                       ("scenario", lambda r: f"{r['scenario']} {r['metric']}")):
        groups: dict[str, list[float]] = defaultdict(list)
        for p in got:
            groups[key(p.row)].append(p.error)
        print(f"\nper {title}:")
        for k, xs in sorted(groups.items()):
            print(f"  {k:70s} {len(xs):4d} rows  median |error| {100 * _med(xs):5.1f}%  signed "
                  f"{100 * statistics.median(xs):+6.1f}%")
    b1 = [p.error for p in got if p.row["metric"] == "decode_tokens_per_s"
          or (p.row["metric"] == "output_tokens_per_s" and p.row.get("batch") == 1 and not p.row.get("output_len"))]
    print(f"\nbatch-1 decode: {len(b1)} rows, median |error| {100 * _med(b1):.1f}%")
    print()
    for s in skipped:
        print(f"not expressed: {s if len(s) < 240 else s[:237] + '...'}")


# ------------------------------------------------------------------------------ fitted constants

@dataclass
class Fit:
    """Speed constants of one engine's profile fitted to published rows: ``keys`` of its
    [speed] table, on the rows ``on`` selects, each row's time per token being (to the
    precision needed here) A / memory + N x overhead, A and N read off two exact predictions."""

    engine: str
    on: Callable[[dict[str, Any]], bool]
    what: str


# a row marked not_fitted (its reason beside it) is predicted and counted, but no constant is fitted to it
FITS = [Fit("llamacpp", lambda r: r["engine"] == "llama.cpp" and r["metric"] == "decode_tokens_per_s"
            and not r.get("not_fitted"),
            "llama.cpp batch-1 decode: memory (achieved bandwidth) and overhead_us (host time per operator)")]
MEMORY_GRID = [x / 100 for x in range(30, 101)]
OVERHEAD_GRID = [x / 4 for x in range(0, 121)]


def _with_speed(engine: str, **speed: float) -> None:
    """Make ``engine``'s profile use these speed figures (the library reads the profile)."""
    p = profiles()[engine]
    profiles()[engine] = replace(p, speed={**p.speed, **speed})


def _terms(row: dict[str, Any], engine: str, traces: dict[Any, ServingTrace]) -> tuple[float, float]:
    """(A, N): the row's seconds per token is A / memory + N x overhead seconds."""
    saved = profiles()[engine]
    try:
        _with_speed(engine, memory=1.0, overhead_us=0.0)
        t0 = 1 / predict(row, traces)
        _with_speed(engine, memory=1.0, overhead_us=1.0)
        t1 = 1 / predict(row, traces)
    finally:
        profiles()[engine] = saved
    return t0, (t1 - t0) / 1e-6


def _best(terms: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(memory, overhead_us) minimising the mean squared log error over (A, N, measured seconds)."""
    def loss(m: float, o: float) -> float:
        return sum(math.log((a / m + n * o * 1e-6) / t) ** 2 for a, n, t in terms)
    return min(((m, o) for m in MEMORY_GRID for o in OVERHEAD_GRID), key=lambda mo: loss(*mo))


def _prefill_terms(row: dict[str, Any], engine: str, traces: dict[Any, ServingTrace]) -> tuple[float, float]:
    """(C, D): the row's seconds per prompt token is C / matrix + D (the rest at the shipped figures)."""
    saved = profiles()[engine]
    try:
        _with_speed(engine, matrix=1.0)
        t1 = 1 / predict(row, traces)
        _with_speed(engine, matrix=0.5)
        t2 = 1 / predict(row, traces)
    finally:
        profiles()[engine] = saved
    return t2 - t1, 2 * t1 - t2


def prefill_fit_report(rows: list[dict[str, Any]], traces: dict[Any, ServingTrace]) -> dict[int, float]:
    """llama.cpp's prompt processing: its matrix fraction fitted, and left out by source and by GPU."""
    mine = [r for r in rows if r["engine"] == "llama.cpp" and r["metric"] == "prefill_tokens_per_s"]
    terms = [(*_prefill_terms(r, "llamacpp", traces), 1 / r["value"]) for r in mine]
    grid = [x / 100 for x in range(5, 101)]
    held: dict[int, float] = {}

    def best(ts: list[tuple[float, float, float]]) -> float:
        return min(grid, key=lambda m: sum(math.log((c / m + d) / t) ** 2 for c, d, t in ts))

    print(f"\nfitted: llama.cpp prompt processing: matrix {best(terms):.2f} on {len(terms)} rows")
    for name, group in (("source", source_of), ("GPU", lambda r: r["gpu"])):
        errs = []
        for k in sorted({group(r) for r in mine}):
            rest = [t for r, t in zip(mine, terms, strict=True) if group(r) != k]
            if not rest:
                print(f"  leave-one-{name}-out: {k}: no other {name} to fit on")
                continue
            m = best(rest)
            for r, (c, d, t) in zip(mine, terms, strict=True):
                if group(r) == k:
                    errs.append(t / (c / m + d) - 1)
                    held.setdefault(r["index"], errs[-1])
            print(f"  leave-one-{name}-out: without {k}: matrix {m:.2f}")
        if errs:
            print(f"  leave-one-{name}-out median |error| {100 * _med(errs):.1f}% over {len(errs)} rows")
    return held


def fit_report(rows: list[dict[str, Any]], traces: dict[Any, ServingTrace]) -> dict[int, float]:
    """Each fitted constant: its fit on every row, and each source (else GPU, model) left out in
    turn. Returns each row's error held out: by source where another source has rows, else by GPU."""
    held: dict[int, float] = {}
    for fit in FITS:
        mine = [r for r in rows if fit.on(r)]
        terms: dict[int, tuple[float, float, float]] = {}
        for i, r in enumerate(mine):
            try:
                a, n = _terms(r, fit.engine, traces)
            except (NotExpressed, FootprintError):
                continue
            terms[i] = (a, n, 1 / r["value"])
        m, o = _best(list(terms.values()))
        print(f"\nfitted: {fit.what}: memory {m:.2f}, overhead_us {o:.2f} on {len(terms)} rows; shipped "
              f"{profiles()[fit.engine].speed}")
        for name, group in (("source", source_of), ("GPU", lambda r: r["gpu"]), ("model", lambda r: r["model"])):
            keys = sorted({group(mine[i]) for i in terms})
            errs = []
            for k in keys:
                rest = [t for i, t in terms.items() if group(mine[i]) != k]
                if not rest:
                    print(f"  leave-one-{name}-out: {k}: no other {name} to fit on")
                    continue
                m_k, o_k = _best(rest)
                for i, (a, n, t) in terms.items():
                    if group(mine[i]) == k:
                        errs.append(t / (a / m_k + n * o_k * 1e-6) - 1)
                        held.setdefault(mine[i]["index"], errs[-1])
                print(f"  leave-one-{name}-out: without {k}: memory {m_k:.2f}, overhead_us {o_k:.2f}")
            if errs:
                print(f"  leave-one-{name}-out median |error| {100 * _med(errs):.1f}% over {len(errs)} rows")
    return held


def _arg(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def main() -> None:
    """``--only ENGINE``: that engine's rows; ``--source TEXT``: the rows whose source's short name
    holds TEXT; ``--rows A:B --save FILE``: rows A to B, each
    prediction appended to FILE as a JSON line (to split the run); ``--load FILE...``: report
    the saved predictions (comma-separated files) instead of predicting."""
    rows = tomllib.loads(DATA.read_text())["run"]
    for i, r in enumerate(rows):
        r["index"] = i
    only, span, save, load = _arg("--only"), _arg("--rows"), _arg("--save"), _arg("--load")
    if only:
        rows = [r for r in rows if r["engine"] == only]
    if (src := _arg("--source")) is not None:
        rows = [r for r in rows if src in source_of(r)]
    if span:
        a, b = (int(x) for x in span.split(":"))
        rows = [r for r in rows if a <= r["index"] < b]
    traces: dict[Any, ServingTrace] = {}
    if load:
        saved = [json.loads(line) for f in load.split(",") for line in Path(f).read_text().splitlines() if line]
        by = {d["index"]: d for d in saved}
        got = [Predicted(r, by[r["index"]]["value"]) for r in rows if "value" in by.get(r["index"], {})]
        skipped = [by[r["index"]]["skip"] for r in rows if "skip" in by.get(r["index"], {})]
        missing = [r["index"] for r in rows if r["index"] not in by]
        if missing:
            print(f"rows not in the saved predictions: {missing}")
    else:
        got, skipped = run_all(rows, traces, save=Path(save) if save else None)
    report(got, skipped)
    if "--no-loso" not in sys.argv:
        held = {**fit_report(rows, traces), **prefill_fit_report(rows, traces)}
        # rows whose constants were not fitted here (vLLM, SGLang, TensorRT-LLM: figures from
        # outside this database) are held out as they stand
        held_out_report(got, held)


def held_out_report(got: list[Predicted], held: dict[int, float]) -> None:
    """Every row's error with the constants fitted here refitted without it (its source, or its
    GPU where its source is the only one that fits them), overall and per source; rows no fitted
    constant touches stand as predicted."""
    out = [held.get(p.row["index"], p.error) for p in got]
    print(f"\nheld out (every fitted constant refitted without the row's source, or its GPU where the "
          f"source is the only one): {len(out)} rows, median |error| {100 * _med(out):.1f}%, p90 "
          f"{100 * _p(out, 0.9):.1f}%")
    groups: dict[str, list[float]] = defaultdict(list)
    refitted: dict[str, int] = defaultdict(int)
    for p in got:
        groups[source_of(p.row)].append(held.get(p.row["index"], p.error))
        refitted[source_of(p.row)] += p.row["index"] in held
    for k, xs in sorted(groups.items()):
        print(f"  {k:70s} {len(xs):4d} rows  median |error| {100 * _med(xs):5.1f}%  ({refitted[k]} refitted)")


if __name__ == "__main__":
    main()
