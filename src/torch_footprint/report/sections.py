"""The report's sections: each draws one part of a saved result (a dict) as HTML, inline SVG
from ``report/svg.py``, nothing computed; :data:`SECTIONS` is their order on the page, each
with the key of the result it reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .serving import serving
from .svg import (
    Linear,
    Log,
    byte_ticks,
    esc,
    hbars,
    legend,
    log_byte_ticks,
    num,
    open_svg,
    polyline_points,
    x_axis,
    y_axis,
)
from .units import binary, count, duration, percent, si

# torch.profiler's memory timeline colours (torch/profiler/_memory_profiler.py, _CATEGORY_TO_COLORS)
CATEGORY_COLOURS = {"parameter": "darkgreen", "optimizer state": "goldenrod", "input": "black",
                    "activation": "red", "gradient": "mediumblue", "autograd detail": "royalblue",
                    "temporary": "mediumpurple"}
BOUND_CLASSES = {"compute": "b-compute", "memory": "b-memory", "overhead": "b-overhead"}

Section = Callable[[dict[str, Any]], str]


def _cat_class(name: str) -> str:
    return "c-" + name.replace(" ", "-")


def workload_line(doc: dict[str, Any]) -> str:
    lm = doc.get("llm")
    if lm:
        tp = f" · {lm['gpus']} GPUs, tensor parallel {lm['tp']}" if lm.get("gpus", 1) > 1 else ""
        return (f"serving: batch {lm['batch']} · prompt {lm['prompt']:,} + output {lm['output']:,} tokens · "
                f"weights {lm['weights_scheme']} · KV cache {lm['kv_scheme']}{tp}")
    s = doc.get("settings") or {}
    inputs = ", ".join("x".join(str(d) for d in i.get("shape", [])) + f":{i.get('dtype')}"
                       for i in doc.get("inputs") or [])
    if s.get("backward"):
        what = f"training step ({s.get('optimizer') or 'no optimizer'}, {s.get('precision', 'fp32')}"
        what += ", checkpointing)" if s.get("checkpointing") else ")"
    else:
        what = "inference" + (f" ({s['precision']})" if s.get("precision") not in (None, "fp32") else "")
    return f"input {inputs or '(none)'} · {what}"


def _card(value: str, label: str) -> str:
    return f'<div class="card"><b>{esc(value)}</b><span>{esc(label)}</span></div>'


def cards(doc: dict[str, Any]) -> str:
    """The summary on top: one card per headline figure, each with its unit."""
    out = []
    p = doc.get("profile")
    if p:
        out += [_card(f"{count(p['params'])}", f"parameters ({binary(p['param_bytes'])})"),
                _card(si(p["forward"]["flops"], "FLOP"), f"forward ({si(p['forward']['macs'], 'MAC')})")]
        if "backward" in p:
            out.append(_card(si(p["backward"]["flops"], "FLOP"), "backward"))
    mem = doc.get("memory")
    if mem:
        pk = mem["peak"]
        out.append(_card(binary(pk["peak_bytes"]), f"peak memory ({pk['phase']})"))
        out.append(_card(binary(mem["provision_bytes"]), f"to provision (at {mem['utilisation']:.0%} utilisation)"))
    pred, acc = doc.get("predict"), doc.get("accelerator")
    if pred:
        name = acc["name"] if acc else pred["accelerator"]
        out.append(_card(duration(pred["time_s"]), f"predicted on {name} ({pred['bound']}-bound)"))
    fit = doc.get("fit")
    if fit:
        out.append(_card(fit["pick"] or "none fits", "fit: the pick"))
    lm = doc.get("llm")
    if lm:
        out += [_card(count(lm["params"]), f"parameters ({count(lm['active_params'])} active per token)"),
                _card(binary(lm["weights_bytes"]), f"weights in {lm['weights_scheme']}"),
                _card(binary(lm["kv_bytes_per_token"]), f"KV cache per token ({lm['kv_scheme']})")]
    bench = doc.get("bench")
    if bench and bench.get("points"):
        pt = bench["points"][0]
        out.append(_card(duration(pt["stats"]["median"]), f"measured median, batch {pt['batch']} on "
                                                          f"{bench['device']}"))
    return '<div class="cards">' + "".join(out) + "</div>"


def timeline(doc: dict[str, Any]) -> str:
    """Live bytes after every operator, stacked by torch.profiler's categories; phases shaded,
    the peak and (when it is in range) the accelerator's capacity marked."""
    mem = doc.get("memory") or {}
    tl = mem.get("timeline")
    if not tl:
        return ""
    W, H, L, R, T, B = 1000, 380, 100, 20, 56, 50
    events = max(tl["events"], 1)
    xs = Linear(-1, events - 1, L, W - R)
    peak = tl["peak_bytes"]
    acc = doc.get("accelerator")
    cap = acc["memory_bytes"] if acc else None
    top = max(peak * 1.08, 1)
    cap_shown = cap is not None and cap <= 4 * peak
    if cap_shown:
        top = max(top, cap * 1.04)
    ys = Linear(0, top, H - B, T)
    parts = [open_svg(W, H, "memory timeline", "timeline")]
    for k, (phase, a, b) in enumerate(tl["phases"]):
        x0, x1 = xs(a - 0.5), xs(b + 0.5)
        parts.append(f'<rect class="ph{k % 2}" x="{num(x0)}" y="{T}" width="{num(x1 - x0)}" height="{H - B - T}" '
                     f'data-tip="{esc(phase)}: operators {a} to {b}"/>'
                     f'<text class="tl" x="{num((x0 + x1) / 2)}" y="{T - 6}" text-anchor="middle">{esc(phase)}</text>')
    parts.append(y_axis(ys, L, W - R, binary, "live bytes", ticks=byte_ticks(0, top)))
    idx = tl["index"]
    px = [xs(i) for i in idx]
    cats = [c for c in tl["categories"] if any(tl["series"][c])]
    cum = [0] * len(idx)
    tops: list[list[int]] = []
    for c in cats:
        cum = [a + b for a, b in zip(cum, tl["series"][c])]
        tops.append(cum)
    # the largest stack first, each smaller one painted over it: one edge per category
    for c, line in reversed(list(zip(cats, tops))):
        path = polyline_points(px, [ys(v) for v in line])
        parts.append(f'<path class="{_cat_class(c)}" d="{path}L{num(px[-1])} {num(ys(0))}L{num(px[0])} '
                     f'{num(ys(0))}Z" data-tip="{esc(c)}"/>')
    py = ys(peak)
    at = xs(tl["peak_event"])
    parts.append(f'<line class="peak" x1="{L}" x2="{W - R}" y1="{num(py)}" y2="{num(py)}"/>'
                 f'<circle class="pt peakpt" cx="{num(at)}" cy="{num(py)}" r="4" '
                 f'data-tip="peak {esc(binary(peak))} after operator {tl["peak_event"]}"/>'
                 f'<text class="tl halo" x="{num(min(at + 6, W - R - 120))}" y="{num(py - 6)}">peak '
                 f'{esc(binary(peak))}</text>')
    off_scale = ""
    if cap is not None:
        if cap_shown:
            yc = ys(cap)
            parts.append(f'<line class="cap" x1="{L}" x2="{W - R}" y1="{num(yc)}" y2="{num(yc)}"/>'
                         f'<text class="tl halo" x="{W - R - 4}" y="{num(yc - 5)}" text-anchor="end">'
                         f'{esc(acc["name"])} '
                         f'capacity {esc(binary(cap))}</text>')
        else:
            off_scale = f"; {acc['name']}'s capacity, {binary(cap)}, is above this scale"
    parts.append(x_axis(xs, H - B, lambda v: f"{int(v)}", "operator (in execution order)",
                        ticks=[t for t in xs.ticks(8) if t >= 0]))
    parts.append(legend([(_cat_class(c), c) for c in cats], L, 16, step=112))
    parts.append("</svg>")
    note = (f'<p class="note">{esc(tl["method"] + off_scale)}; each point is an operator\'s high point (its '
            "outputs and scratch allocated, nothing freed yet). Categories and colours as torch.profiler's memory "
            "timeline.</p>")
    return "".join(parts) + note


