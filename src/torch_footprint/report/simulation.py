"""The serving simulation's charts on the language-model page: throughput against latency
over the request rates swept (each accelerator a line, a point per rate), and the cache's
use over the first run. Drawn from the saved figures; nothing computed."""

from __future__ import annotations

from typing import Any

from .svg import Linear, Log, esc, num, open_svg, polyline_points, spread, x_axis, y_axis
from .units import duration

W, H, L, R, T, B = 1000, 340, 100, 190, 34, 50


def _sweep_chart(rows: list[dict[str, Any]]) -> str:
    swept = [r for r in rows if len((r.get("simulation") or {}).get("sweep") or []) > 1]
    if not swept:
        return ""
    pts = {r["accelerator"]: [(s["output_tokens_per_s"], s["e2e_s"]["p50"], s["request_rate"])
                              for s in r["simulation"]["sweep"]] for r in swept}
    xs_all = [x for p in pts.values() for x, _, _ in p]
    ys_all = [y for p in pts.values() for _, y, _ in p if y > 0]
    if not ys_all:
        return ""
    xs = Linear(0, max(xs_all) * 1.1 or 1.0, L, W - R)
    ys = Log(min(ys_all) * 0.8, max(ys_all) * 1.25, H - B, T)
    parts = [open_svg(W, H, "throughput against latency", "llm-sweep"),
             f'<text class="pt" x="{L}" y="14">simulated: output tokens per second against the median request '
             "latency, one point per request rate</text>",
             y_axis(ys, L, W - R, duration, "latency p50")]
    ends = [ys(p[-1][1]) + 4 for p in pts.values()]
    for (name, p), ly in zip(pts.items(), spread(ends, 13, T + 4, H - B)):
        parts.append(f'<path class="ceil" d="{polyline_points([xs(x) for x, _, _ in p], [ys(y) for _, y, _ in p])}"/>')
        for x, y, rate in p:
            parts.append(f'<circle class="pt" r="4" cx="{num(xs(x))}" cy="{num(ys(y))}" data-tip="{esc(name)} at '
                         f'{rate:g} req/s: {x:,.0f} tokens/s, latency p50 {esc(duration(y))}"/>')
        parts.append(f'<text class="tl" x="{W - R + 6}" y="{num(ly)}">{esc(name)}</text>')
    parts.append(x_axis(xs, H - B, lambda v: f"{v:,.0f}", "output tokens/s"))
    parts.append("</svg>")
    return "".join(parts)


def _cache_chart(rows: list[dict[str, Any]]) -> str:
    r = next((r for r in rows if (r.get("simulation") or {}).get("kv_over_time")), None)
    if r is None:
        return ""
    pts = r["simulation"]["kv_over_time"]
    end = pts[-1][0] or 1.0
    xs = Linear(0, end, L, W - R)
    ys = Linear(0, 1.0, H - B, T)
    path = polyline_points([xs(t) for t, _ in pts], [ys(f) for _, f in pts])
    return "".join([open_svg(W, H, "KV cache in use over time", "llm-kv"),
                    f'<text class="pt" x="{L}" y="14">simulated: the KV cache in use over the run, '
                    f"{esc(r['accelerator'])} (the highest in each slice of time)</text>",
                    y_axis(ys, L, W - R, lambda v: f"{100 * v:.0f}%", "cache in use"),
                    f'<path class="ceil" d="{path}" data-tip="{esc(r["accelerator"])}: at most '
                    f'{100 * max(f for _, f in pts):.0f}% of the cache"/>',
                    x_axis(xs, H - B, lambda v: duration(v), "time"), "</svg>"])


def simulation_charts(rows: list[dict[str, Any]]) -> str:
    """The sweep's and the cache's charts, where the rows have them."""
    return _sweep_chart(rows) + _cache_chart(rows)
