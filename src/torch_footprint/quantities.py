"""Sizes and times as people type them: ``24GiB``, ``80GB``, ``10ms``."""

from __future__ import annotations

import math
import re

from .errors import FootprintError

_BYTES = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20,
          "gib": 2**30, "tib": 2**40, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_bytes(text: str | int) -> int:
    """``24GiB``, ``24GB``, ``512MiB``, ``1.5TiB`` or a plain number of bytes."""
    if isinstance(text, int):
        return text
    raw = text.strip().lower().replace(" ", "")
    num = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(num):] or "b"
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


def parse_seconds(value: float | str) -> float:
    """'10ms', '250us', '1.5s' or a number of seconds."""
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
    if not s > 0:
        raise FootprintError(f"cannot read the latency '{value}': use a positive time such as 10ms")
    return s