def breakdown(doc: dict[str, Any]) -> str:
    """What is alive at the peak, by category, and the fixed overheads on top of it."""
    mem = doc.get("memory") or {}
    if not mem.get("peak"):
        return ""
    pk = mem["peak"]
    rows = [(cat, float(v), f"{cat}: {binary(v)} at the peak") for cat, v in pk["breakdown"].items()]
    rows += [(name.replace("_", " "), float(v), f"fixed overhead: {binary(v)}") for name, v in mem["overheads"].items()]
    where = f"after {pk['op']} in {pk['module'] or '<root>'} ({pk['phase']})"
    return hbars(rows, binary, f"at the peak, {binary(pk['peak_bytes'])} {where}", "breakdown", width=1000,
                 label_w=260)


def roofline(doc: dict[str, Any]) -> str:
    """Log-log roofline on the accelerator: one point per operator (identical calls merged)."""
    pred, acc = doc.get("predict"), doc.get("accelerator")
    if not pred or not pred.get("roofline"):
        return ""
    pts = pred["roofline"]
    c = pred["ceilings"]
    matrix = c["matrix_flops"].get(pred["main_dtype"]) or max(c["matrix_flops"].values())
    vector, bw = c["vector_flops"], c["bandwidth_bytes_per_s"]
    W, H, L, R, T, B = 1000, 420, 100, 20, 30, 50
    ilo = min(min(p["intensity"] for p in pts), vector / bw) / 3
    ihi = max(max(p["intensity"] for p in pts), matrix / bw) * 3
    flo = min(p["flop_per_s"] for p in pts) / 3
    fhi = matrix * 2
    xs, ys = Log(ilo, ihi, L, W - R), Log(flo, fhi, H - B, T)
    parts = [open_svg(W, H, "roofline", "roofline"),
             y_axis(ys, L, W - R, lambda v: si(v, "FLOP/s"), "attainable FLOP/s"),
             x_axis(xs, H - B, lambda v: f"{v:g}", "arithmetic intensity (FLOP per byte)")]
    for rate, label, dy in ((matrix, f"matrix {pred['main_dtype']} {si(matrix, 'FLOP/s')}", -5),
                            (vector, f"vector {si(vector, 'FLOP/s')}", 14)):  # matrix above its line, vector below
        ridge = rate / bw
        x0 = xs(max(ridge, ilo))
        parts.append(f'<path class="ceil" d="M{num(xs(ilo))} {num(ys(bw * ilo))}L{num(x0)} {num(ys(rate))}'
                     f'L{num(xs(ihi))} {num(ys(rate))}"/><text class="tl halo" x="{W - R - 4}" '
                     f'y="{num(ys(rate) + dy)}" text-anchor="end">{esc(label)}</text>')
    im = (ilo * matrix / bw) ** 0.5  # halfway (in log) along the bandwidth slope
    parts.append(f'<text class="tl" x="{num(xs(im) - 4)}" y="{num(ys(bw * im) - 6)}" text-anchor="end">'
                 f'memory {esc(si(bw, "B/s"))}</text>')
    longest = max(p["time_s"] for p in pts) or 1
    for p in sorted(pts, key=lambda p: -p["time_s"]):
        r = 2 + 10 * (p["time_s"] / longest) ** 0.5
        tip = (f"{p['op']} ({p['phase']}, {p['dtype']}) x{p['calls']}\nin {p['module'] or '<root>'}\n"
               f"{si(p['flops'], 'FLOP')}, {binary(p['bytes'])} per call; {p['intensity']:.3g} FLOP/B\n"
               f"{si(p['flop_per_s'], 'FLOP/s')}; {duration(p['time_s'])} in all; {p['bound']}-bound")
        parts.append(f'<circle class="pt {BOUND_CLASSES[p["bound"]]}" cx="{num(xs(p["intensity"]))}" '
                     f'cy="{num(ys(p["flop_per_s"]))}" r="{num(r)}" data-tip="{esc(tip)}"/>')
    parts.append(legend([(cls, f"{b}-bound") for b, cls in BOUND_CLASSES.items()], L + 10, T + 6))
    parts.append("</svg>")
    return "".join(parts) + (f'<p class="note">{len(pts)} points on {esc(acc["name"] if acc else pred["accelerator"])}'
                             f" ({esc(c['source'])} ceilings); a point's area is its predicted time; calls with the "
                             "same operator, FLOPs, bytes, dtype and phase share a point.</p>")


