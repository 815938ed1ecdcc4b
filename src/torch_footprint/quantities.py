"""Sizes and times as people type them: ``24GiB``, ``80GB``, ``10ms``.

Text must carry its unit: a bare ``24`` could be bytes or GiB, a bare ``10`` seconds or
milliseconds, so it is refused with the units to add (``0`` alone is zero in any unit). A
number given from Python is in the base unit, bytes or seconds, as the docstrings say."""

from __future__ import annotations

import math
import re

from .errors import FootprintError

_BYTES = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20,
          "gib": 2**30, "tib": 2**40, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_bytes(text: str | int, what: str = "memory size") -> int:
    """``24GiB``, ``24GB``, ``512MiB``, ``1.5TiB``, ``4096B``; a Python int is a number of bytes.
    Text without a unit is refused (but ``0``): ``24`` could be bytes or GiB."""
    if isinstance(text, int):
        return text
    raw = text.strip().lower().replace(" ", "")
    num = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(num):]
    if not unit and num:
        if _is_zero(num):
            return 0
        raise FootprintError(f"the {what} '{text.strip()}' has no unit: write {num}GiB, {num}GB or {num}MiB "
                             f"(or {num}B for bytes)")
    if unit not in _BYTES or not num:
        raise FootprintError(f"cannot read the memory size '{text}': use e.g. 24GiB, 80GB or 512MiB")
    try:
        value = float(num)
    except ValueError:
        raise FootprintError(f"cannot read the memory size '{text}': use e.g. 24GiB, 80GB or 512MiB") from None
    if value < 0:
        raise FootprintError(f"a memory size cannot be negative, got '{text}'")
    if not math.isfinite(value * _BYTES[unit]):
        raise FootprintError(f"the memory size '{text}' is not a finite number of bytes")
    return int(value * _BYTES[unit])


def _is_zero(num: str) -> bool:
    try:
        return float(num) == 0
    except ValueError:
        return False


def parse_seconds(value: float | str) -> float:
    """'10ms', '250us', '1.5s'; a Python number is seconds. Text without a unit is refused:
    ``10`` could be seconds or milliseconds."""
    if isinstance(value, int | float):
        s: float | None = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(ms|us|µs|s)?\s*", value.lower())
        try:
            s = float(m[1]) * {"ms": 1e-3, "us": 1e-6, "µs": 1e-6}.get(m[2] or "s", 1.0) if m else None
        except ValueError:
            s = None
        if s is None:
            raise FootprintError(f"cannot read the latency '{value}': use e.g. 10ms, 250us or 0.5s")
        if m and not m[2] and s > 0:
            raise FootprintError(f"the latency '{value.strip()}' has no unit: write {m[1]}ms or {m[1]}s")
    if not s > 0:
        raise FootprintError(f"cannot read the latency '{value}': use a positive time such as 10ms")
    return s
