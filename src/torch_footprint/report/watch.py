"""Renderers for a watched run (``footprint watch``) and for the sampling figures of
``bench`` and ``llm --measure``. Formatting only: every number comes from the result.

* :func:`sample_lines`: one moment in the gpustat manner, a line per device and per process;
* :func:`plain_line`: the same moment on one line (output that is not a terminal);
* :func:`render_live`: a context manager whose callback shows each sample as it comes;
* :func:`render_watch`: the whole run as text; :func:`render_watch_html`: as an HTML page
  (:func:`watch_section_html` is its body, for a report that has its own page);
* :func:`sampling_lines`: the sampling summary of a ``bench`` point or an ``llm --measure`` run.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Iterator
from html import escape
from typing import Any

from .svg import Linear, esc, legend, num, open_svg, polyline_points, x_axis, y_axis
from .units import binary, duration, percent


def _d(result: Any) -> dict[str, Any]:
    return result if isinstance(result, dict) else result.to_dict()


def _what(d: dict[str, Any], limit: int = 100) -> str:
    """The command as a shell would show it, on one line (or the pid followed)."""
    if not d.get("command"):
        return f"pid {d.get('pid')}"
    text = shlex.join(d["command"]).replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _pct(x: float | None) -> str:
    return f"{100 * x:.0f} %" if x is not None else "– %"


def _w(x: float | None) -> str:
    return f"{x:.0f} W" if x is not None else ""


def _mem(used: int | None, total: int | None) -> str:
    if used is None:
        return ""
    return f"{binary(used)} / {binary(total)}" if total else binary(used)


# --- one moment ------------------------------------------------------------------------------

def sample_lines(sample: Any) -> list[str]:
    """A line per device, then a line per process (pid, name, resident memory, CPUs busy,
    threads, device memory), as gpustat and nvitop show them."""
    s = _d(sample)
    lines = []
    procs = s.get("processes", [])
    for key, d in s.get("devices", {}).items():
        if d.get("kind") == "gpu":
            temp = f"{d['temperature_c']}°C, " if d.get("temperature_c") is not None else ""
            clock = f" | {d['sm_clock_mhz']} MHz" if d.get("sm_clock_mhz") is not None else ""
            power = f" | {_w(d.get('power_w'))}" if d.get("power_w") is not None else ""
            jobs = d.get("processes", {})
            mine = " ".join(f"{p.get('name', '?')}/{p['pid']}({binary(jobs.get(p['pid'], jobs.get(str(p['pid']))))})"
                            for p in procs if p["pid"] in jobs or str(p["pid"]) in jobs)
            others = len(jobs) - sum(1 for p in procs if p["pid"] in jobs or str(p["pid"]) in jobs)
            tail = (" | " + mine if mine else "") + (f" (+{others} other)" if others > 0 else "")
            lines.append(f"[{d.get('index', key)}] {d.get('name', '')} | {temp}{_pct(d.get('utilisation'))}{clock} | "
                         f"{_mem(d.get('memory_used'), d.get('memory_total'))}{power}{tail}")
        else:
            power = f" | {_w(d.get('power_w'))} package" if d.get("power_w") is not None else ""
            lines.append(f"[cpu] {d.get('name', '')} | {_pct(d.get('utilisation'))} busy | "
                         f"{_mem(d.get('memory_used'), d.get('memory_total'))}{power}")
    for p in procs:
        cpu = f"{p['cpu']:.2f} CPUs" if p.get("cpu") is not None else "– CPUs"
        n = p.get("threads", 0)
        lines.append(f"  {p['pid']:>7} {str(p.get('name', ''))[:20]:<20} RSS {binary(p.get('rss', 0)):>10}  {cpu}  "
                     f"{n} thread{'' if n == 1 else 's'}")
    return lines


def plain_line(sample: Any) -> str:
    """One moment on one line: time, each device (memory, utilisation, power), the job's
    resident memory and CPUs."""
    s = _d(sample)
    parts = [f"{s['t']:8.1f} s"]
    for key, d in s.get("devices", {}).items():
        part = f"{key} {_pct(d.get('utilisation'))}"
        if d.get("memory_used") is not None:
            part += f" {_mem(d.get('memory_used'), d.get('memory_total'))}"
        if d.get("power_w") is not None:
            part += f" {_w(d['power_w'])}"
        parts.append(part)
    procs = s.get("processes", [])
    if procs:
        cpu = sum(p["cpu"] for p in procs if p.get("cpu") is not None)
        parts.append(f"job: {len(procs)} process{'es' if len(procs) != 1 else ''}, RSS "
                     f"{binary(sum(p.get('rss', 0) for p in procs))}, {cpu:.2f} CPUs")
    else:
        parts.append("job: no process")
    return " | ".join(parts)


@contextlib.contextmanager
def render_live(console: Any = None, plain: bool | None = None,
                title: str = "footprint watch") -> Iterator[Callable[[Any, Any], None]]:
    """A callback for :func:`torch_footprint.measure.watch.watch`'s ``on_sample``: on a
    terminal a live panel of :func:`sample_lines` (rich), redrawn at each sample; otherwise
    (``plain``, or output piped) :func:`plain_line` printed once per sample."""
    from rich.console import Console

    console = console or Console()
    if plain is None:
        plain = not console.is_terminal
    if plain:
        def show_plain(sample: Any, result: Any = None) -> None:
            print(plain_line(sample), file=console.file, flush=True)

        yield show_plain
        return
    from rich.live import Live
    from rich.text import Text

    with Live(Text(f"{title}: starting"), console=console, auto_refresh=False, transient=False) as live:
        def show(sample: Any, result: Any = None) -> None:
            s = _d(sample)
            head = Text(f"{title}  ·  {s['t']:.1f} s", style="bold cyan")
            if result is not None:
                head.append("  ·  " + _what({"command": result.command, "pid": result.pid}, 60), style="dim")
            body = Text("\n").join([head, *(Text(line) for line in sample_lines(s))])
            live.update(body, refresh=True)

        yield show


# --- the whole run ---------------------------------------------------------------------------

def _ended(d: dict[str, Any]) -> str:
    how = d.get("ended")
    if how == "exited":
        return f"exited with status {d.get('exit_code')}"
    if how == "interrupted":
        return "interrupted (Ctrl-C): the job was stopped; the timeline up to then is kept"
    if how == "gone":
        return "the process ended"
    if how == "time limit":
        return "stopped at the time limit"
    return str(how)


def render_watch(result: Any) -> str:
    """The run as text: how it ended, each device's and process's peaks and means, the
    prediction beside the observed peak, the findings, and what could not be read."""
    d = _d(result)
    s = d.get("summary", {})
    lines = [f"footprint watch: {_what(d)}",
             f"  {duration(d.get('duration_s', 0.0))}, {s.get('samples', 0)} samples every "
             f"{duration(d['interval_s'])}; {_ended(d)}"]
    for key, dev in s.get("devices", {}).items():
        line = f"  {key} {dev.get('name') or ''}:"
        if dev.get("memory_used_peak") is not None:
            line += f" memory used peak {_mem(dev['memory_used_peak'], dev.get('memory_total'))}"
            if dev.get("memory_used_first") is not None:
                line += f" (at the start {binary(dev['memory_used_first'])})"
            line += ";"
        if dev.get("utilisation_mean") is not None:
            line += f" {percent(dev['utilisation_mean'])} busy on average;"
        if dev.get("power_w_mean") is not None:
            line += f" {dev['power_w_mean']:.1f} W mean, {dev.get('power_w_peak') or 0:.1f} W peak;"
        if dev.get("energy_j") is not None:
            line += f" {dev['energy_j']:.1f} J;"
        lines.append(line.rstrip(";"))
    for p in s.get("processes", []):
        gpu = "".join(f", {k} {binary(v)}" for k, v in p.get("device_memory_peak", {}).items())
        cpu = f", {p['cpu_mean']:.2f} CPUs on average" if p.get("cpu_mean") is not None else ""
        n = p.get("threads_peak", 0)
        lines.append(f"  pid {p['pid']} {p.get('name') or ''}: RSS peak {binary(p['rss_peak'])} at "
                     f"{p['rss_peak_t']:.1f} s{cpu}, {n} thread{'' if n == 1 else 's'}{gpu}")
    cmp = d.get("comparison")
    if cmp:
        lines.append(f"  predicted: {binary(cmp['predicted_peak_bytes'])} peak of the step's tensors"
                     + "".join(f" + {binary(v)} {k.replace('_', ' ')}" for k, v in cmp["predicted_overheads"].items())
                     + f" = {binary(cmp['predicted_total_bytes'])}")
        lines.append(f"  observed:  {binary(cmp['observed_peak_bytes'])} ({cmp['observed'].get('source', '')})")
        sign = "+" if cmp["difference_bytes"] >= 0 else "-"
        share = f" ({cmp['difference_share']:+.1%})" if cmp.get("difference_share") is not None else ""
        lines.append(f"  difference: {sign}{binary(abs(cmp['difference_bytes']))}{share}")
        for part in cmp["parts"]:
            sign = "+" if part["bytes"] >= 0 else "-"
            lines.append(f"    {sign}{binary(abs(part['bytes'])):>10}  {part['name']}: {part['what']}")
        for note in cmp.get("notes", []):
            lines.append(f"  note: {note}")
    for f in d.get("findings", []):
        lines.append(f"  finding: {f}")
    for what_, why in d.get("unavailable", {}).items():
        lines.append(f"  not read: {what_}: {why}")
    for note in d.get("notes", []):
        lines.append(f"  note: {note}")
    return "\n".join(lines) + "\n"


def sampling_lines(sampling: dict[str, Any] | None, item: str = "sample", label: str = "",
                   unavailable: bool = True) -> list[str]:
    """A ``bench`` point's or an ``llm --measure`` run's sampling, as lines: how busy the
    device was (and idle), the resident memory, each thread's CPU share, the GPU's figures,
    power and energy per ``item``, and (``unavailable``) what was not available and why."""
    if not sampling:
        return []
    pre = f"{label}: " if label else ""
    out = []
    busy = sampling.get("device_busy")
    if busy is not None:
        cause = f"; {sampling['idle_cause']}" if sampling.get("idle_cause") else ""
        out.append(f"{pre}the device was busy {percent(busy)} of the timed steps, idle {percent(1 - busy)} "
                   f"({sampling.get('device_busy_source', '')}{cause})")
    if sampling.get("rss_peak") is not None:
        out.append(f"{pre}RSS peak {binary(sampling['rss_peak'])}, mean {binary(sampling['rss_mean'])} "
                   f"({sampling.get('samples', 0)} samples every {duration(sampling.get('interval_s', 0))})")
    shares = sampling.get("thread_cpu_shares")
    if shares:
        shown = ", ".join(percent(x) for x in shares[:8]) + (", ..." if len(shares) > 8 else "")
        out.append(f"{pre}CPU share per busy thread: {shown} ({len(shares)} of {sampling.get('threads')} "
                   f"thread{'' if sampling.get('threads') == 1 else 's'} over 1%)")
    gpu = sampling.get("gpu")
    if gpu:
        bits = []
        if gpu.get("utilisation_mean") is not None:
            bits.append(f"utilisation {percent(gpu['utilisation_mean'])}")
        if gpu.get("memory_utilisation_mean") is not None:
            bits.append(f"memory busy {percent(gpu['memory_utilisation_mean'])}")
        if gpu.get("sm_clock_mhz_mean") is not None:
            bits.append(f"SM clock {gpu['sm_clock_mhz_mean']:.0f} MHz")
        if gpu.get("memory_used_peak") is not None:
            bits.append(f"device memory used {_mem(gpu['memory_used_peak'], gpu.get('memory_total'))}")
        if gpu.get("process_memory_peak") is not None:
            bits.append(f"this process {binary(gpu['process_memory_peak'])}")
        if gpu.get("torch_reserved_peak") is not None:
            bits.append(f"torch reserved {binary(gpu['torch_reserved_peak'])}, allocated "
                        f"{binary(gpu['torch_allocated_peak'])}")
        out.append(f"{pre}{gpu.get('name') or 'GPU'} (NVML): " + "; ".join(bits))
    if sampling.get("energy_j") is not None:
        per = sampling.get(f"energy_per_{item}_j")
        per_text = f", {per:.3g} J per {item}" if per is not None else ""
        out.append(f"{pre}energy {sampling['energy_j']:.1f} J, {sampling.get('power_w') or 0:.1f} W mean{per_text} "
                   f"({sampling.get('energy_source', '')})")
    for what, why in sampling.get("unavailable", {}).items() if unavailable else ():
        out.append(f"{pre}{what} not available: {why}")
    return out


# --- HTML ------------------------------------------------------------------------------------

CSS = """
:root{--bg:#fff;--fg:#1b1f24;--muted:#5b636d;--card:#f4f6f8;--line:#c9d1d9;--grid:#e6e9ed}
@media (prefers-color-scheme:dark){:root{--bg:#111418;--fg:#e6e9ed;--muted:#9aa4ae;--card:#1c2128;
--line:#444c56;--grid:#2a3038}}
body{background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;
margin:0 auto;max-width:1100px;padding:16px 24px}
h1{font-size:22px;margin:4px 0}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid var(--line)}
.sub,.note{color:var(--muted)}.verdict{font-size:16px;margin:10px 0}
svg.plot{display:block;max-width:100%;height:auto;margin:6px 0}
svg text{fill:var(--fg);font-size:11px}svg .at,svg .pt{font-weight:600}
svg .axis,svg .tick{stroke:var(--muted)}svg .grid{stroke:var(--grid)}
path.s0{stroke:#0b62c4;fill:none;stroke-width:1.6}path.s1{stroke:#e07b00;fill:none;stroke-width:1.6}
path.s2{stroke:#2da44e;fill:none;stroke-width:1.6}path.s3{stroke:#8250df;fill:none;stroke-width:1.6}
line.pred{stroke:#d1242f;stroke-dasharray:6 4;stroke-width:1.4}line.base{stroke:var(--muted);stroke-dasharray:2 3}
rect.s0{fill:#0b62c4}rect.s1{fill:#e07b00}rect.s2{fill:#2da44e}rect.s3{fill:#8250df}rect.pred{fill:#d1242f}
rect.base{fill:var(--muted)}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;margin:6px 0}
td,th{padding:2px 10px;border-bottom:1px solid var(--grid);text-align:right}
td:first-child,th:first-child{text-align:left}
"""


def _series(samples: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Memory over time (bytes): each device's used memory, the job's device memory per GPU,
    the job's resident memory (all processes)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        pids = {p["pid"] for p in s.get("processes", [])}
        for key, d in s.get("devices", {}).items():
            if d.get("kind") == "gpu":
                if d.get("memory_used") is not None:
                    out.setdefault(f"{key} used (every process)", []).append((s["t"], d["memory_used"]))
                procs = d.get("processes", {})
                mine = sum(b for pid, b in procs.items() if int(pid) in pids)
                out.setdefault(f"{key}: the job", []).append((s["t"], mine))
        out.setdefault("the job's RSS", []).append((s["t"], sum(p.get("rss", 0) for p in s.get("processes", []))))
    return out


def _byte_unit(hi: float) -> tuple[float, str]:
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if hi >= scale:
            return scale, unit
    return 1.0, "B"


def _line_plot(series: dict[str, list[tuple[float, float]]], title: str, y_title: str, fmt: Callable[[float], str],
               hlines: list[tuple[str, float, str]] | None = None, x_title: str = "seconds since the start",
               x_hi: float | None = None, in_bytes: bool = False) -> str:
    """Lines over time (and dashed levels across); ``in_bytes``: the axis in one binary unit
    (ticks at round numbers of it)."""
    w, h, left, right, bottom = 860, 300, 100, 20, 50
    points = [p for ser in series.values() for p in ser]
    if not points:
        return ""
    hl = list(hlines or [])
    if in_bytes:
        scale, unit = _byte_unit(max([y for _, y in points] + [v for _, v, _ in hl]))
        series = {k: [(t, y / scale) for t, y in ser] for k, ser in series.items()}
        points = [p for ser in series.values() for p in ser]
        hl = [(label, v / scale, cls) for label, v, cls in hl]
        y_title = f"{y_title} ({unit})"

        def fmt(v: float) -> str:
            return f"{v:g} {unit}"
    keys = [(f"s{i % 4}", name) for i, (name, ser) in enumerate(series.items()) if ser]
    keys += [(cls, label) for label, _, cls in hl]
    spots, x, row = [], left + 10.0, 0  # legend items in rows, as wide as their labels
    for cls, label in keys:
        width = 24 + 6.2 * len(label)
        if x + width > w - right and x > left + 10:
            x, row = left + 10.0, row + 1
        spots.append((cls, label, x, 28 + 16 * row))
        x += width
    top = 44 + 16 * row
    hi = max([y for _, y in points] + [v for _, v, _ in hl]) * 1.08 or 1.0
    lo = min(0.0, min(y for _, y in points))
    t_hi = x_hi if x_hi is not None else max(t for t, _ in points)
    sx = Linear(min(0.0, min(t for t, _ in points)), t_hi, left, w - right)
    sy = Linear(lo, hi, h - bottom, top)
    parts = [open_svg(w, h, title, "watch"), f'<text class="pt" x="4" y="14">{esc(title)}</text>',
             y_axis(sy, left, w - right, fmt, y_title), x_axis(sx, h - bottom, lambda v: f"{v:g}", x_title)]
    for (cls, name), ser in zip(keys, (ser for ser in series.values() if ser)):
        parts.append(f'<path class="{cls}" d="{polyline_points([sx(t) for t, _ in ser], [sy(y) for _, y in ser])}">'
                     f"<title>{esc(name)}</title></path>")
    for label, v, cls in hl:
        parts.append(f'<line class="{cls}" x1="{left}" x2="{w - right}" y1="{num(sy(v))}" y2="{num(sy(v))}">'
                     f"<title>{esc(label)}: {esc(fmt(v))}</title></line>")
    parts += [legend([(cls, label)], x, y) for cls, label, x, y in spots]
    parts.append("</svg>")
    return "".join(parts)


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def watch_section_html(result: Any) -> str:
    """The run's body (no page around it): verdict, memory over time beside the prediction,
    utilisation and power over time, the peaks by device and process, the comparison."""
    d = _d(result)
    s = d.get("summary", {})
    samples = d.get("samples", [])
    cmp = d.get("comparison")
    body = [f'<p class="verdict">{escape(_ended(d))}</p><ul class="findings">'
            + "".join(f"<li>{escape(f)}</li>" for f in d.get("findings", [])) + "</ul>"]
    hlines = []
    if cmp:
        hlines.append(("predicted: step peak + overheads", float(cmp["predicted_total_bytes"]), "pred"))
        base = cmp["observed"].get("baseline_bytes")
        if base is not None:
            hlines.append(("bare interpreter + predicted step peak", float(base + cmp["predicted_peak_bytes"]), "base"))
    body.append(_line_plot(_series(samples), "memory over the run", "memory", binary, hlines, in_bytes=True))
    util = {}
    power = {}
    for smp in samples:
        for key, dev in smp.get("devices", {}).items():
            if dev.get("utilisation") is not None:
                label = f"{key}: every process" if dev.get("kind") == "cpu" else f"{key} utilisation"
                util.setdefault(label, []).append((smp["t"], 100 * dev["utilisation"]))
            if dev.get("kind") == "cpu" and dev.get("cpus") and smp.get("processes"):
                cores = sum(p["cpu"] for p in smp["processes"] if p.get("cpu") is not None)
                util.setdefault("the job's share of the CPUs", []).append((smp["t"], 100 * cores / dev["cpus"]))
            if dev.get("power_w") is not None:
                power.setdefault(f"{key} power", []).append((smp["t"], dev["power_w"]))
    body.append(_line_plot(util, "utilisation over the run", "% busy", lambda v: f"{v:.0f} %"))
    if power:
        body.append(_line_plot(power, "power over the run", "watts", lambda v: f"{v:.0f} W"))
    pred = d.get("predicted") or {}
    if pred.get("timeline"):
        tl = [(float(t), float(b)) for t, b in pred["timeline"]]
        body.append(_line_plot({"predicted tensors over one step": tl}, "predicted memory over one step", "memory",
                               binary, x_title="fraction of the step", x_hi=1.0, in_bytes=True))
    rows = [[k, dev.get("name") or "", _mem(dev.get("memory_used_peak"), dev.get("memory_total")),
             percent(dev["utilisation_mean"]) if dev.get("utilisation_mean") is not None else "",
             f"{dev['power_w_mean']:.1f} W" if dev.get("power_w_mean") is not None else "",
             f"{dev['energy_j']:.1f} J" if dev.get("energy_j") is not None else ""]
            for k, dev in s.get("devices", {}).items()]
    body.append("<h2>devices</h2>" + _table(["device", "name", "memory used, peak", "busy", "power", "energy"], rows))
    rows = [[str(p["pid"]), p.get("name") or "", binary(p["rss_peak"]), f"{p['rss_peak_t']:.1f} s",
             f"{p['cpu_mean']:.2f}" if p.get("cpu_mean") is not None else "", str(p.get("threads_peak", 0)),
             ", ".join(f"{k} {binary(v)}" for k, v in p.get("device_memory_peak", {}).items())]
            for p in s.get("processes", [])]
    body.append("<h2>processes</h2>" + _table(["pid", "name", "RSS peak", "at", "CPUs (mean)", "threads",
                                               "device memory peak"], rows))
    if cmp:
        rows = [["predicted peak of the step's tensors", binary(cmp["predicted_peak_bytes"]), ""]]
        rows += [[f"+ {k.replace('_', ' ')}", binary(v), ""] for k, v in cmp["predicted_overheads"].items()]
        rows += [["predicted", binary(cmp["predicted_total_bytes"]), ""],
                 ["observed", binary(cmp["observed_peak_bytes"]), cmp["observed"].get("source", "")],
                 ["difference", ("+" if cmp["difference_bytes"] >= 0 else "-") + binary(abs(cmp["difference_bytes"])),
                  f"{cmp['difference_share']:+.1%}" if cmp.get("difference_share") is not None else ""]]
        rows += [[f"  {p['name']}", ("+" if p["bytes"] >= 0 else "-") + binary(abs(p["bytes"])), p["what"]]
                 for p in cmp["parts"]]
        body.append("<h2>observed peak against the prediction</h2>" + _table(["", "bytes", ""], rows)
                    + "".join(f'<p class="note">{escape(n)}</p>' for n in cmp.get("notes", [])))
    gone = [f"{k}: {v}" for k, v in d.get("unavailable", {}).items()] + list(d.get("notes", []))
    if gone:
        body.append("<h2>notes</h2>" + "".join(f'<p class="note">{escape(n)}</p>' for n in gone))
    return "".join(body)


def render_watch_html(result: Any) -> str:
    """A whole page (offline: inline SVG and CSS, no script) of :func:`watch_section_html`."""
    d = _d(result)
    what = _what(d, 200)
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><title>footprint watch: '
            f"{escape(what)}</title><style>{CSS}</style></head><body>"
            f"<h1>footprint watch</h1><p class=\"sub\">{escape(what)} · {escape(duration(d.get('duration_s', 0.0)))}"
            f" · a sample every {escape(duration(d['interval_s']))}</p>{watch_section_html(d)}</body></html>\n")


__all__ = ["plain_line", "render_live", "render_watch", "render_watch_html", "sample_lines", "sampling_lines",
           "watch_section_html"]