def _bar_depth(mods: list[dict[str, Any]]) -> int:
    """The shallowest depth with at least five modules (the model itself has depth 0)."""
    depths = sorted({m["depth"] for m in mods if m["depth"] > 0})
    for d in depths:
        if sum(1 for m in mods if m["depth"] == d) >= 5:
            return d
    return depths[-1] if depths else 0


def module_bars(doc: dict[str, Any], depth: int | None = None, top: int = 24) -> str:
    """Per-module bars at one depth: parameters, FLOPs, predicted time, activation bytes."""
    mods = doc.get("modules") or []
    if not mods:
        return ""
    d = _bar_depth(mods) if depth is None else depth
    level = [m for m in mods if m["depth"] == d]
    metrics = [("params", "parameters", count, ""), ("flops", "forward FLOPs", lambda v: si(v, "FLOP"), "alt")]
    if doc.get("predict"):
        metrics.append(("time_s", "predicted time (all phases)", duration, ""))
    if any(m.get("activation_bytes") for m in level):
        metrics.append(("activation_bytes", "activations saved for the backward", binary, "alt"))
    out = [f'<p class="note">modules at depth {d} ({len(level)}'
           + (f"; the {top} largest of each figure shown" if len(level) > top else "") + ')</p><div class="grid2">']
    for key, title, fmt, cls in metrics:
        rows = sorted(level, key=lambda m: -m[key])[:top] if len(level) > top else level
        out.append(hbars([(m["path"], m[key], f"{m['path']} ({m['type']}): {fmt(m[key])}") for m in rows],
                         fmt, title, cls))
    return "".join(out) + "</div>"


