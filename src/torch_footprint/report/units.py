"""Number formatting: memory in binary units, counts and rates in decimal, always with a unit."""

from __future__ import annotations

_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K"))
_BIN = ((2**50, "PiB"), (2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def si(value: float, unit: str = "", digits: int = 3) -> str:
    """``8.24e9, "FLOP"`` -> ``"8.24 GFLOP"`` (decimal prefixes, 3 significant digits)."""
    v = float(value)
    for scale, prefix in _SI:
        if abs(v) >= scale:
            return f"{_sig(v / scale, digits)} {prefix}{unit}"
    return f"{_sig(v, digits)} {unit}".rstrip() if v != int(v) else f"{int(v)} {unit}".rstrip()


def _sig(x: float, digits: int) -> str:
    if x == 0:
        return "0"
    mag = len(str(int(abs(x)))) if abs(x) >= 1 else 1
    decimals = max(0, digits - mag)
    return f"{x:.{decimals}f}"


def binary(nbytes: float) -> str:
    """``102_760_448`` -> ``"98.0 MiB"`` (binary prefixes)."""
    v = float(nbytes)
    for scale, unit in _BIN:
        if abs(v) >= scale:
            return f"{_sig(v / scale, 3)} {unit}"
    return f"{int(v)} B"


def count(n: int) -> str:
    """``25557032`` -> ``"25.6 M"``."""
    return si(n, "") if n >= 1000 else str(n)


def percent(x: float) -> str:
    return f"{100 * x:.1f}%"


def shape(shapes: list[list[int]]) -> str:
    if not shapes:
        return ""
    first = "x".join(str(d) for d in shapes[0]) or "scalar"
    return first + (f" (+{len(shapes) - 1})" if len(shapes) > 1 else "")


def duration(seconds: float) -> str:
    """``0.00135`` -> ``"1.35 ms"`` (s, ms, µs or ns, 3 significant digits)."""
    s = float(seconds)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(s) >= scale:
            return f"{_sig(s / scale, 3)} {unit}"
    return f"{_sig(s / 1e-9, 3)} ns" if s else "0 s"
