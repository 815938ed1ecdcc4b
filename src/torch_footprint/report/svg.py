"""Inline SVG drawn in Python: axes, ticks and marks for the HTML report. No plotting
library and no JavaScript: each function returns SVG text. Coordinates are rounded to
one decimal so that large plots stay light."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

Fmt = Callable[[float], str]


def esc(text: object) -> str:
    return escape(str(text), quote=True)


def num(x: float) -> str:
    """A coordinate: one decimal, no trailing zero."""
    r = round(x, 1)
    return str(int(r)) if r == int(r) else f"{r:.1f}"


class Linear:
    """A linear scale from [lo, hi] to [a, b] (pixels)."""

    def __init__(self, lo: float, hi: float, a: float, b: float) -> None:
        self.lo, self.hi, self.a, self.b = lo, hi if hi > lo else lo + 1, a, b

    def __call__(self, v: float) -> float:
        return self.a + (v - self.lo) / (self.hi - self.lo) * (self.b - self.a)

    def ticks(self, n: int = 5) -> list[float]:
        span = self.hi - self.lo
        raw = span / max(n, 1)
        mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
        step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
        first = math.ceil(self.lo / step) * step
        out = []
        v = first
        while v <= self.hi + 1e-9 * span:
            out.append(v)
            v += step
        return out


class Log:
    """A base-10 log scale from [lo, hi] (both > 0) to [a, b]."""

    def __init__(self, lo: float, hi: float, a: float, b: float) -> None:
        self.l0, self.l1 = math.log10(lo), math.log10(hi if hi > lo else lo * 10)
        self.a, self.b = a, b

    def __call__(self, v: float) -> float:
        return self.a + (math.log10(max(v, 1e-300)) - self.l0) / (self.l1 - self.l0) * (self.b - self.a)

    def ticks(self) -> list[float]:
        """Powers of ten; over less than three decades, 2 and 5 times them too."""
        lo, hi = 10 ** self.l0, 10 ** self.l1
        steps = (1.0,) if self.l1 - self.l0 >= 3 else (1.0, 2.0, 5.0)
        return [m * 10.0 ** k for k in range(math.floor(self.l0), math.ceil(self.l1) + 1) for m in steps
                if lo * (1 - 1e-9) <= m * 10.0 ** k <= hi * (1 + 1e-9)]


def byte_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Ticks of a byte axis at round binary sizes (8 GiB, 16 GiB, ..., not 9.31 GiB): a round
    step in the largest binary unit under ``hi``."""
    unit = next((u for u in (2**40, 2**30, 2**20, 2**10) if hi >= u), 1)
    raw = (hi - lo) / unit / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw) * unit
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def log_byte_ticks(lo: float, hi: float, n: int = 8) -> list[float]:
    """Ticks of a log byte axis at powers of two (1 MiB, 4 MiB, ..., 1 GiB, 4 GiB), at most ``n``."""
    k0, k1 = math.ceil(math.log2(max(lo, 1))), math.floor(math.log2(max(hi, 1)))
    every = max(1, math.ceil((k1 - k0 + 1) / n))
    return [2.0 ** k for k in range(k0, k1 + 1) if k % every == 0]


def spread(ys: Sequence[float], gap: float = 12.0, lo: float = -math.inf, hi: float = math.inf) -> list[float]:
    """Label positions near ``ys`` (pixels), at least ``gap`` apart, kept within [lo, hi]: end
    labels of lines that meet, and capacity lines close together, stay readable."""
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    out = list(map(float, ys))
    prev = -math.inf
    for i in order:  # push down past the one above
        out[i] = max(out[i], prev + gap, lo)
        prev = out[i]
    nxt = math.inf
    for i in reversed(order):  # and back up from the bottom edge
        out[i] = min(out[i], nxt - gap, hi)
        nxt = out[i]
    return out


def open_svg(width: int, height: int, label: str, cls: str) -> str:
    return (f'<svg class="plot {cls}" viewBox="0 0 {width} {height}" width="100%" role="img" '
            f'aria-label="{esc(label)}">')