def fit_plot(doc: dict[str, Any]) -> str:
    """The accelerator comparison of ``fit``: memory needed against capacity, predicted
    latency, throughput at the largest batch; each bar with its value, an accelerator that
    does not fit said so and given no speed."""
    fit = doc.get("fit")
    if not fit or not fit.get("rows"):
        return ""
    rows = fit["rows"]
    W, L, bar_h, gap, top = 1000, 150, 14, 6, 40
    H = top + len(rows) * (bar_h + gap) + 30
    col = [(L, 400), (480, 700), (780, 930)]
    cap_hi = max(max(r["capacity_bytes"], r["need_bytes"]) for r in rows)
    lats = [r["latency_s"] for r in rows if r["latency_s"] and r["fits"]] or [1.0]
    thr_hi = max((r["throughput_samples_per_s"] or 0) for r in rows) or 1
    mem = Log(max(min(r["need_bytes"] for r in rows) / 2, 2**20), cap_hi * 1.2, col[0][0], col[0][1])
    lat = Log(min(lats) / 1.5, max(lats) * 1.1, col[1][0], col[1][1])  # latencies span decades
    thr = Linear(0, thr_hi, col[2][0], col[2][1])
    parts = [open_svg(W, H, "accelerator comparison", "fit"),
             f'<text class="pt" x="{L}" y="14">memory needed per rank (bar), capacity (tick)</text>'
             f'<text class="pt" x="{col[1][0]}" y="14">predicted latency, batch {fit["batch_per_rank"]} (log)</text>'
             f'<text class="pt" x="{col[2][0]}" y="14">samples/s at the largest batch</text>']
    for i, r in enumerate(rows):
        y = top + i * (bar_h + gap)
        name = r["accelerator"] + (" ✓" if r["accelerator"] == fit["pick"] else "")
        parts.append(f'<text class="tl" x="{L - 6}" y="{num(y + 11)}" text-anchor="end">{esc(name)}</text>')
        mem_lo = 10 ** mem.l0
        xn = mem(max(r["need_bytes"], mem_lo))
        xc = mem(max(r["capacity_bytes"], mem_lo))
        parts.append(f'<rect class="bar{"" if r["fits"] else " over"}" x="{col[0][0]}" y="{num(y)}" '
                     f'width="{num(max(xn - col[0][0], 1))}" height="{bar_h}" data-tip="{esc(r["name"])}: needs '
                     f'{esc(binary(r["need_bytes"]))} of {esc(binary(r["capacity_bytes"]))}'
                     f'{"" if r["fits"] else " (does not fit)"}"/>'
                     f'<line class="cap" x1="{num(xc)}" x2="{num(xc)}" y1="{num(y - 2)}" y2="{num(y + bar_h + 2)}"/>'
                     f'<text class="tl" x="{num(max(xn, xc) + 5)}" y="{num(y + 11)}">{esc(binary(r["need_bytes"]))}'
                     f' of {esc(binary(r["capacity_bytes"]))}</text>')
        if not r["fits"]:
            parts.append(f'<text class="tl nofit" x="{col[1][0]}" y="{num(y + 11)}">does not fit</text>')
            continue
        if r["latency_s"] is not None:
            w = lat(r["latency_s"]) - col[1][0]
            parts.append(f'<rect class="bar" x="{col[1][0]}" y="{num(y)}" width="{num(max(w, 1))}" height="{bar_h}" '
                         f'data-tip="{esc(r["name"])}: {esc(duration(r["latency_s"]))} ({r["bound"]}-bound)"/>'
                         f'<text class="tl" x="{num(col[1][0] + w + 4)}" y="{num(y + 11)}">'
                         f'{esc(duration(r["latency_s"]))}</text>')
        if r["throughput_samples_per_s"]:
            w = thr(r["throughput_samples_per_s"]) - col[2][0]
            parts.append(f'<rect class="bar alt" x="{col[2][0]}" y="{num(y)}" width="{num(max(w, 1))}" '
                         f'height="{bar_h}" data-tip="{esc(r["name"])}: {r["throughput_samples_per_s"]:,.1f} '
                         f'samples/s at batch {r["throughput_batch"]}"/>'
                         f'<text class="tl" x="{num(col[2][0] + w + 4)}" y="{num(y + 11)}">'
                         f'{r["throughput_samples_per_s"]:,.3g}</text>')
    lo_tick = 10 ** mem.l0
    parts.append(x_axis(mem, H - 24, binary, "", ticks=log_byte_ticks(lo_tick, 10 ** mem.l1, 5)))
    parts.append("</svg>")
    return "".join(parts) + f'<p class="note">pick: {esc(fit["pick"] or "none")} — {esc(fit["why"])}</p>'


