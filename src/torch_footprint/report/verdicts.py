"""Terminal renderers for ``diff`` and ``check``: tables of what changed and what failed."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .terminal import as_text
from .units import binary, count, si

_VERDICT_STYLE = {"better": "green", "worse": "red bold", "same": "dim", "new": "cyan", "gone": "yellow"}


def value(v: float | None, unit: str) -> str:
    """A metric's value with its unit."""
    if v is None:
        return "—"
    if unit == "B":
        return binary(v)
    if unit == "params":
        return count(int(v))
    if unit in ("FLOP", "MAC"):
        return si(v, unit)
    if unit == "ms":
        return f"{v:.4g} ms"
    if unit in ("samples/s", "tokens/s"):
        return f"{v:,.1f} {unit}"
    return f"{v:g} {unit}".rstrip()


def change(v: float | None, unit: str) -> str:
    if v is None:
        return ""
    return ("+" if v > 0 else "-" if v < 0 else "±") + value(abs(v), unit)


def _changes_table(rows: list[dict[str, Any]], title: str, module: bool) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    if module:
        t.add_column("module", no_wrap=True)
    t.add_column("metric", no_wrap=True)
    for col in ("before", "after", "change", "%"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("", no_wrap=True, min_width=6)
    for c in rows:
        pct = f"{c['percent']:+.2f}%" if c["percent"] is not None else ""
        cells = [c["metric"], value(c["before"], c["unit"]), value(c["after"], c["unit"]),
                 change(c["change"], c["unit"]), pct, Text(c["verdict"], style=_VERDICT_STYLE[c["verdict"]])]
        t.add_row(*([c["module"] or "<root>"] if module else []), *cells)
    return t


@as_text
def render_diff(diff: Any, console: Console, top: int = 30) -> None:
    """A :class:`~torch_footprint.results.diff.Diff`: its metrics, then the modules that changed
    (the ``top`` largest changes by %)."""
    d = diff.to_dict()
    console.print(Text(f"{d['before']['model']} ({d['before']['sha256']}) -> {d['after']['model']} "
                       f"({d['after']['sha256']})", style="bold cyan"))
    console.print(_changes_table(d["metrics"], "by metric", module=False))
    mods = d["modules"]
    if mods:
        ranked = sorted(mods, key=lambda c: -abs(c["percent"]) if c["percent"] is not None else float("-inf"))
        shown = ranked[:top]
        title = "by module (changed only" + (f"; the {top} largest of {len(mods)} changes)" if len(mods) > top
                                            else ")")
        console.print(_changes_table(shown, title, module=True))
    else:
        console.print(Text("by module: no module changed", style="dim"))
    for n in d.get("notes", []):
        console.print(Text(f"note: {n}", style="dim"))


@as_text
def render_check(res: Any, console: Console) -> None:
    """A :class:`~torch_footprint.results.budget.CheckResult`: every cap, its value and limit;
    the failures in red; the verdict last."""
    results, passed, notes = res.to_dict()["results"], res.passed, res.notes
    t = Table(header_style="bold", pad_edge=False)
    for col, just in (("metric", "left"), ("rule", "left"), ("value", "right"), ("limit", "right"), ("", "left")):
        t.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    for r in results:
        verdict = Text("ok", style="green") if r["passed"] else Text("OVER" if r["value"] is not None else "MISSING",
                                                                    style="red bold")
        t.add_row(r["metric"], r["rule"], value(r["value"], r["unit"]), value(r["limit"], r["unit"]), verdict)
    console.print(t)
    for r in results:
        if r["reason"]:
            console.print(Text(f"{r['metric']}: {r['reason']}", style="yellow"))
    for n in notes:
        console.print(Text(f"note: {n}", style="yellow"))
    failed = sum(1 for r in results if not r["passed"])
    console.print(Text(f"budget met: {len(results)} caps" if passed else f"over budget: {failed} of "
                       f"{len(results)} caps failed", style="bold green" if passed else "bold red"))
