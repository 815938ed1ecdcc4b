"""The requests a simulated server is sent (:class:`~.simulate.Sent`): their lengths fixed,
drawn from a shipped histogram of a real service's lengths (``lengths.toml``, each with its
source), or read from a trace file; their times from a Poisson process at a rate (seeded, so
a run is reproducible; an infinite rate sends them all at once) or from the trace."""

from __future__ import annotations

import csv
import json
import math
import random
from functools import cache
from pathlib import Path
from typing import Any

from ...errors import FootprintError
from .simulate import Sent

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

# the names a trace's columns may have (vLLM's custom datasets, Vidur's and Splitwise's traces)
TIME_KEYS = ("arrival", "arrived_at", "timestamp", "time", "at")
PROMPT_KEYS = ("input_tokens", "prompt_tokens", "num_prefill_tokens", "ContextTokens", "prompt", "input")
OUTPUT_KEYS = ("output_tokens", "num_decode_tokens", "GeneratedTokens", "completion_tokens", "output")


@cache
def distributions() -> dict[str, dict[str, Any]]:
    """The shipped length histograms, by name."""
    return tomllib.loads(Path(__file__).with_name("lengths.toml").read_text())


def parse_rates(text: str) -> list[float]:
    """``--request-rate``: requests per second, one or several (``1,2,4,8``); ``inf`` sends
    every request at once."""
    rates = []
    for item in str(text).split(","):
        try:
            r = float(item.strip())
        except ValueError:
            raise FootprintError(f"--request-rate takes requests per second (e.g. 4, 1,2,4,8 or inf), got "
                                 f"'{text}'") from None
        if not r > 0 or math.isnan(r):
            raise FootprintError(f"--request-rate must be more than 0 requests per second, got '{item.strip()}'")
        rates.append(r)
    return rates


def poisson_times(n: int, rate: float, seed: int) -> list[float]:
    """``n`` send times of a Poisson process of ``rate`` per second (exponential gaps of mean
    1 / rate, from a generator seeded with ``seed``); all 0 at an infinite rate."""
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


def drawn(name: str, n: int, seed: int, most: int | None = None) -> list[tuple[int, int]]:
    """``n`` (prompt, output) pairs drawn from the shipped histogram ``name``: a cell by its
    count, then each length uniformly within the cell's edges; with ``most`` (the engine's
    longest request), a prompt cut so that prompt + output fits."""
    table = distributions().get(name)
    if table is None:
        raise FootprintError(f"no length distribution '{name}' (shipped: fixed, {', '.join(distributions())})")
    ie, oe, counts = table["input_edges"], table["output_edges"], table["counts"]
    cells = [(i, j) for i, row in enumerate(counts) for j, c in enumerate(row) if c]
    weights = [counts[i][j] for i, j in cells]
    rng = random.Random(seed)
    out = []
    for i, j in rng.choices(cells, weights, k=n):
        p = rng.randrange(ie[i], ie[i + 1])
        o = rng.randrange(oe[j], oe[j + 1])
        if most:
            o = min(o, most - 1)
            p = max(min(p, most - o), 1)
        out.append((p, o))
    return out


def read_trace(path: str) -> list[tuple[float | None, int, int]]:
    """(send time or None, prompt tokens, output tokens) of every row of a JSONL or CSV trace
    file; a malformed file is one clear error."""
    p = Path(path)
    if not p.is_file():
        raise FootprintError(f"--request-trace: no file '{path}'")
    text = p.read_text(errors="replace")
    rows: list[dict[str, Any]] = []
    if p.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        for k, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise FootprintError(f"{path}, line {k}: not JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise FootprintError(f"{path}, line {k}: a request is an object, got {type(row).__name__}")
            rows.append(row)
    else:
        rows = list(csv.DictReader(text.splitlines()))
    if not rows:
        raise FootprintError(f"{path}: no requests")
    out = []
    for k, row in enumerate(rows, 1):
        at = _field(row, TIME_KEYS, float, path, k, required=False)
        prompt = _field(row, PROMPT_KEYS, int, path, k)
        output = _field(row, OUTPUT_KEYS, int, path, k)
        if prompt is None or output is None or prompt < 1 or output < 1:
            raise FootprintError(f"{path}, request {k}: prompt and output must be at least 1 token, got "
                                 f"{prompt} and {output}")
        if at is not None and (at < 0 or math.isnan(at)):
            raise FootprintError(f"{path}, request {k}: a send time cannot be negative, got {at}")
        out.append((at, prompt, output))
    timed = {at is not None for at, _, _ in out}
    if len(timed) > 1:
        raise FootprintError(f"{path}: some requests have a send time and some do not")
    return out


def _field(row: dict[str, Any], keys: tuple[str, ...], kind: type, path: str, k: int,
           required: bool = True) -> Any:
    for key in keys:
        if key in row and row[key] not in (None, ""):
            try:
                value = kind(float(row[key])) if kind is int else kind(row[key])
            except (TypeError, ValueError):
                raise FootprintError(f"{path}, request {k}: '{key}' is not a number: {row[key]!r}") from None
            if kind is int and float(row[key]) != value:
                raise FootprintError(f"{path}, request {k}: '{key}' is not a whole number of tokens: {row[key]!r}")
            return value
    if required:
        raise FootprintError(f"{path}, request {k}: no {' or '.join(keys[:3])} column")
    return None


def stream(n: int, *, prompt: int, output: int, lengths: str = "fixed", trace: str | None = None,
           rate: float | None = None, seed: int = 0, most: int | None = None) -> list[Sent]:
    """The requests: ``n`` of them (a trace's rows, at most ``n`` where given), their lengths
    fixed (``prompt`` + ``output``), drawn from ``lengths`` or the trace's, their times a
    Poisson process at ``rate`` (else the trace's, else 0: a closed loop sets them)."""
    if trace is not None:
        rows = read_trace(trace)[:n] if n else read_trace(trace)
        if most:
            long = [k for k, (_, p, o) in enumerate(rows, 1) if p + o > most]
            if long:
                raise FootprintError(f"{trace}, request {long[0]}: {rows[long[0] - 1][1]:,} + "
                                     f"{rows[long[0] - 1][2]:,} tokens is longer than the engine's longest request, "
                                     f"{most:,} (max_model_len)")
        times = poisson_times(len(rows), rate, seed) if rate is not None else [at or 0.0 for at, _, _ in rows]
        start = min(times) if rate is None and times else 0.0
        return [Sent(t - start, p, o) for t, (_, p, o) in zip(times, rows, strict=True)]
    pairs = [(prompt, output)] * n if lengths == "fixed" else drawn(lengths, n, seed, most)
    times = poisson_times(n, rate, seed + 1) if rate is not None else [0.0] * n
    return [Sent(t, p, o) for t, (p, o) in zip(times, pairs, strict=True)]


def timed(trace: str | None) -> bool:
    """Whether a trace file gives its requests' send times."""
    return trace is not None and read_trace(trace)[0][0] is not None