def bench_plot(doc: dict[str, Any]) -> str:
    """Predicted beside measured, per batch size (when ``bench`` ran)."""
    bench = doc.get("bench")
    if not bench or not bench.get("points"):
        return ""
    rows = []
    for p in bench["points"]:
        st = p["stats"]
        rows.append((f"batch {p['batch']} measured", st["median"], f"median {duration(st['median'])}, p90 "
                     f"{duration(st['p90'])}, min {duration(st['min'])} ({st['reps']} calls)"))
        if p.get("predicted_s"):
            rows.append((f"batch {p['batch']} predicted", p["predicted_s"], f"roofline {duration(p['predicted_s'])}"))
    return hbars(rows, duration, f"latency on {bench['device']}: measured median and roofline prediction", "bench",
                 width=1000, label_w=220)


def module_tree(doc: dict[str, Any]) -> str:
    """Every module, collapsible (closed below depth 1), with its figures."""
    mods = doc.get("modules") or []
    if not mods:
        return ""
    head = ('<div class="mh"><span>module</span><span class="num">params</span><span class="num">forward FLOPs'
            '</span><span class="num">backward FLOPs</span><span class="num">predicted time</span>'
            '<span class="num">activations</span></div>')
    out: list[str] = [head]
    stack: list[int] = []
    for i, m in enumerate(mods):
        while stack and stack[-1] >= m["depth"]:
            out.append("</details>")
            stack.pop()
        leaf = i + 1 >= len(mods) or mods[i + 1]["depth"] <= m["depth"]
        name = (m["path"].rpartition(".")[2] or doc.get("model") or "model") + f" ({m['type']})"
        calls = f" x{m['calls']}" if m["calls"] > 1 else ""
        out.append(f'<details class="m{" leaf" if leaf else ""}"{" open" if m["depth"] < 1 else ""}'
                   f' data-path="{esc(m["path"])}"><summary><span style="padding-left:{14 * m["depth"]}px">'
                   f'{esc(name + calls)}</span>'
                   f'<span class="num">{count(m["params"])}</span><span class="num">{si(m["flops"], "FLOP")}</span>'
                   f'<span class="num">{si(m.get("backward_flops", 0), "FLOP")}</span>'
                   f'<span class="num">{duration(m["time_s"]) if m.get("time_s") else ""}</span>'
                   f'<span class="num">{binary(m["activation_bytes"]) if m.get("activation_bytes") else ""}</span>'
                   "</summary>")
        stack.append(m["depth"])
    out.extend("</details>" for _ in stack)
    return "".join(out)