def x_axis(scale: Linear | Log, y: float, fmt: Fmt, title: str, ticks: Sequence[float] | None = None) -> str:
    ts = ticks if ticks is not None else scale.ticks()
    parts = [f'<line class="axis" x1="{num(scale.a)}" x2="{num(scale.b)}" y1="{num(y)}" y2="{num(y)}"/>']
    for t in ts:
        x = scale(t)
        parts.append(f'<line class="tick" x1="{num(x)}" x2="{num(x)}" y1="{num(y)}" y2="{num(y + 4)}"/>'
                     f'<text class="tl" x="{num(x)}" y="{num(y + 16)}" text-anchor="middle">{esc(fmt(t))}</text>')
    mid = (scale.a + scale.b) / 2
    parts.append(f'<text class="at" x="{num(mid)}" y="{num(y + 32)}" text-anchor="middle">{esc(title)}</text>')
    return "".join(parts)


def y_axis(scale: Linear | Log, x: float, x2: float, fmt: Fmt, title: str,
           ticks: Sequence[float] | None = None) -> str:
    """Ticks with grid lines across to ``x2``, labels left of ``x``."""
    parts = [f'<line class="axis" x1="{num(x)}" x2="{num(x)}" y1="{num(scale.a)}" y2="{num(scale.b)}"/>']
    for t in (ticks if ticks is not None else scale.ticks()):
        y = scale(t)
        parts.append(f'<line class="grid" x1="{num(x)}" x2="{num(x2)}" y1="{num(y)}" y2="{num(y)}"/>'
                     f'<text class="tl" x="{num(x - 6)}" y="{num(y + 4)}" text-anchor="end">{esc(fmt(t))}</text>')
    mid = (scale.a + scale.b) / 2
    parts.append(f'<text class="at" transform="translate({num(x - 84)},{num(mid)}) rotate(-90)" '
                 f'text-anchor="middle">{esc(title)}</text>')
    return "".join(parts)


def polyline_points(xs: Sequence[float], ys: Sequence[float]) -> str:
    """``M x y L x y ...`` with repeated y runs collapsed to their ends (steps stay exact)."""
    out: list[str] = []
    n = len(xs)
    for i in range(n):
        if 0 < i < n - 1 and ys[i] == ys[i - 1] and ys[i] == ys[i + 1]:
            continue
        out.append(f"{num(xs[i])} {num(ys[i])}")
    return "M" + "L".join(out)


def legend(items: Sequence[tuple[str, str]], x: float, y: float, step: float = 130) -> str:
    """Swatches in a row: (css class of the swatch, label)."""
    parts = []
    for i, (cls, label) in enumerate(items):
        xi = x + i * step
        parts.append(f'<rect class="{cls}" x="{num(xi)}" y="{num(y - 9)}" width="10" height="10"/>'
                     f'<text class="tl" x="{num(xi + 14)}" y="{num(y)}">{esc(label)}</text>')
    return "".join(parts)


def hbars(rows: Sequence[tuple[str, float, str]], fmt: Fmt, title: str, cls: str, width: int = 460,
          label_w: int = 170) -> str:
    """Horizontal bars: (label, value, tooltip) per row, one scale from 0 to the largest value,
    each bar's value written after it."""
    bar_h, gap, top = 16, 4, 24
    height = top + len(rows) * (bar_h + gap) + 8
    hi = max((v for _, v, _ in rows), default=0) or 1
    sc = Linear(0, hi, label_w, width - 80)
    room = max(int(label_w / 6.6) - 1, 8)  # characters that fit left of the bars at 11px
    parts = [open_svg(width, height, title, f"bars {cls}"), f'<text class="pt" x="4" y="14">{esc(title)}</text>']
    for i, (label, v, tip) in enumerate(rows):
        y = top + i * (bar_h + gap)
        w = max(sc(v) - label_w, 0)
        short = label if len(label) <= room else "…" + label[-(room - 1):]
        parts.append(f'<text class="tl" x="{label_w - 6}" y="{num(y + 12)}" text-anchor="end">{esc(short)}</text>'
                     f'<rect class="bar {cls}" x="{label_w}" y="{num(y)}" width="{num(w)}" height="{bar_h}" '
                     f'data-tip="{esc(tip)}"/>'
                     f'<text class="tl" x="{num(label_w + w + 4)}" y="{num(y + 12)}">{esc(fmt(v))}</text>')
    parts.append("</svg>")
    return "".join(parts)
