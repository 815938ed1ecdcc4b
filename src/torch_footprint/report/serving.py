"""The language-model page's section (``footprint llm``): memory needed against the context
beside each accelerator's capacity, tokens per second against the batch, and the table. The
charts and the table read the same rows: an accelerator the model does not fit is said so
and given no speed."""

from __future__ import annotations

from typing import Any

from .simulation import simulation_charts
from .svg import Linear, Log, byte_ticks, esc, num, open_svg, polyline_points, spread, x_axis, y_axis
from .units import binary, duration

SHOWN = 8  # accelerators drawn: the fastest that fit


def drawn_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows the charts draw: those that fit, the fastest at their largest batch first."""
    rows = [r for r in res.get("accelerators") or [] if r.get("fits") and r.get("memory_by_context")]
    return sorted(rows, key=lambda r: -(r.get("max_batch_tokens_per_s") or 0))[:SHOWN]


def _memory_chart(res: dict[str, Any], shown: list[dict[str, Any]]) -> tuple[str, str]:
    W, H, L, R, T, B = 1000, 340, 100, 190, 34, 50
    ctx = [c for c, _ in shown[0]["memory_by_context"]]
    xs = Log(max(ctx[0], 1), max(ctx[-1], 2), L, W - R)
    need_hi = max(max(b for _, b in r["memory_by_context"]) for r in shown)
    caps = sorted({r["memory_bytes"] for r in shown})
    top = max(need_hi, caps[0]) * 1.1  # the curve and at least the smallest capacity; larger ones named below
    ys = Linear(0, top, H - B, T)
    parts = [open_svg(W, H, "memory against context", "llm-memory"),
             f'<text class="pt" x="{L}" y="14">memory needed against the context, at batch {res.get("batch")}</text>',
             y_axis(ys, L, W - R, binary, "memory needed", ticks=byte_ticks(0, top))]
    curves: dict[tuple[Any, ...], list[str]] = {}  # identical curves drawn once, named together
    for r in shown:
        curves.setdefault(tuple(map(tuple, r["memory_by_context"])), []).append(r["accelerator"])
    for pts, names in curves.items():
        clipped = [(c, min(b, top)) for c, b in pts]
        path = polyline_points([xs(c) for c, _ in clipped], [ys(b) for _, b in clipped])
        parts.append(f'<path class="ceil" d="{path}" data-tip="{esc(", ".join(names))}: memory needed at batch '
                     f'{res.get("batch")}, up to {esc(binary(pts[-1][1]))} at {pts[-1][0]:,} tokens"/>')
    in_range = [c for c in caps if c <= top]
    by_cap = {c: [r["accelerator"] for r in shown if r["memory_bytes"] == c] for c in in_range}
    label_y = spread([ys(c) + 4 for c in in_range], 13, T + 4, H - B)
    for c, ly in zip(in_range, label_y):
        yc = ys(c)
        names = ", ".join(by_cap[c])
        names = names if len(names) <= 28 else names[:27] + "…"
        parts.append(f'<line class="cap" x1="{L}" x2="{W - R}" y1="{num(yc)}" y2="{num(yc)}" '
                     f'data-tip="{esc(", ".join(by_cap[c]))}: capacity {esc(binary(c))}"/>'
                     f'<text class="tl" x="{W - R + 6}" y="{num(ly)}">{esc(names)} {esc(binary(c))}</text>')
    parts.append(x_axis(xs, H - B, lambda v: f"{int(v):,}", "context (tokens)"))
    parts.append("</svg>")
    above = [r["accelerator"] for r in shown if r["memory_bytes"] > top]
    note = f"; above this scale: {', '.join(above)}" if above else ""
    return "".join(parts), note


def _tokens_chart(shown: list[dict[str, Any]]) -> str:
    tps = [r for r in shown if r.get("tokens_by_batch")]
    if not tps:
        return ""
    W, H, L, R, T, B = 1000, 340, 100, 190, 34, 50
    bmax = max(b for r in tps for b, _ in r["tokens_by_batch"])
    tmin = min(t for r in tps for _, t in r["tokens_by_batch"])
    tmax = max(t for r in tps for _, t in r["tokens_by_batch"])
    xb = Log(1, max(bmax, 2), L, W - R)
    yt = Log(max(tmin * 0.8, 1e-3), tmax * 1.25, H - B, T)
    parts = [open_svg(W, H, "tokens per second against batch", "llm-batch"),
             f'<text class="pt" x="{L}" y="14">output tokens per second (all requests, their prefill '
             "included) against the batch, up to the largest that fits</text>",
             y_axis(yt, L, W - R, lambda v: f"{v:,.0f}" if v >= 1 else f"{v:.2g}", "tokens/s (all requests)")]
    ends = [yt(r["tokens_by_batch"][-1][1]) + 4 for r in tps]
    for r, ly in zip(tps, spread(ends, 13, T + 4, H - B)):
        pts = r["tokens_by_batch"]
        path = polyline_points([xb(b) for b, _ in pts], [yt(t) for _, t in pts])
        parts.append(f'<path class="ceil" d="{path}" data-tip="{esc(r["accelerator"])}: up to batch {pts[-1][0]:,}, '
                     f'{pts[-1][1]:,.0f} tokens/s"/>'
                     f'<text class="tl" x="{W - R + 6}" y="{num(ly)}">{esc(r["accelerator"])} '
                     f'{pts[-1][1]:,.0f}/s</text>')
    parts.append(x_axis(xb, H - B, lambda v: f"{int(v):,}", "batch (concurrent requests)"))
    parts.append("</svg>")
    return "".join(parts)


def _table(rows: list[dict[str, Any]]) -> str:
    def speed(r: dict[str, Any]) -> str:
        if not r["fits"]:
            return '<td class="no" colspan="5">does not fit</td>'
        return (f"<td>{r['max_batch']:,}</td><td>{r['max_context']:,}</td><td>{esc(duration(r['ttft_s']))}</td>"
                f"<td>{esc(duration(r['tpot_s']))}</td><td>{(r.get('tokens_per_s') or 0):,.1f}</td>")

    body = "".join(f"<tr><td>{esc(r['accelerator'])}</td><td>{esc(binary(r['total_bytes']))}</td>"
                   f"<td>{esc(binary(r['memory_bytes']))}</td>{speed(r)}</tr>" for r in rows)
    return ("<table><thead><tr><th>accelerator</th><th>needs</th><th>has</th><th>max batch</th><th>max context</th>"
            f"<th>TTFT</th><th>per token</th><th>tokens/s</th></tr></thead><tbody>{body}</tbody></table>")


def serving(doc: dict[str, Any]) -> str:
    """A language model served: the charts over the accelerators that fit (the fastest eight),
    and every accelerator's row in the table."""
    res = doc.get("llm") or {}
    rows = [r for r in res.get("accelerators") or [] if r.get("memory_by_context")]
    if not rows:
        return ""
    shown = drawn_rows(res)
    charts, above = _memory_chart(res, shown) if shown else ("", "")
    charts += _tokens_chart(shown)
    drawn = (f"the {len(shown)} accelerators with the highest throughput at their largest batch, of those that fit, "
             "are drawn" if shown else "no accelerator fits, so none is drawn")
    note = ('<p class="note">Memory: weights + runtime + the larger of (KV cache at the prompt + the prefill\'s '
            f"activations) and (KV cache at the full context), per rank; {drawn}{esc(above)}.</p>")
    return charts + _table(rows) + note + simulation_charts(rows)