def operators(doc: dict[str, Any], top: int = 25) -> str:
    ops = doc["profile"].get("by_operator") or []
    rows = "".join(f"<tr><td>{esc(o['op'])}</td><td>{esc(o['kind'])}</td><td>{o['calls']}</td>"
                   f"<td>{si(o['flops'], 'FLOP')}</td><td>{percent(o['share'])}</td>"
                   f"<td>{binary(o['bytes_read'] + o['bytes_written'])}</td></tr>" for o in ops[:top])
    more = f'<p class="note">{len(ops) - top} more operators in the embedded data</p>' if len(ops) > top else ""
    return ("<table><thead><tr><th>operator</th><th>kind</th><th>calls</th><th>FLOPs</th><th>share</th>"
            f"<th>bytes moved</th></tr></thead><tbody>{rows}</tbody></table>{more}")


def notes(doc: dict[str, Any]) -> str:
    seen: list[str] = []
    for src in (doc, doc.get("profile") or {}, doc.get("memory") or {}, doc.get("predict") or {},
                doc.get("fit") or {}, doc.get("bench") or {}):
        for n in src.get("notes") or []:
            if n not in seen:
                seen.append(n)
    return "<ul>" + "".join(f'<li class="note">{esc(n)}</li>' for n in seen) + "</ul>" if seen else ""


SECTIONS: list[tuple[str, str, Section]] = [
    ("Serving a language model", "llm", serving),
    ("Memory over the step", "memory", timeline),
    ("Memory at the peak", "memory", breakdown),
    ("Roofline", "predict", roofline),
    ("Modules", "modules", module_bars),
    ("Accelerators", "fit", fit_plot),
    ("Predicted and measured", "bench", bench_plot),
    ("Module tree", "modules", module_tree),
    ("Operators (forward)", "profile", operators),
    ("Notes", "profile", notes),
]
